// HardSwish fusion: the exporters' decomposed HardSwish becomes one HardSwish (ONNX opset 14):
//   x * Clip(x + 3, 0, 6) / 6        (Paddle's exporter; torch's for older opsets)
// with the sum and the product in either operand order, the scaling as / 6 or * (1/6), applied to
// the product or to the Clip (x * (Clip(..) / 6)), and Clip's bounds as inputs (opset 11 on) or
// attributes (before). Left decomposed, each is four elementwise ops that end a convolution chain
// on tier 1, where HardSwish is one of the convolution's post-ops. Constants must be the named ones
// to float precision; x float32 or float64; every value in between read by the pattern alone and
// no graph output. The answers differ by rounding only, hence OptimizeLevel::Extended. As Gelu,
// HardSwish is looked up by name, so the graph keeps its opset.
#include "tiers/passes/passes.h"
#include "tiers/passes/pattern.h"

namespace terrace::passes {
namespace {

struct Match {
  std::vector<int> nodes;  // the pattern's nodes but the last
  int last = -1;           // the node whose result the HardSwish writes
  int x = -1;
};

bool is_scalar(const PatternView& p, int v, double want) {
  auto c = p.float_scalar(v);
  return c && close_to(*c, want);
}

// Clip(a, 0, 6), by inputs or (before opset 11) attributes.
bool clips_to_six(const PatternView& p, const Node& c) {
  if (c.inputs.size() == 3) return is_scalar(p, c.inputs[1], 0.0) && is_scalar(p, c.inputs[2], 6.0);
  if (c.inputs.size() != 1) return false;
  const auto lo = c.attrs.find("min"), hi = c.attrs.find("max");
  return lo != c.attrs.end() && hi != c.attrs.end() && close_to(lo->second.f, 0.0) && close_to(hi->second.f, 6.0);
}

// Node `r` reads `v` and divides it by 6: Div(v, 6) or Mul(v, 1/6).
bool sixth_of(const PatternView& p, const Node& r, int v) {
  if (r.inputs.size() != 2 || r.outputs.size() != 1) return false;
  if (r.op == Op::Mul) return is_scalar(p, PatternView::other_input(r, v), 1.0 / 6.0);
  return r.op == Op::Div && r.inputs[0] == v && is_scalar(p, r.inputs[1], 6.0);
}

// The only reader of `v`, when `v` is internal and that reader has one output; else -1.
int next_of(const PatternView& p, int v) {
  const int r = p.only_reader(v);
  return r >= 0 && p.internal(v) && p.graph().nodes[size_t(r)].outputs.size() == 1 ? r : -1;
}

std::optional<Match> match_at(const PatternView& p, size_t i) {
  const Graph& g = p.graph();
  const Node& c = g.nodes[i];
  if (c.op != Op::Clip || c.outputs.size() != 1 || c.inputs.empty() || !clips_to_six(p, c)) return std::nullopt;
  const Node* add = p.producer(c.inputs[0], Op::Add);
  if (!add || add->inputs.size() != 2 || !p.internal(c.inputs[0])) return std::nullopt;
  Match m;
  for (int k = 0; k < 2 && m.x < 0; ++k)
    if (is_scalar(p, add->inputs[size_t(k)], 3.0)) m.x = add->inputs[size_t(1 - k)];
  const std::optional<DType> dtype = p.dtype(m.x);
  if (m.x < 0 || !dtype || (*dtype != DType::Float32 && *dtype != DType::Float64)) return std::nullopt;
  m.nodes = {p.producer_index(c.inputs[0]), int(i)};
  const int r1 = next_of(p, c.outputs[0]);
  if (r1 < 0) return std::nullopt;
  const Node& n1 = g.nodes[size_t(r1)];
  const int r2 = next_of(p, n1.outputs[0]);
  if (r2 < 0) return std::nullopt;
  const Node& n2 = g.nodes[size_t(r2)];
  const bool product_first = n1.op == Op::Mul && PatternView::other_input(n1, c.outputs[0]) == m.x &&
                             sixth_of(p, n2, n1.outputs[0]);  // (x * clip) / 6
  const bool sixth_first = sixth_of(p, n1, c.outputs[0]) && n2.op == Op::Mul &&
                           PatternView::other_input(n2, n1.outputs[0]) == m.x;  // x * (clip / 6)
  if (!product_first && !sixth_first) return std::nullopt;
  m.nodes.push_back(r1);
  m.last = r2;
  return m;
}

}  // namespace

int fuse_hardswish(Graph& g, const PassConfig&) {
  return fuse_matches(g, match_at, [&](const Match& m, const PatternView&, Node& n) {
    n.name = fused_name(g, n, "HardSwish");
    n.op = Op::HardSwish;
    n.inputs = {m.x};
    n.attrs.clear();
  });
}

}  // namespace terrace::passes
