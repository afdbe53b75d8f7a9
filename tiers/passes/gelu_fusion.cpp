// GELU fusion: the exporters' decomposed GELU becomes one Gelu (ONNX opset 20):
//   exact:  x * 0.5 * (1 + Erf(x / sqrt(2)))                    (x * 0.7071... for the Div)
//   tanh:   x * 0.5 * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))   {approximate = "tanh"}
// with x^3 as Pow(x, 3) or x * (x * x), every product and sum in either operand order, and the
// final scaling as any of (x * p) * 0.5, (x * p) / 2, (x * 0.5) * p, (p * 0.5) * x, p being 1 + Erf
// (torch writes the first; Hugging Face's and Keras's code the others). Constants must be the
// named ones to float precision (relative 1e-5); x float32 or float64 (in 16-bit types the chain
// rounds after every op, further from the fused op than the dtype's tolerance); every value in
// between read by the pattern alone and no graph output. The answers differ by rounding only,
// hence OptimizeLevel::Extended.
//
// The graph keeps its opset (17 at most on import): Gelu is looked up by name, not by version
// (interp/ops.def), so it runs whatever the model's opset while every other op keeps its meaning.
#include <cmath>

#include "tiers/passes/passes.h"
#include "tiers/passes/pattern.h"

namespace terrace::passes {
namespace {

constexpr double kSqrt2 = 1.4142135623730951;
constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kCubicCoefficient = 0.044715;

struct Match {
  std::vector<int> nodes;  // the pattern's nodes but the last
  int last = -1;           // the node whose result the Gelu writes
  int x = -1;
  bool tanh = false;
};

// `v` is a constant scalar close to `want`.
bool is_scalar(const PatternView& p, int v, double want) {
  auto c = p.float_scalar(v);
  return c && close_to(*c, want);
}

// The node index of `v`'s producer when it is `op`, two inputs, and `v` internal; else -1.
int internal_binary(const PatternView& p, int v, Op op) {
  const Node* n = p.producer(v, op);
  return n && n->inputs.size() == 2 && p.internal(v) ? p.producer_index(v) : -1;
}

// u = x / sqrt(2) or x * (1 / sqrt(2)): returns x, adding the node to `nodes`.
int erf_argument(const PatternView& p, int u, std::vector<int>& nodes) {
  const Graph& g = p.graph();
  if (int i = internal_binary(p, u, Op::Div); i >= 0 && is_scalar(p, g.nodes[size_t(i)].inputs[1], kSqrt2)) {
    nodes.push_back(i);
    return g.nodes[size_t(i)].inputs[0];
  }
  if (int i = internal_binary(p, u, Op::Mul); i >= 0) {
    const Node& n = g.nodes[size_t(i)];
    for (int k = 0; k < 2; ++k)
      if (is_scalar(p, n.inputs[size_t(k)], 1 / kSqrt2)) {
        nodes.push_back(i);
        return n.inputs[size_t(1 - k)];
      }
  }
  return -1;
}

// `v` = x^3 as Pow(x, 3), x * (x * x) or (x * x) * x.
bool is_cube_of(const PatternView& p, int v, int x, std::vector<int>& nodes) {
  const Graph& g = p.graph();
  if (int i = internal_binary(p, v, Op::Pow); i >= 0) {
    const Node& n = g.nodes[size_t(i)];
    if (n.inputs[0] != x || !is_scalar(p, n.inputs[1], 3.0)) return false;
    nodes.push_back(i);
    return true;
  }
  int i = internal_binary(p, v, Op::Mul);
  if (i < 0) return false;
  const int sq = PatternView::other_input(g.nodes[size_t(i)], x);
  const int j = internal_binary(p, sq, Op::Mul);
  if (j < 0 || g.nodes[size_t(j)].inputs[0] != x || g.nodes[size_t(j)].inputs[1] != x) return false;
  nodes.push_back(i);
  nodes.push_back(j);
  return true;
}

// s = sqrt(2/pi) * (x + 0.044715 * x^3): returns x, adding the nodes to `nodes`.
int tanh_argument(const PatternView& p, int s, std::vector<int>& nodes) {
  const Graph& g = p.graph();
  const int scale = internal_binary(p, s, Op::Mul);
  if (scale < 0) return -1;
  const Node& sn = g.nodes[size_t(scale)];
  const int k = is_scalar(p, sn.inputs[0], kSqrt2OverPi) ? 0 : is_scalar(p, sn.inputs[1], kSqrt2OverPi) ? 1 : -1;
  if (k < 0) return -1;
  const int inner = internal_binary(p, sn.inputs[size_t(1 - k)], Op::Add);
  if (inner < 0) return -1;
  const Node& in = g.nodes[size_t(inner)];
  for (int a = 0; a < 2; ++a) {  // in = x + w, w = 0.044715 * x^3
    const int x = in.inputs[size_t(a)], w = internal_binary(p, in.inputs[size_t(1 - a)], Op::Mul);
    if (w < 0) continue;
    const Node& wn = g.nodes[size_t(w)];
    for (int c = 0; c < 2; ++c) {
      if (!is_scalar(p, wn.inputs[size_t(c)], kCubicCoefficient)) continue;
      std::vector<int> cube;
      if (!is_cube_of(p, wn.inputs[size_t(1 - c)], x, cube)) continue;
      nodes.insert(nodes.end(), {scale, inner, w});
      nodes.insert(nodes.end(), cube.begin(), cube.end());
      return x;
    }
  }
  return -1;
}

// Node `r` reads `v` and scales it by one half: Mul(v, 0.5) or Div(v, 2).
bool halves(const PatternView& p, const Node& r, int v) {
  if (r.op == Op::Mul) return is_scalar(p, PatternView::other_input(r, v), 0.5);
  return r.op == Op::Div && r.inputs.size() == 2 && r.inputs[0] == v && is_scalar(p, r.inputs[1], 2.0);
}

// From p = 1 + f(x) to the final product x * p / 2; sets m.last.
bool match_tail(const PatternView& p, int one_plus, Match& m) {
  const Graph& g = p.graph();
  const int r1 = p.only_reader(one_plus);
  if (r1 < 0 || !p.internal(one_plus) || g.nodes[size_t(r1)].op != Op::Mul) return false;
  const Node& m1 = g.nodes[size_t(r1)];
  const int other = PatternView::other_input(m1, one_plus);
  const int out1 = m1.outputs.empty() ? -1 : m1.outputs[0];
  if (m1.outputs.size() != 1 || other < 0) return false;
  if (const int h = internal_binary(p, other, Op::Mul); h >= 0 && halves(p, g.nodes[size_t(h)], m.x) &&
                                                        PatternView::other_input(g.nodes[size_t(h)], m.x) >= 0) {
    m.nodes.push_back(h);  // (x * 0.5) * p
    m.last = r1;
    return true;
  }
  const int r2 = p.only_reader(out1);
  if (r2 < 0 || !p.internal(out1) || g.nodes[size_t(r2)].outputs.size() != 1) return false;
  const Node& m2 = g.nodes[size_t(r2)];
  const bool x_then_half = other == m.x && halves(p, m2, out1);                            // (x * p) * 0.5
  const bool half_then_x = halves(p, m1, one_plus) && m2.op == Op::Mul && PatternView::other_input(m2, out1) == m.x;  // (p * 0.5) * x
  if (!x_then_half && !half_then_x) return false;
  m.nodes.push_back(r1);
  m.last = r2;
  return true;
}

std::optional<Match> match_at(const PatternView& p, size_t i) {
  const Graph& g = p.graph();
  const Node& f = g.nodes[i];
  if ((f.op != Op::Erf && f.op != Op::Tanh) || f.inputs.size() != 1 || f.outputs.size() != 1) return std::nullopt;
  Match m;
  m.tanh = f.op == Op::Tanh;
  m.x = m.tanh ? tanh_argument(p, f.inputs[0], m.nodes) : erf_argument(p, f.inputs[0], m.nodes);
  if (m.x < 0) return std::nullopt;
  const std::optional<DType> dtype = p.dtype(m.x);
  if (!dtype || (*dtype != DType::Float32 && *dtype != DType::Float64)) return std::nullopt;
  m.nodes.push_back(int(i));
  const int e = f.outputs[0];
  const int add = p.only_reader(e);
  if (add < 0 || !p.internal(e) || g.nodes[size_t(add)].op != Op::Add || g.nodes[size_t(add)].outputs.size() != 1 ||
      !is_scalar(p, PatternView::other_input(g.nodes[size_t(add)], e), 1.0))
    return std::nullopt;
  m.nodes.push_back(add);
  if (!match_tail(p, g.nodes[size_t(add)].outputs[0], m)) return std::nullopt;
  return m;
}

}  // namespace

int fuse_gelu(Graph& g, const PassConfig&) {
  return fuse_matches(g, match_at, [&](const Match& m, const PatternView&, Node& n) {
    n.name = fused_name(g, n, "Gelu");
    n.op = Op::Gelu;
    n.inputs = {m.x};
    n.attrs.clear();
    n.attrs["approximate"] = string_attribute(m.tanh ? "tanh" : "none");
  });
}

}  // namespace terrace::passes
