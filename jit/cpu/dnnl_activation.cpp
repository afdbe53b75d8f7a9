// Tier 1's fused activations (jit/cpu/dnnl_activation.h).
#include "jit/cpu/dnnl_activation.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <cmath>

#include "interp/error.h"

namespace terrace::jit {

using Kind = DnnlActivation::Kind;

std::optional<DnnlActivation> dnnl_activation_of(const Node& n) {
  DnnlActivation a;
  switch (n.op) {
    case Op::Sigmoid: a.kind = Kind::Sigmoid; break;
    case Op::Tanh: a.kind = Kind::Tanh; break;
    case Op::HardSwish: a.kind = Kind::HardSwish; break;
    case Op::HardSigmoid:
      a.kind = Kind::HardSigmoid;
      a.alpha = n.attr_float("alpha", 0.2f);
      a.beta = n.attr_float("beta", 0.5f);
      if (!std::isfinite(a.beta)) return std::nullopt;
      break;
    case Op::LeakyRelu:
      a.kind = Kind::LeakyRelu;
      a.alpha = n.attr_float("alpha", 0.01f);
      break;
    case Op::Elu:
      a.kind = Kind::Elu;
      a.alpha = n.attr_float("alpha", 1.0f);
      break;
    case Op::Gelu: {
      const std::string approximate = n.attr_string("approximate", "none");
      if (approximate != "none" && approximate != "tanh") return std::nullopt;
      a.kind = approximate == "tanh" ? Kind::GeluTanh : Kind::Gelu;
      break;
    }
    default: return std::nullopt;
  }
  if (!std::isfinite(a.alpha)) return std::nullopt;
  return a;
}

// In double, as the interpreter's functors (interp/ops/elementwise_activation.cpp), then rounded.
float dnnl_activation_apply(const DnnlActivation& a, float xf) {
  const double x = xf;
  switch (a.kind) {
    case Kind::None: return xf;
    case Kind::Relu: return xf < 0.0f ? 0.0f : xf;
    case Kind::Clip: {
      const float r = xf < a.lo ? a.lo : xf;
      return r > a.hi ? a.hi : r;
    }
    case Kind::Sigmoid: {
      if (x >= 0) return float(1.0 / (1.0 + std::exp(-x)));
      const double e = std::exp(x);
      return float(e / (1.0 + e));
    }
    case Kind::Tanh: return float(std::tanh(x));
    case Kind::LeakyRelu: return float(x < 0 ? double(a.alpha) * x : x);
    case Kind::Elu: return float(x < 0 ? double(a.alpha) * (std::exp(x) - 1.0) : x);
    case Kind::HardSwish: return float(x * std::max(0.0, std::min(1.0, x / 6.0 + 0.5)));
    case Kind::HardSigmoid: {  // in float, as the interpreter's functor for float32; NaN stays NaN
      const float v = a.alpha * xf + a.beta;
      return v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v;
    }
    case Kind::Gelu: return float(0.5 * x * std::erfc(-x * 0.7071067811865476));
    case Kind::GeluTanh: {
      const double z = 0.7978845608028654 * (x + 0.044715 * x * x * x);
      return float(z >= 0 ? x / (1.0 + std::exp(-2.0 * z)) : x * std::exp(2.0 * z) / (1.0 + std::exp(2.0 * z)));
    }
    case Kind::Swish:  // the two nodes' rounding: the Sigmoid's result is a float before the product
      return xf * dnnl_activation_apply({Kind::Sigmoid}, xf);
  }
  return xf;
}

void dnnl_append_activation(dnnl::post_ops& ops, const DnnlActivation& a) {
  using dnnl::algorithm;
  switch (a.kind) {
    case Kind::None: return;
    case Kind::Relu: return ops.append_eltwise(1.0f, algorithm::eltwise_relu, 0.0f, 0.0f);
    case Kind::Clip: return ops.append_eltwise(1.0f, algorithm::eltwise_clip, a.lo, a.hi);
    case Kind::Sigmoid: return ops.append_eltwise(1.0f, algorithm::eltwise_logistic, 0.0f, 0.0f);
    case Kind::Tanh: return ops.append_eltwise(1.0f, algorithm::eltwise_tanh, 0.0f, 0.0f);
    case Kind::LeakyRelu: return ops.append_eltwise(1.0f, algorithm::eltwise_relu, a.alpha, 0.0f);
    case Kind::Elu: return ops.append_eltwise(1.0f, algorithm::eltwise_elu, a.alpha, 0.0f);
    case Kind::HardSwish: return ops.append_eltwise(1.0f, algorithm::eltwise_hardswish, 0.0f, 0.0f);
    case Kind::HardSigmoid:  // oneDNN 2.6 has no hardsigmoid: alpha x + beta, then clipped to [0, 1]
      ops.append_eltwise(1.0f, algorithm::eltwise_linear, a.alpha, a.beta);
      return ops.append_eltwise(1.0f, algorithm::eltwise_clip, 0.0f, 1.0f);
    case Kind::Gelu: return ops.append_eltwise(1.0f, algorithm::eltwise_gelu_erf, 0.0f, 0.0f);
    case Kind::GeluTanh: return ops.append_eltwise(1.0f, algorithm::eltwise_gelu_tanh, 0.0f, 0.0f);
    case Kind::Swish: return ops.append_eltwise(1.0f, algorithm::eltwise_swish, 1.0f, 0.0f);
  }
}

std::string dnnl_activation_name(const DnnlActivation& a) {
  switch (a.kind) {
    case Kind::None: return "none";
    case Kind::Relu: return "relu";
    case Kind::Clip: return "clip(" + std::to_string(a.lo) + ", " + std::to_string(a.hi) + ")";
    case Kind::Sigmoid: return "sigmoid";
    case Kind::Tanh: return "tanh";
    case Kind::LeakyRelu: return "leaky_relu(" + std::to_string(a.alpha) + ")";
    case Kind::Elu: return "elu(" + std::to_string(a.alpha) + ")";
    case Kind::HardSwish: return "hardswish";
    case Kind::HardSigmoid: return "hardsigmoid(" + std::to_string(a.alpha) + ", " + std::to_string(a.beta) + ")";
    case Kind::Gelu: return "gelu_erf";
    case Kind::GeluTanh: return "gelu_tanh";
    case Kind::Swish: return "swish";
  }
  return "?";
}

double dnnl_activation_slope(const DnnlActivation& a) {
  switch (a.kind) {
    case Kind::Sigmoid: return 0.25;
    case Kind::LeakyRelu:
    case Kind::Elu: return std::max(1.0, std::abs(double(a.alpha)));
    case Kind::HardSwish: return 1.5;
    case Kind::HardSigmoid: return std::abs(double(a.alpha));
    case Kind::Gelu:
    case Kind::GeluTanh: return 1.13;
    case Kind::Swish: return 1.1;  // sigma(x) (1 + x (1 - sigma(x))) peaks at 1.0998 near x = 2.4, least -0.0998
    default: return 1.0;
  }
}

Tensor dnnl_activation_bound(const DnnlActivation& a, const Tensor& y, const Tensor& e) {
  TERRACE_CHECK(y.shape() == e.shape() && e.dtype() == DType::Float64, Internal,
                "tier 1: an activation's error bound needs the input's value and bound of one shape");
  if (a.kind == Kind::None || a.kind == Kind::Relu || a.kind == Kind::Clip) return e;  // monotone, 1-Lipschitz, exact
  const double L = dnnl_activation_slope(a), u = std::ldexp(1.0, -24);
  // Compares and one rounded product (HardSigmoid: a product and a sum, each rounded, and the
  // interpreter's own rounding; its scale below is |alpha| |y'| + |beta| at most).
  const bool exact_form = a.kind == Kind::LeakyRelu || a.kind == Kind::HardSigmoid;
  const double own = a.kind == Kind::HardSigmoid ? 3 * u : exact_form ? u : 16 * u;
  Tensor yd = y.cast(DType::Float64);
  Tensor out = Tensor::empty(DType::Float64, y.shape());
  const double* py = yd.data<double>();
  const double* pe = e.data<double>();
  double* po = out.data<double>();
  for (int64_t i = 0; i < out.numel(); ++i) {
    const double f = std::abs(double(dnnl_activation_apply(a, float(py[i]))));
    const double scale = a.kind == Kind::HardSigmoid ? std::abs(double(a.alpha)) * (std::abs(py[i]) + pe[i]) + std::abs(double(a.beta))
                         : exact_form                 ? f + L * pe[i]
                                                      : f + L * (std::abs(py[i]) + pe[i]);
    po[i] = L * pe[i] + own * scale;
  }
  return out;
}

}  // namespace terrace::jit
