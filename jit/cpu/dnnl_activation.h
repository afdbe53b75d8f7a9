// The activations tier 1 fuses into a oneDNN primitive as an eltwise post-op (DnnlActivation,
// jit/cpu/dnnl_ops.h): their ONNX nodes, their oneDNN algorithms, the interpreter's semantics (for
// calls whose inputs are not all finite, where oneDNN's fused activations may differ), and how a
// bound on the error before them becomes one after them (cpu_library::error_allowance).
#pragma once
#include <optional>
#include <string>

#include "interp/graph.h"
#include "jit/cpu/dnnl_ops.h"

namespace dnnl {
struct post_ops;
}

namespace terrace::jit {

// The activation a node is, for the kinds beyond Relu and Clip (cpu_library reads those with
// their constant bounds): Sigmoid, Tanh, LeakyRelu (alpha), Elu (alpha), HardSwish, HardSigmoid
// (alpha, beta), Gelu
// (approximate "none" or "tanh"); nullopt for any other node or attribute value.
std::optional<DnnlActivation> dnnl_activation_of(const Node& node);

// The activation as the interpreter computes it (interp/ops/elementwise_activation.cpp: NaN
// stays, infinities give the limits), every kind.
float dnnl_activation_apply(const DnnlActivation& a, float x);

// Appends the activation as oneDNN's eltwise post-op (nothing for Kind::None).
void dnnl_append_activation(dnnl::post_ops& ops, const DnnlActivation& a);

// "relu", "clip(lo, hi)", "sigmoid", "leaky_relu(0.01)", ... for descriptions.
std::string dnnl_activation_name(const DnnlActivation& a);

// A Lipschitz constant of the activation over all reals: |f(a) - f(b)| <= L |a - b|. Relu, Clip,
// Tanh: 1; Sigmoid: 1/4; Swish: 1.1; LeakyRelu and Elu: max(1, |alpha|); HardSigmoid: |alpha|;
// HardSwish: 3/2 (its slope (2x + 3)
// / 6 on [-3, 3]); Gelu: 1.13 (the slope Phi(x) + x phi(x) peaks at 1.1289 near x = 1.41, and
// goes no lower than -0.129; the tanh form peaks at 1.1290).
double dnnl_activation_slope(const DnnlActivation& a);

// The error bound after the activation, per element, from the interpreter's value y of its input
// and the bound e on the compiled input's error (float64 tensors of y's shape):
//   |f'(y') - f(y)| <= |f'(y') - f(y')| + |f(y') - f(y)| <= own + L e,
// with own, the error of oneDNN's own evaluation of f: 0 for Relu, Clip and LeakyRelu (exact
// compares and one product, rounded once: 2^-24 |f| for LeakyRelu), and 2^-20 (|f(y)| + L (|y| + e))
// for the transcendental ones (16 ulps of the result and of the argument's scale: oneDNN
// evaluates exp, tanh and erf by vector polynomials accurate to a few ulps relative to the
// argument, and gelu_erf's erf is an absolute approximation scaled by x).
Tensor dnnl_activation_bound(const DnnlActivation& a, const Tensor& y, const Tensor& e);

}  // namespace terrace::jit
