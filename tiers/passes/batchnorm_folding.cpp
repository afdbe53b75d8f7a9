// BatchNormalization folding: y = BN(Conv(x, W, B)) in inference, the Conv's result read by the
// BN alone, becomes y = Conv(x, W', B') with, per output channel c,
//   s_c = scale_c / sqrt(var_c + epsilon),  W'[c] = W[c] * s_c,  B'_c = (B_c - mean_c) * s_c + bias_c
// (in double, rounded once to the weights' type), and likewise for a Gemm (the channel is the
// result's column: B's row with transB, its column without; C' = s * (beta * C - mean) + bias,
// beta becomes 1). The BN's pass over the activations disappears, and with it a graph break.
// Folded: float32 and float64 weights that are initializers, BN parameters that are initializers;
// new initializers are made (the old ones may be read elsewhere). The result differs from the
// unfolded graph's by rounding only (ARCHITECTURE.md's tolerances), hence OptimizeLevel::Extended.
// A BN with constant parameters that no Conv or Gemm takes becomes a per-channel Mul and Add.
#include <algorithm>
#include <cmath>
#include <string>

#include "tiers/passes/graph_edit.h"
#include "tiers/passes/passes.h"

namespace terrace::passes {
namespace {

bool float_weights(DType t) { return t == DType::Float32 || t == DType::Float64; }

std::vector<double> doubles(const Tensor& t) {
  std::vector<double> v(size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[size_t(i)] = t.get_as_double(i);
  return v;
}

Tensor from_doubles(DType dtype, const Shape& shape, const std::vector<double>& v) {
  Tensor t = Tensor::empty(dtype, shape);
  if (dtype == DType::Float32)
    for (size_t i = 0; i < v.size(); ++i) t.data<float>()[i] = float(v[i]);
  else
    for (size_t i = 0; i < v.size(); ++i) t.data<double>()[i] = v[i];
  return t;
}

struct BnParams {
  std::vector<double> s, shift;  // y = x * s + shift, per channel
};

// The BN's parameters as a per-channel affine map, or nullopt when it cannot be folded.
std::optional<BnParams> bn_params(const Graph& g, const Node& bn, const std::vector<int>& uses, int64_t channels) {
  if (bn.attr_int("training_mode", 0) != 0 || bn.inputs.size() < 5) return std::nullopt;
  for (size_t k = 1; k < bn.outputs.size(); ++k)
    if (bn.outputs[k] >= 0 && uses[size_t(bn.outputs[k])] > 0) return std::nullopt;
  for (size_t k = 1; k < 5; ++k) {
    int v = bn.inputs[k];
    if (!is_constant(g, v) || !is_float(constant(g, v).dtype()) || constant(g, v).numel() != channels)
      return std::nullopt;
  }
  std::vector<double> scale = doubles(constant(g, bn.inputs[1])), bias = doubles(constant(g, bn.inputs[2]));
  std::vector<double> mean = doubles(constant(g, bn.inputs[3])), var = doubles(constant(g, bn.inputs[4]));
  const double eps = bn.attr_float("epsilon", 1e-5f);
  BnParams p;
  for (size_t c = 0; c < size_t(channels); ++c) {
    double s = scale[c] / std::sqrt(var[c] + eps);
    if (!std::isfinite(s)) return std::nullopt;
    p.s.push_back(s);
    p.shift.push_back(bias[c] - mean[c] * s);
  }
  return p;
}

// Folds into a Conv: returns the new inputs (x, W', B'), or an empty vector.
std::vector<int> fold_into_conv(Graph& g, const Node& conv, const Node& bn, const std::vector<int>& uses) {
  if (conv.inputs.size() < 2 || !is_constant(g, conv.inputs[1])) return {};
  const Tensor& w = constant(g, conv.inputs[1]);
  if (!float_weights(w.dtype()) || w.rank() < 3) return {};
  const int64_t channels = w.dim(0);
  const bool has_bias = conv.inputs.size() > 2 && conv.inputs[2] >= 0;
  if (has_bias && (!is_constant(g, conv.inputs[2]) || constant(g, conv.inputs[2]).dtype() != w.dtype() ||
                   constant(g, conv.inputs[2]).numel() != channels))
    return {};
  auto p = bn_params(g, bn, uses, channels);
  if (!p) return {};
  std::vector<double> wv = doubles(w);
  const size_t per = wv.size() / size_t(std::max<int64_t>(channels, 1));
  for (size_t c = 0; c < size_t(channels); ++c)
    for (size_t k = 0; k < per; ++k) wv[c * per + k] *= p->s[c];
  std::vector<double> b(size_t(channels), 0.0);
  if (has_bias) b = doubles(constant(g, conv.inputs[2]));
  for (size_t c = 0; c < b.size(); ++c) b[c] = b[c] * p->s[c] + p->shift[c];
  const std::string base = g.values[size_t(conv.inputs[1])].name;
  int nw = add_constant(g, base + "_bnfold", from_doubles(w.dtype(), w.shape(), wv));
  int nb = add_constant(g, base + "_bnfold_bias", from_doubles(w.dtype(), {channels}, b));
  return {conv.inputs[0], nw, nb};
}

// Folds into a Gemm: returns the new inputs (A, B', C'), or an empty vector.
std::vector<int> fold_into_gemm(Graph& g, Node& gemm, const Node& bn, const std::vector<int>& uses) {
  if (gemm.inputs.size() < 2 || !is_constant(g, gemm.inputs[1])) return {};
  const Tensor& w = constant(g, gemm.inputs[1]);
  if (!float_weights(w.dtype()) || w.rank() != 2) return {};
  const bool trans_b = gemm.attr_int("transB", 0) != 0;
  const int64_t n = trans_b ? w.dim(0) : w.dim(1), k_dim = trans_b ? w.dim(1) : w.dim(0);
  const double beta = gemm.attr_float("beta", 1.0f);
  std::vector<double> c(size_t(n), 0.0);
  if (gemm.inputs.size() > 2 && gemm.inputs[2] >= 0) {
    if (!is_constant(g, gemm.inputs[2])) return {};
    const Tensor& ct = constant(g, gemm.inputs[2]);
    if (ct.dtype() != w.dtype()) return {};
    const bool row = ct.numel() == n && (ct.rank() == 1 || (ct.rank() == 2 && ct.dim(0) == 1));
    if (ct.numel() == 1 && ct.rank() <= 2) c.assign(size_t(n), ct.get_as_double(0));
    else if (row) c = doubles(ct);
    else return {};
  }
  auto p = bn_params(g, bn, uses, n);
  if (!p) return {};
  std::vector<double> wv = doubles(w);
  for (int64_t i = 0; i < k_dim; ++i)
    for (int64_t j = 0; j < n; ++j) wv[size_t(trans_b ? j * k_dim + i : i * n + j)] *= p->s[size_t(j)];
  for (size_t j = 0; j < c.size(); ++j) c[j] = beta * c[j] * p->s[j] + p->shift[j];
  const std::string base = g.values[size_t(gemm.inputs[1])].name;
  int nw = add_constant(g, base + "_bnfold", from_doubles(w.dtype(), w.shape(), wv));
  int nc = add_constant(g, base + "_bnfold_bias", from_doubles(w.dtype(), {n}, c));
  Attribute one;
  one.kind = Attribute::Kind::Float;
  one.f = 1.0f;
  gemm.attrs["beta"] = one;
  return {gemm.inputs[0], nw, nc};
}

// A BN no producer takes becomes y = x * s + shift, s and shift constants of shape [C, 1, ...]
// (broadcast over the dims after the channel's): elementwise ops every tier compiles, where the BN
// was a graph break. Node n becomes the Mul; the Add goes right after it.
bool make_affine(Graph& g, size_t n, const std::vector<int>& uses) {
  const Node& bn = g.nodes[n];
  const int x = bn.inputs.empty() ? -1 : bn.inputs[0], y = bn.outputs.empty() ? -1 : bn.outputs[0];
  if (x < 0 || y < 0 || bn.inputs.size() < 5 || !is_constant(g, bn.inputs[1])) return false;
  const ValueInfo info = g.values[size_t(x)].info;
  const int64_t channels = constant(g, bn.inputs[1]).numel();
  if (!info.dtype || !float_weights(*info.dtype) || !info.shape || info.shape->size() < 2 ||
      ((*info.shape)[1] >= 0 && (*info.shape)[1] != channels))
    return false;
  auto p = bn_params(g, bn, uses, channels);
  if (!p) return false;
  Shape per_channel(info.shape->size() - 1, 1);
  per_channel[0] = channels;
  const std::string base = g.values[size_t(y)].name;
  const int s = add_constant(g, base + "_bn_scale", from_doubles(*info.dtype, per_channel, p->s));
  const int shift = add_constant(g, base + "_bn_shift", from_doubles(*info.dtype, per_channel, p->shift));
  for (Value& v : g.values)
    if (v.producer > int(n)) ++v.producer;
  Node add;
  add.op = Op::Add;
  add.name = g.nodes[n].name.empty() ? "" : g.nodes[n].name + "/shift";
  const int scaled = new_value(g, base + "_bn_scaled", g.values[size_t(y)].info, int(n));
  add.inputs = {scaled, shift};
  add.outputs = {y};
  Node& mul = g.nodes[n];
  mul.op = Op::Mul;
  mul.attrs.clear();
  mul.inputs = {x, s};
  mul.outputs = {scaled};
  g.nodes.insert(g.nodes.begin() + std::ptrdiff_t(n) + 1, std::move(add));
  g.values[size_t(y)].producer = int(n) + 1;
  return true;
}

}  // namespace

int fold_batchnorm(Graph& g, const PassConfig&) {
  std::vector<int> uses = use_counts(g);
  std::vector<bool> pinned = pinned_values(g);
  std::vector<bool> dead(g.nodes.size(), false);
  int folded = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (g.nodes[i].op != Op::BatchNormalization) continue;
    const Node& bn = g.nodes[i];
    const int x = bn.inputs.empty() ? -1 : bn.inputs[0], y = bn.outputs.empty() ? -1 : bn.outputs[0];
    if (x < 0 || y < 0 || pinned[size_t(x)] || uses[size_t(x)] != 1) continue;
    const int p = g.values[size_t(x)].producer;
    if (p < 0 || dead[size_t(p)]) continue;
    Node& producer = g.nodes[size_t(p)];
    if (producer.outputs.size() != 1 || producer.outputs[0] != x) continue;
    std::vector<int> inputs;
    if (producer.op == Op::Conv) inputs = fold_into_conv(g, producer, g.nodes[i], uses);
    else if (producer.op == Op::Gemm) inputs = fold_into_gemm(g, producer, g.nodes[i], uses);
    if (inputs.empty()) continue;
    uses.resize(g.values.size(), 0);
    pinned.resize(g.values.size(), false);
    producer.inputs = inputs;
    producer.outputs[0] = y;  // the Conv writes the BN's result, under its name
    g.values[size_t(y)].producer = p;
    g.values[size_t(x)].producer = -1;
    dead[i] = true;
    ++folded;
  }
  if (folded) remove_nodes(g, std::move(dead));
  // The BNs left: from the last, so that inserting an Add moves none still to come. Their inputs'
  // ranks and dtypes come from shape inference (not yet run when no shape folded).
  if (std::none_of(g.nodes.begin(), g.nodes.end(), [](const Node& n) { return n.op == Op::BatchNormalization; }))
    return folded;
  infer_static_shapes(g);
  uses = use_counts(g);
  for (size_t i = g.nodes.size(); i-- > 0;)
    if (g.nodes[i].op == Op::BatchNormalization) folded += make_affine(g, i, uses);
  return folded;
}

}  // namespace terrace::passes
