// Activation kernels: Relu and its relatives, sigmoid-like curves, Shrink; attributes as in ONNX.
#include <cmath>
#include <string>

#include "interp/ops/elementwise_common.h"

namespace terrace::ops {
namespace {

// Most activations are defined on floating-point types only.
struct FloatActivation {
  template <typename T> static constexpr bool accepts = kIsFloat<T>;
};

// log(1 + exp(x)) without overflow for large x.
template <typename C>
C softplus(C x) {
  return std::max(x, C(0)) + std::log1p(std::exp(-std::abs(x)));
}

struct Relu {
  template <typename T> static constexpr bool accepts = kIsSignedNumeric<T>;
  template <typename C> C operator()(C x) const { return x < C(0) ? C(0) : x; }  // NaN stays
};

struct LeakyRelu : FloatActivation {
  float alpha;
  explicit LeakyRelu(const Node& n) : alpha(n.attr_float("alpha", 0.01f)) {}
  template <typename C> C operator()(C x) const { return x < C(0) ? C(alpha) * x : x; }
};

struct ThresholdedRelu : FloatActivation {
  float alpha;
  explicit ThresholdedRelu(const Node& n) : alpha(n.attr_float("alpha", 1.0f)) {}
  template <typename C> C operator()(C x) const { return x > C(alpha) ? x : C(0); }
};

struct Elu : FloatActivation {
  float alpha;
  explicit Elu(const Node& n) : alpha(n.attr_float("alpha", 1.0f)) {}
  template <typename C> C operator()(C x) const {
    return x < C(0) ? C(alpha) * (std::exp(x) - C(1)) : x;
  }
};

struct Selu : FloatActivation {
  float alpha, gamma;
  explicit Selu(const Node& n)
      : alpha(n.attr_float("alpha", 1.67326319217681884765625f)),
        gamma(n.attr_float("gamma", 1.05070102214813232421875f)) {}
  template <typename C> C operator()(C x) const {
    return x <= C(0) ? C(gamma) * (C(alpha) * std::exp(x) - C(alpha)) : C(gamma) * x;
  }
};

struct Celu : FloatActivation {
  float alpha;
  explicit Celu(const Node& n) : alpha(n.attr_float("alpha", 1.0f)) {
    TERRACE_CHECK(alpha != 0.0f, InvalidModel, n.describe(), ": attribute 'alpha' must not be 0");
  }
  // max(0, x) + min(0, a (exp(x / a) - 1)), which is one branch or the other for any a != 0,
  // written so that NaN stays NaN (as ONNX's reference, with np.maximum, gives).
  template <typename C> C operator()(C x) const {
    C a = C(alpha);
    return x > C(0) ? x : a * (std::exp(x / a) - C(1));
  }
};

struct HardSigmoid : FloatActivation {
  float alpha, beta;
  explicit HardSigmoid(const Node& n)
      : alpha(n.attr_float("alpha", 0.2f)), beta(n.attr_float("beta", 0.5f)) {}
  // clip(alpha x + beta, 0, 1), NaN staying NaN (ONNX's reference and ONNX Runtime).
  template <typename C> C operator()(C x) const {
    C v = C(alpha) * x + C(beta);
    return v < C(0) ? C(0) : v > C(1) ? C(1) : v;
  }
};

struct HardSwish : FloatActivation {
  template <typename C> C operator()(C x) const {
    return x * std::max(C(0), std::min(C(1), x / C(6) + C(0.5)));
  }
};

struct Sigmoid : FloatActivation {
  // Both branches keep exp's argument non-positive, so neither overflows.
  template <typename C> C operator()(C x) const {
    if (x >= C(0)) return C(1) / (C(1) + std::exp(-x));
    C e = std::exp(x);
    return e / (C(1) + e);
  }
};

struct Softplus : FloatActivation {
  template <typename C> C operator()(C x) const { return softplus(x); }
};

struct Softsign : FloatActivation {
  template <typename C> C operator()(C x) const { return x / (C(1) + std::abs(x)); }
};

struct Mish : FloatActivation {
  template <typename C> C operator()(C x) const { return x * std::tanh(softplus(x)); }
};

// Gelu (opset 20): x * Phi(x) with the normal CDF exact (erf) or, approximate = "tanh", the
// tanh curve of Hendrycks and Gimpel. Written as 0.5 x erfc(-x / sqrt 2) and x sigmoid(2 z), the
// same functions as ONNX's 0.5 x (1 + erf(x / sqrt 2)) and 0.5 x (1 + tanh z) without their
// cancellation for negative x.
struct Gelu : FloatActivation {
  bool tanh_form;
  explicit Gelu(const Node& n) {
    std::string a = n.attr_string("approximate", "none");
    TERRACE_CHECK(a == "none" || a == "tanh", InvalidModel, n.describe(),
                  ": attribute 'approximate' must be \"none\" or \"tanh\", not \"", a, "\"");
    tanh_form = a == "tanh";
  }
  template <typename C> C operator()(C x) const {
    if (tanh_form) {
      const C z = C(0.7978845608028654) * (x + C(0.044715) * x * x * x);  // sqrt(2 / pi) (...)
      return z >= C(0) ? x / (C(1) + std::exp(C(-2) * z)) : x * std::exp(C(2) * z) / (C(1) + std::exp(C(2) * z));
    }
    return C(0.5) * x * std::erfc(-x * C(0.7071067811865476));  // 1 / sqrt(2)
  }
};

// Shrink takes integers too; they are compared and shifted in double, then converted back.
struct Shrink {
  float lambd, bias;
  explicit Shrink(const Node& n)
      : lambd(n.attr_float("lambd", 0.5f)), bias(n.attr_float("bias", 0.0f)) {}
  template <typename T> static constexpr bool accepts = kIsNumeric<T>;
  template <typename C> C operator()(C x) const {
    using W = std::conditional_t<kIsInt<C>, double, C>;
    W v = W(x), l = W(lambd), b = W(bias);
    if (v < -l) return C(v + b);
    if (v > l) return C(v - b);
    return C(0);
  }
};

}  // namespace

void register_activations(KernelTable& t) {
  t.add(Op::Relu, unary_kernel<Relu>);
  t.add(Op::LeakyRelu, unary_kernel<LeakyRelu>);
  t.add(Op::ThresholdedRelu, unary_kernel<ThresholdedRelu>);
  t.add(Op::Elu, unary_kernel<Elu>);
  t.add(Op::Selu, unary_kernel<Selu>);
  t.add(Op::Celu, unary_kernel<Celu>);
  t.add(Op::HardSigmoid, unary_kernel<HardSigmoid>);
  t.add(Op::HardSwish, unary_kernel<HardSwish>);
  t.add(Op::Sigmoid, unary_kernel<Sigmoid>);
  t.add(Op::Softplus, unary_kernel<Softplus>);
  t.add(Op::Softsign, unary_kernel<Softsign>);
  t.add(Op::Mish, unary_kernel<Mish>);
  t.add(Op::Gelu, unary_kernel<Gelu>);
  t.add(Op::Shrink, unary_kernel<Shrink>);
}

}  // namespace terrace::ops
