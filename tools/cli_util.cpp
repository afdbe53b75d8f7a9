// Helpers shared by the terrace subcommands.
#include "tools/cli_util.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>

#include "tiers/backend.h"

namespace terrace::cli {

// ---- option definitions ----

bool ParsedArgs::has(const std::string& name) const {
  for (auto& [n, v] : options)
    if (n == name) return true;
  return false;
}

std::optional<std::string> ParsedArgs::get(const std::string& name) const {
  for (auto& [n, v] : options)
    if (n == name) return v;
  return std::nullopt;
}

std::vector<std::string> ParsedArgs::all(const std::string& name) const {
  std::vector<std::string> out;
  for (auto& [n, v] : options)
    if (n == name) out.push_back(v);
  return out;
}

namespace {

std::string see_help(const CommandDef& def) {
  return synopsis(def) + "\n(terrace " + def.name + " --help lists the options)";
}

const OptionDef* find_option(const CommandDef& def, const std::string& name) {
  for (const OptionDef& o : def.options)
    if (name == o.name || (o.alias && name == o.alias)) return &o;
  return nullptr;
}

std::string option_usage(const OptionDef& o) {
  std::string s = std::string("[") + o.name + (o.value ? std::string(" ") + o.value : "") + "]";
  return o.repeatable ? s + "..." : s;
}

}  // namespace

ParsedArgs parse_args(const CommandDef& def, const Args& args) {
  ParsedArgs p;
  p.def = &def;
  std::set<std::string> seen;
  bool only_operands = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (only_operands || a.size() < 2 || a[0] != '-') {
      p.operands.push_back(a);
      continue;
    }
    if (a == "--") {
      only_operands = true;
      continue;
    }
    if (a == "--help" || a == "-h") {
      p.help = true;
      continue;
    }
    std::string name = a;
    std::optional<std::string> value;
    if (size_t eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
      name = a.substr(0, eq);
      value = a.substr(eq + 1);
    }
    const OptionDef* o = find_option(def, name);
    if (!o && a.rfind("--", 0) != 0 && a.size() > 2) {
      // -j4: a one-letter option with its value attached
      if (const OptionDef* shortopt = find_option(def, a.substr(0, 2)); shortopt && shortopt->value) {
        o = shortopt;
        value = a.substr(2);
      }
    }
    if (!o) throw UsageError{"unknown option '" + name + "'\n" + see_help(def)};
    if (!o->value && value) throw UsageError{std::string(o->name) + " takes no value, got '" + a + "'"};
    if (o->value && !value) {
      if (i + 1 >= args.size())
        throw UsageError{std::string(o->name) + " needs a value (" + o->name + " " + o->value + ")"};
      value = args[++i];
    }
    if (!o->repeatable && !seen.insert(o->name).second)
      throw UsageError{std::string(o->name) + " given twice"};
    p.options.emplace_back(o->name, value.value_or(""));
  }
  if (p.help) return p;
  if (p.operands.size() < def.min_operands)
    throw UsageError{std::string("no ") + def.operand_name + " given\n" + see_help(def)};
  if (p.operands.size() > def.max_operands)
    throw UsageError{std::string(def.max_operands == 1 ? "more than one " : "too many ") + def.operand_name +
                     (def.max_operands == 1 ? "" : "s") + " given: '" + p.operands[def.max_operands] + "'\n" +
                     see_help(def)};
  return p;
}

std::string synopsis(const CommandDef& def, size_t width) {
  std::string head = std::string("terrace ") + def.name + (*def.operands ? " " : "") + def.operands;
  std::string indent(std::string("terrace ").size() + std::strlen(def.name) + 1, ' ');
  std::string out = head, line = head;
  for (const OptionDef& o : def.options) {
    std::string part = option_usage(o);
    if (line.size() + 1 + part.size() > width) {
      out += "\n" + indent + part;
      line = indent + part;
    } else {
      out += " " + part;
      line += " " + part;
    }
  }
  return out;
}

std::string wrap(const std::string& text, size_t width, const std::string& indent) {
  std::string out, line = indent;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(' ', start);
    if (end == std::string::npos) end = text.size();
    std::string word = text.substr(start, end - start);
    if (line.size() > indent.size() && line.size() + 1 + word.size() > width) {
      out += line + "\n";
      line = indent;
    }
    line += (line.size() > indent.size() ? " " : "") + word;
    start = end + 1;
  }
  return out + line + "\n";
}

std::string help_text(const CommandDef& def) {
  std::string s = "usage: " + synopsis(def) + "\n\n" + wrap(def.summary, 100, "") + "\noptions:\n";
  std::vector<std::pair<std::string, std::string>> rows;
  for (const OptionDef& o : def.options) {
    std::string left = std::string(o.alias ? std::string(o.alias) + ", " : "") + o.name +
                       (o.value ? std::string(" ") + o.value : "");
    rows.emplace_back(left, std::string(o.help) + (o.repeatable ? " (repeatable)" : ""));
  }
  rows.emplace_back("-h, --help", "this help");
  size_t w = 0;
  for (auto& [l, r] : rows) w = std::max(w, l.size());
  for (auto& [l, r] : rows) s += "  " + l + std::string(w + 2 - l.size(), ' ') + r + "\n";
  s += "\nOptions take their value as `--opt value` or `--opt=value`. Exit codes: 0 success, 1 failure,\n"
       "2 usage error.\n";
  if (def.details) s += std::string("\n") + def.details;
  return s;
}

// ---- values ----

int64_t parse_count(const std::string& option, const std::string& text) {
  size_t used = 0;
  long long v = -1;
  try { v = std::stoll(text, &used); } catch (...) {}
  if (v < 0 || used != text.size() || text.empty() || text[0] == '+' || std::isspace((unsigned char)text[0]))
    throw UsageError{option + " expects a non-negative integer, got '" + text + "'"};
  return v;
}

int64_t parse_positive(const std::string& option, const std::string& text) {
  int64_t v = parse_count(option, text);
  if (v < 1) throw UsageError{option + " must be at least 1, got '" + text + "'"};
  return v;
}

std::pair<std::string, std::string> split_assignment(const std::string& option, const std::string& text) {
  size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0)
    throw UsageError{option + " expects NAME=VALUE, got '" + text + "'"};
  if (eq + 1 == text.size())
    throw UsageError{option + " " + text + ": no value after '=' (" + option + " NAME=VALUE)"};
  return {text.substr(0, eq), text.substr(eq + 1)};
}

std::vector<std::pair<std::string, std::string>> assignments(const ParsedArgs& p, const std::string& option) {
  std::vector<std::pair<std::string, std::string>> out;
  std::set<std::string> names;
  for (const std::string& text : p.all(option)) {
    auto kv = split_assignment(option, text);
    if (!names.insert(kv.first).second)
      throw UsageError{option + " given twice for '" + kv.first + "'"};
    out.push_back(std::move(kv));
  }
  return out;
}

Tier parse_tier(const std::string& text) {
  if (text == "interp") return Tier::Interp;
  if (text == "cpu") return Tier::Cpu;
  if (text == "gpu") return Tier::Gpu;
  throw UsageError{"--tier expects interp, cpu or gpu, got '" + text + "'"};
}

// ---- tiers ----

namespace {
struct Availability {
  Tier highest = Tier::Interp;
  std::string gpu_why;  // why there is no tier 2
};
const Availability& availability() {
  static const Availability a = [] {
    Availability r;
    if (!make_cpu_backend()) {
      r.gpu_why = "this build has no tier-1 JIT";
      return r;
    }
    r.highest = make_gpu_backend("", &r.gpu_why) ? Tier::Gpu : Tier::Cpu;
    return r;
  }();
  return a;
}
}  // namespace

Tier highest_available_tier() { return availability().highest; }

std::string tier_unavailable_reason(Tier t) {
  if (t <= availability().highest) return "";
  return t == Tier::Gpu ? availability().gpu_why : "this build has no tier-1 JIT";
}

bool tier_from_env() { return std::getenv("TERRACE_MAX_TIER") != nullptr; }

Tier effective_tier(const char* command, Tier requested, bool explicitly_requested) {
  Tier available = highest_available_tier();
  if (requested <= available) return requested;
  if (explicitly_requested) {
    std::fprintf(stderr, "terrace %s: tier %s is not available (%s); running on tier %s instead\n", command,
                 tier_name(requested), tier_unavailable_reason(requested).c_str(), tier_name(available));
  }
  return available;
}

// ---- inputs ----

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
    Tensor t;
    try {
      t = Tensor::empty(*v.info.dtype, shape);
    } catch (const Error& e) {  // say which input it was: the shape came from the model and --dim
      fail(e.code(), "random input '", v.name, "': ", e.message());
    }
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

void check_dim_names(const Graph& g, const std::vector<std::pair<std::string, int64_t>>& dims,
                     const std::string& option) {
  std::set<std::string> symbolic;
  for (int id : g.inputs) {
    const Value& v = g.values[size_t(id)];
    if (!v.info.shape) continue;
    for (size_t d = 0; d < v.info.shape->size(); ++d)
      if ((*v.info.shape)[d] < 0 && d < v.info.dim_names.size() && !v.info.dim_names[d].empty())
        symbolic.insert(v.info.dim_names[d]);
  }
  for (auto& [name, value] : dims) {
    if (symbolic.count(name)) continue;
    std::string known;
    for (const std::string& s : symbolic) known += (known.empty() ? "" : ", ") + s;
    throw UsageError{option + " " + name + "=" + std::to_string(value) + ": no graph input has a symbolic dim named '" +
                     name + "' (" + (known.empty() ? "the model has none" : "the model's: " + known) + ")"};
  }
}

void check_input_name(const Graph& g, const std::string& name, const std::string& option) {
  std::string known;
  for (int id : g.inputs) {
    if (g.values[size_t(id)].name == name) return;
    known += (known.empty() ? "" : ", ") + g.values[size_t(id)].name;
  }
  throw UsageError{option + " names '" + name + "', which is not a graph input (inputs: " + known + ")"};
}

// ---- output ----

void write_text_file(const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  TERRACE_CHECK(f, IoError, "cannot write '", path, "': ", std::strerror(errno));
  size_t written = std::fwrite(text.data(), 1, text.size(), f);
  int err = written == text.size() ? 0 : errno;
  if (std::fflush(f) != 0 && !err) err = errno;
  if (std::fclose(f) != 0 && !err) err = errno;
  if (written != text.size() && !err) err = EIO;
  TERRACE_CHECK(!err, IoError, "cannot write '", path, "': ", std::strerror(err));
}

void print_status_line(const std::string& command, bool passed) {
  std::printf("&&&& %s %s\n", passed ? "PASSED" : "FAILED", command.c_str());
}

}  // namespace terrace::cli
