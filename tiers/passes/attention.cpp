// Attention blocks: detection of the scaled dot-product attention exporters write,
//   s = MatMul(Q, Kt)  [* c or / c]  [+ mask | Where(cond, -inf, .)]  Softmax(axis -1)  MatMul(., V)
// as the unit the tiers would compile at once (one pass over the scores instead of five). The op
// it would become is ONNX's Attention (opset 23): Attention(Q, K, V, attn_mask) {scale}, with K
// the transpose of Kt's last two dims (a Transpose's perm composed, or one more Transpose),
// scale = c (or 1 / c) where the exporter scaled (Attention's default 1/sqrt(head size) where it
// did not scale at all would be wrong: scale 1 is set explicitly), a float mask passed as the
// additive attn_mask, and a Where mask as its boolean negation (Attention's boolean mask says
// where to attend; a constant one is negated at rewrite time). The rewrite waits for Attention in
// the interpreter (the reference every tier is judged against); until then this finds the blocks
// and says so in the pipeline's debug log.
#include <algorithm>
#include <cmath>

#include "tiers/passes/passes.h"
#include "tiers/passes/pattern.h"

namespace terrace::passes {
namespace {

// Softmax over the last axis (opset 13's meaning; before 13 a Softmax flattens to 2-D around its
// axis, which is the last axis only for a 2-D input).
bool last_axis_softmax(const PatternView& p, const Node& n) {
  const int64_t axis = n.attr_int("axis", p.graph().opset >= 13 ? -1 : 1);
  const Shape* s = p.shape(n.inputs[0]);
  if (p.graph().opset < 13) return s && s->size() == 2 && (axis == 1 || axis == -1);
  return axis == -1 || (s && axis == int64_t(s->size()) - 1);
}

}  // namespace

std::vector<AttentionBlock> find_attention(const Graph& g) {
  PatternView p(g);
  std::vector<AttentionBlock> found;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& sm = g.nodes[i];
    if (sm.op != Op::Softmax || sm.inputs.size() != 1 || sm.outputs.size() != 1 || !last_axis_softmax(p, sm))
      continue;
    AttentionBlock b;
    b.softmax = int(i);
    // Softmax(.) @ V
    const int probs = sm.outputs[0];
    const int pv = p.only_reader(probs);
    if (pv < 0 || !p.internal(probs) || g.nodes[size_t(pv)].op != Op::MatMul || g.nodes[size_t(pv)].inputs[0] != probs)
      continue;
    b.output_matmul = pv;
    b.v = g.nodes[size_t(pv)].inputs[1];
    int s = sm.inputs[0];
    // The mask: Where(cond, -inf, s) or Add(s, mask).
    if (const Node* w = p.producer(s, Op::Where); w && p.internal(s) && w->inputs.size() == 3) {
      auto fill = p.float_scalar(w->inputs[1]);
      if (!fill || !std::isinf(*fill) || *fill > 0) continue;
      b.mask = w->inputs[0];
      b.mask_kind = AttentionBlock::MaskKind::WhereNegInf;
      b.nodes.push_back(p.producer_index(s));
      s = w->inputs[2];
    } else if (const Node* a = p.producer(s, Op::Add); a && p.internal(s) && a->inputs.size() == 2) {
      // The scores are whichever input comes from the scaling or the product.
      int k = -1;
      for (int c = 0; c < 2 && k < 0; ++c) {
        const int in = a->inputs[size_t(c)];
        if (p.producer(in, Op::MatMul) || p.producer(in, Op::Div) || p.producer(in, Op::Mul)) k = c;
      }
      if (k < 0) continue;
      b.mask = a->inputs[size_t(1 - k)];
      b.mask_kind = AttentionBlock::MaskKind::Additive;
      b.nodes.push_back(p.producer_index(s));
      s = a->inputs[size_t(k)];
    }
    // The scaling: Div(raw, c) or Mul(raw, c).
    if (const Node* d = p.producer(s, Op::Div); d && p.internal(s) && d->inputs.size() == 2) {
      auto c = p.float_scalar(d->inputs[1]);
      if (!c || *c == 0) continue;
      b.scale = 1 / *c;
      b.nodes.push_back(p.producer_index(s));
      s = d->inputs[0];
    } else if (const Node* m = p.producer(s, Op::Mul); m && p.internal(s) && m->inputs.size() == 2) {
      int k = p.float_scalar(m->inputs[1]) ? 1 : p.float_scalar(m->inputs[0]) ? 0 : -1;
      if (k < 0) continue;
      b.scale = *p.float_scalar(m->inputs[size_t(k)]);
      b.nodes.push_back(p.producer_index(s));
      s = m->inputs[size_t(1 - k)];
    }
    const Node* qk = p.producer(s, Op::MatMul);
    if (!qk || !p.internal(s)) continue;
    b.q = qk->inputs[0];
    b.k_transposed = qk->inputs[1];
    b.nodes.push_back(p.producer_index(s));
    b.nodes.push_back(b.softmax);
    b.nodes.push_back(b.output_matmul);
    std::sort(b.nodes.begin(), b.nodes.end());
    found.push_back(b);
  }
  return found;
}

}  // namespace terrace::passes
