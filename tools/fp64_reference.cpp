// tools/fp64_reference.h: the float64 twin of a graph and the RMS criterion.
#include "tools/fp64_reference.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace terrace::cli {
namespace {

constexpr int kOnnxFloat = 1, kOnnxDouble = 11;

// The normwise allowance (Higham's forward error in the infinity norm): an fp32 network's outputs
// are accurate relative to the output's scale, not to each element's own magnitude, since a logit
// near zero is the difference of terms as large as the others. Measured on the zoo's ResNet-50
// (outputs up to 252; its test input): against the float32 interpreter, itself within 1.1e-5 of the
// float64 model, ONNX Runtime's largest difference 1.2e-4, PyTorch's 4.9e-4, tier 1's 4.0e-4, each
// well inside 1e-5 x 252 = 2.5e-3 (about 84 fp32 epsilons of the scale); a miscompiled element is
// off by the output's scale, far beyond it.
constexpr double kNormwise = 1e-5;

bool widen_graph(Graph& g, std::string* why);

bool widen_tensor(Tensor& t) {
  if (t.defined() && t.dtype() == DType::Float32) t = t.cast(DType::Float64);
  return true;
}

bool widen_attributes(Node& n, std::string* why) {
  for (auto& [name, a] : n.attrs) {
    switch (a.kind) {
      case Attribute::Kind::Tensor: widen_tensor(a.t); break;
      case Attribute::Kind::Tensors:
        for (Tensor& t : a.tensors) widen_tensor(t);
        break;
      case Attribute::Kind::Graph:
        if (a.g) {
          auto copy = std::make_shared<Graph>(*a.g);
          if (!widen_graph(*copy, why)) return false;
          a.g = copy;
        }
        break;
      case Attribute::Kind::Graphs:
        for (auto& sub : a.graphs) {
          auto copy = std::make_shared<Graph>(*sub);
          if (!widen_graph(*copy, why)) return false;
          sub = copy;
        }
        break;
      case Attribute::Kind::Int:
        // Cast's `to`, and the `dtype` of generators (RandomNormal, EyeLike, ...).
        if ((name == "to" || name == "dtype" || name == "output_dtype") && a.i == kOnnxFloat) a.i = kOnnxDouble;
        break;
      default: break;
    }
  }
  return true;
}

bool widen_graph(Graph& g, std::string* why) {
  for (Value& v : g.values) {
    if (v.info.dtype == DType::Float16 || v.info.dtype == DType::BFloat16) {
      *why = "value '" + v.name + "' is " + dtype_name(*v.info.dtype);
      return false;
    }
    if (v.info.dtype == DType::Float32) v.info.dtype = DType::Float64;
  }
  for (auto& [id, t] : g.initializers) widen_tensor(t);
  for (Node& n : g.nodes)
    if (!widen_attributes(n, why)) return false;
  return true;
}

}  // namespace

std::shared_ptr<Graph> widen_to_float64(const Graph& g, std::string* why) {
  auto copy = std::make_shared<Graph>(g);
  if (!widen_graph(*copy, why)) return nullptr;
  return copy;
}

NamedTensors float64_outputs(const Graph& widened, const NamedTensors& inputs, std::string* why) {
  NamedTensors wide;
  for (const auto& [name, t] : inputs) wide.emplace_back(name, t.dtype() == DType::Float32 ? t.cast(DType::Float64) : t);
  try {
    Options o;
    o.max_tier = Tier::Interp;
    o.optimize = OptimizeLevel::None;
    o.profile_file.clear();
    auto session = Session::from_graph(std::make_shared<Graph>(widened), o);
    return session->run(wide);
  } catch (const std::exception& e) {
    *why = e.what();
    return {};
  }
}

bool close_to_float64(const Tensor& want, const Tensor& got, const Tensor& exact, std::string* detail) {
  if (!want.defined() || !got.defined() || !exact.defined() || want.shape() != got.shape() ||
      exact.shape() != got.shape() || !is_float(got.dtype()) || exact.dtype() != DType::Float64) {
    *detail = "no float64 comparison for this output";
    return false;
  }
  double tier = 0, interp = 0, scale = 0;
  const double* e = exact.data<double>();
  for (int64_t i = 0; i < got.numel(); ++i) {
    tier = std::max(tier, std::fabs(got.get_as_double(i) - e[i]));  // NaN: the comparison below fails
    if (std::isnan(got.get_as_double(i)) != std::isnan(e[i])) tier = INFINITY;
    interp = std::max(interp, std::fabs(want.get_as_double(i) - e[i]));
    if (std::isfinite(e[i])) scale = std::max(scale, std::fabs(e[i]));
  }
  const double bound = std::max(2 * interp, kNormwise * scale) + 1e-7;
  const bool ok = tier <= bound;
  char buf[240];
  std::snprintf(buf, sizeof buf,
                "largest error against the float64 model %.3g, the float32 interpreter's %.3g, allowed %.3g "
                "(1e-5 of the largest output %.3g)",
                tier, interp, bound, scale);
  *detail = buf;
  return ok;
}

}  // namespace terrace::cli
