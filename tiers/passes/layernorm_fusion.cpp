// LayerNorm fusion: the decomposed layer normalization that exporters emit below opset 17 (torch's
// at opset <= 16, TensorFlow's, Keras's)
//   m = ReduceMean(x, axes)      d = Sub(x, m)        q = Pow(d, 2) or Mul(d, d)
//   v = ReduceMean(q, axes)      s = Sqrt(Add(v, eps))
//   n = Div(d, s) or Mul(d, Reciprocal(s))
//   [y = Mul(n, gamma)] [z = Add(y, beta)]     (either operand order)
// becomes LayerNormalization(x, gamma, beta) {axis = -len(axes), epsilon = eps}. Conditions: the
// axes are the trailing ones (both ReduceMeans the same, keepdims 1), eps a constant scalar, gamma
// and beta constants broadcasting within the normalized dims only, x float32 or float64 (in 16-bit
// types the decomposed graph rounds after every op, further from the fused op than the dtype's
// tolerance), and every value in between read by the pattern alone and no graph output. Without a
// gamma the scale is a constant 1. The interpreter computes the fused op in double: the answers
// differ by rounding only, hence OptimizeLevel::Extended.
//
// The graph keeps its opset: Terrace looks ops up by name, not by version (interp/ops.def), so the
// fused op runs whatever the model's opset, and every other op keeps the meaning it has there.
#include <algorithm>

#include "tiers/passes/passes.h"
#include "tiers/passes/pattern.h"

namespace terrace::passes {
namespace {

// The reduced axes of a ReduceMean, as the number k of trailing axes they are, or 0 when they
// are not the trailing ones (or not known statically). `rank` is x's rank, -1 when unknown.
int trailing_axes(const PatternView& p, const Node& mean, int64_t rank) {
  if (mean.attr_int("keepdims", 1) != 1) return 0;
  std::vector<int64_t> axes;
  if (mean.inputs.size() > 1 && mean.inputs[1] >= 0) {
    if (!is_constant(p.graph(), mean.inputs[1])) return 0;
    axes = constant(p.graph(), mean.inputs[1]).to_int64_vector();
  } else {
    axes = mean.attr_ints("axes", {});
  }
  if (axes.empty()) {  // all axes (or none, with noop_with_empty_axes)
    if (rank < 1 || mean.attr_int("noop_with_empty_axes", 0) != 0) return 0;
    return int(rank);
  }
  const bool negative = std::all_of(axes.begin(), axes.end(), [](int64_t a) { return a < 0; });
  if (!negative) {
    if (rank < 0) return 0;
    for (int64_t& a : axes) a = a < 0 ? a + rank : a - rank;  // as negative axes
  }
  std::sort(axes.begin(), axes.end());
  const int64_t k = int64_t(axes.size());
  for (int64_t i = 0; i < k; ++i)
    if (axes[size_t(i)] != -k + i) return 0;
  if (rank >= 0 && k > rank) return 0;
  return int(k);
}

// A gamma or beta that broadcasts onto the k normalized dims of x without widening any other dim.
bool fits_normalized_dims(const PatternView& p, int param, int x, int k, DType dtype) {
  if (!is_constant(p.graph(), param) || constant(p.graph(), param).dtype() != dtype) return false;
  const Shape& ps = constant(p.graph(), param).shape();
  const Shape* xs = p.shape(x);
  if (int64_t(ps.size()) > k) return false;
  for (size_t j = 0; j < ps.size(); ++j) {  // aligned right
    const int64_t pd = ps[ps.size() - 1 - j];
    if (pd == 1) continue;
    if (!xs || xs->size() < ps.size() || (*xs)[xs->size() - 1 - j] != pd) return false;
  }
  return true;
}

Tensor ones(DType dtype) {
  return dtype == DType::Float32 ? Tensor::from_vector<float>({1}, {1.0f}) : Tensor::from_vector<double>({1}, {1.0});
}

struct Match {
  std::vector<int> nodes;  // every node of the pattern but the last
  int last = -1;           // the node whose result the fused op writes
  int x = -1, gamma = -1, beta = -1, k = 0;
  double eps = 0;
};

// Tries node `i` as the normalization's Div (or its Mul by a Reciprocal).
std::optional<Match> match_at(const PatternView& p, size_t i) {
  const Graph& g = p.graph();
  const Node& div = g.nodes[i];
  if (div.inputs.size() != 2 || div.outputs.size() != 1) return std::nullopt;
  Match m;
  int d = -1, s = -1;
  const Node* recip = nullptr;
  if (div.op == Op::Div) {
    d = div.inputs[0], s = div.inputs[1];
  } else if (div.op == Op::Mul) {
    for (int r : div.inputs)
      if (const Node* n = p.producer(r, Op::Reciprocal); n && p.internal(r)) recip = n, d = PatternView::other_input(div, r);
    if (!recip) return std::nullopt;
    m.nodes.push_back(p.producer_index(recip->outputs[0]));
    s = recip->inputs[0];
  } else {
    return std::nullopt;
  }
  const Node* sub = p.producer(d, Op::Sub);
  const Node* sqrt = p.producer(s, Op::Sqrt);
  if (!sub || !sqrt || !p.internal(s)) return std::nullopt;
  const Node* add_eps = p.producer(sqrt->inputs[0], Op::Add);
  if (!add_eps || !p.internal(sqrt->inputs[0]) || add_eps->inputs.size() != 2) return std::nullopt;
  int var = -1;
  for (int e : add_eps->inputs)
    if (auto eps = p.float_scalar(e)) m.eps = *eps, var = PatternView::other_input(*add_eps, e);
  const Node* var_mean = p.producer(var, Op::ReduceMean);
  if (!var_mean || !p.internal(var) || !(m.eps >= 0)) return std::nullopt;
  const int q = var_mean->inputs[0];
  const Node* sq = p.producer(q, Op::Pow);
  int d_reads = 2;  // the squaring and the Div
  if (sq) {
    auto two = p.float_scalar(sq->inputs[1]);
    if (sq->inputs[0] != d || !two || *two != 2.0) return std::nullopt;
  } else if ((sq = p.producer(q, Op::Mul)) && sq->inputs.size() == 2 && sq->inputs[0] == d && sq->inputs[1] == d) {
    d_reads = 3;
  } else {
    return std::nullopt;
  }
  if (!p.internal(q) || !p.internal(d, d_reads) || sub->inputs.size() != 2) return std::nullopt;
  m.x = sub->inputs[0];
  const Node* mean = p.producer(sub->inputs[1], Op::ReduceMean);
  if (!mean || mean->inputs.empty() || mean->inputs[0] != m.x || !p.internal(sub->inputs[1])) return std::nullopt;
  const std::optional<DType> dtype = p.dtype(m.x);
  if (!dtype || (*dtype != DType::Float32 && *dtype != DType::Float64)) return std::nullopt;
  const Shape* xs = p.shape(m.x);
  const int64_t rank = xs ? int64_t(xs->size()) : -1;
  m.k = trailing_axes(p, *mean, rank);
  if (m.k == 0 || trailing_axes(p, *var_mean, rank) != m.k) return std::nullopt;
  // The same axes list both times (as trailing counts they already agree).
  for (const Node* n : {mean, sub, sq, var_mean, add_eps, sqrt})
    m.nodes.push_back(p.producer_index(n->outputs[0]));

  // The affine tail, where its constants fit.
  m.last = int(i);
  int out = div.outputs[0];
  auto absorb = [&](Op op, int* param) {
    const int r = p.only_reader(out);
    if (r < 0 || !p.internal(out)) return;
    const Node& n = g.nodes[size_t(r)];
    const int other = PatternView::other_input(n, out);
    if (n.op != op || n.outputs.size() != 1 || !fits_normalized_dims(p, other, m.x, m.k, *dtype)) return;
    m.nodes.push_back(m.last);
    m.last = r;
    *param = other;
    out = n.outputs[0];
  };
  absorb(Op::Mul, &m.gamma);
  absorb(Op::Add, &m.beta);
  return m;
}

}  // namespace

int fuse_layernorm(Graph& g, const PassConfig& config) {
  return fuse_matches(g, match_at, [&](const Match& m, const PatternView& p, Node& last) {
    const DType dtype = *p.dtype(m.x);
    const int gamma = m.gamma >= 0 ? m.gamma : add_constant(g, g.values[size_t(m.x)].name + "_ln_scale", ones(dtype));
    Node& n = last;
    n.name = fused_name(g, n, "LayerNormalization");
    n.op = Op::LayerNormalization;
    n.inputs = {m.x, gamma};
    if (m.beta >= 0) n.inputs.push_back(m.beta);
    n.attrs.clear();
    n.attrs["axis"] = int_attribute(-m.k);
    // A deliberately wrong rewrite (TERRACE_FAULT=wrong-pass:layernorm_fusion): epsilon 1.
    n.attrs["epsilon"] = float_attribute(config.deliberately_wrong ? 1.0f : float(m.eps));
  });
}

}  // namespace terrace::passes
