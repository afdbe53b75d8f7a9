// Helpers shared by the terrace subcommands.
#include "tools/cli_util.h"

#include <fstream>
#include <random>

namespace terrace::cli {

int64_t parse_count(const std::string& option, const std::string& text) {
  size_t used = 0;
  long long v = -1;
  try { v = std::stoll(text, &used); } catch (...) {}
  if (v < 0 || used != text.size())
    throw UsageError{option + " expects a non-negative integer, got '" + text + "'"};
  return v;
}

std::pair<std::string, std::string> split_assignment(const std::string& option, const std::string& text) {
  size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0)
    throw UsageError{option + " expects NAME=VALUE, got '" + text + "'"};
  return {text.substr(0, eq), text.substr(eq + 1)};
}

const std::string& next_value(const Args& args, size_t& i) {
  if (i + 1 >= args.size()) throw UsageError{args[i] + " needs a value"};
  return args[++i];
}

Tier parse_tier(const std::string& text) {
  if (text == "interp") return Tier::Interp;
  if (text == "cpu") return Tier::Cpu;
  if (text == "gpu") return Tier::Gpu;
  throw UsageError{"--tier expects interp, cpu or gpu, got '" + text + "'"};
}

NamedTensors random_inputs(const Graph& g, uint64_t seed,
                           const std::vector<std::pair<std::string, int64_t>>& dims) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> real(-1.0, 1.0);
  std::uniform_int_distribution<int> small(0, 9);
  NamedTensors out;
  for (int id : g.inputs) {
    const Value& v = g.values[size_t(id)];
    TERRACE_CHECK(v.info.dtype && v.info.shape, InvalidArgument, "input '", v.name,
                  "' has no declared dtype and shape; give it with --input");
    Shape shape = *v.info.shape;
    for (size_t d = 0; d < shape.size(); ++d) {
      if (shape[d] >= 0) continue;
      shape[d] = 1;
      const std::string& sym = d < v.info.dim_names.size() ? v.info.dim_names[d] : std::string();
      for (auto& [n, val] : dims)
        if (n == sym) shape[d] = val;
    }
    Tensor t = Tensor::empty(*v.info.dtype, shape);
    dispatch_dtype(t.dtype(), [&](auto tag) {
      using T = decltype(tag);
      T* p = t.data<T>();
      for (int64_t i = 0; i < t.numel(); ++i) {
        if constexpr (std::is_same_v<T, bool>) p[i] = small(rng) & 1;
        else if constexpr (std::is_integral_v<T>) p[i] = T(small(rng));
        else p[i] = T(float(real(rng)));
      }
    });
    out.emplace_back(v.name, std::move(t));
  }
  return out;
}

void write_text_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  TERRACE_CHECK(f.good(), IoError, "cannot write '", path, "'");
}

}  // namespace terrace::cli
