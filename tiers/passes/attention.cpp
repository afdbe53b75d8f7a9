// Attention blocks: the scaled dot-product attention exporters write,
//   s = MatMul(Q, Kt)  [* c or / c]  [+ mask | Where(cond, -inf, .)]  Softmax(axis -1)  MatMul(., V)
// found (find_attention) and rewritten into ONNX's Attention (opset 23; fuse_attention):
// Attention(Q, K, V, attn_mask) {scale}, K being Kt with its last two dims swapped (the Transpose
// that made Kt gets the composed perm, or one more Transpose is made), scale = c (or 1 / c; scale 1
// where the exporter did not scale: Attention's default 1/sqrt(head size) would be wrong), a float
// mask as the additive attn_mask, a Where's condition negated as the boolean one (Attention's says
// where to attend; a constant condition is negated here, a computed one by a Not). Rewritten only
// where Attention computes the same thing: Q, K^T and V 4-D with one batch and head count (no
// broadcasting between them: Attention does not broadcast) and a mask that broadcasts to the scores
// without widening them. The interpreter computes Attention in double, so answers differ by
// rounding only (OptimizeLevel::Extended).
//
// The pipeline runs the rewrite only with PassConfig::fuse_attention: no tier compiles Attention
// yet, and a fused block would be one graph break where its five ops are compiled regions today.
#include <algorithm>
#include <cmath>
#include <map>

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

namespace {

// Dim `da` of `a` and dim `db` of `b` are the same size: equal and known, or one symbolic name.
bool same_dim(const Graph& g, int a, size_t da, int b, size_t db) {
  const ValueInfo &ia = g.values[size_t(a)].info, &ib = g.values[size_t(b)].info;
  const Shape *sa = is_constant(g, a) ? &constant(g, a).shape() : ia.shape ? &*ia.shape : nullptr;
  const Shape *sb = is_constant(g, b) ? &constant(g, b).shape() : ib.shape ? &*ib.shape : nullptr;
  if (!sa || !sb || da >= sa->size() || db >= sb->size()) return false;
  const int64_t x = (*sa)[da], y = (*sb)[db];
  if (x >= 0 || y >= 0) return x == y;
  return da < ia.dim_names.size() && db < ib.dim_names.size() && !ia.dim_names[da].empty() &&
         ia.dim_names[da] == ib.dim_names[db];
}

// Attention computes what the block computes (the header's conditions).
bool fusible(const PatternView& p, const AttentionBlock& b, const PassConfig& config) {
  const Graph& g = p.graph();
  for (int v : {b.q, b.k_transposed, b.v}) {
    const Shape* s = p.shape(v);
    if (!s || s->size() != 4 || p.dtype(v) != p.dtype(b.q)) return false;
  }
  if (p.dtype(b.q) != config.attention_dtype) return false;
  // Q's and V's head sizes (K^T's is Q's); an unknown one may exceed the tier's.
  for (const Shape* s : {p.shape(b.q), p.shape(b.v)})
    if ((*s)[3] < 0 || (*s)[3] > config.attention_max_head) return false;
  const int q = b.q, kt = b.k_transposed, v = b.v;
  if (!same_dim(g, q, 0, kt, 0) || !same_dim(g, q, 0, v, 0) || !same_dim(g, q, 1, kt, 1) || !same_dim(g, q, 1, v, 1) ||
      !same_dim(g, q, 3, kt, 2) || !same_dim(g, kt, 3, v, 2))
    return false;
  if (b.mask < 0) return true;
  const Shape* m = p.shape(b.mask);
  const DType want = b.mask_kind == AttentionBlock::MaskKind::WhereNegInf ? DType::Bool : *p.dtype(b.q);
  if (!m || m->size() > 4 || p.dtype(b.mask) != want) return false;
  // Scores are [B, H, L, S] = q's 0, 1, 2 and kt's 3: each mask dim 1 or that dim.
  const std::pair<int, size_t> scores[4] = {{q, 0}, {q, 1}, {q, 2}, {kt, 3}};
  for (size_t j = 0; j < m->size(); ++j) {
    const size_t d = 4 - m->size() + j;
    if ((*m)[j] != 1 && !same_dim(g, b.mask, j, scores[d].first, scores[d].second)) return false;
  }
  return true;
}

}  // namespace

// Attention's mask for the block: an additive one as it is; a Where's condition negated (true:
// attend), once per condition, as a constant or by a Not in the Where's slot; -1 for none.
int attend_mask(Graph& g, const AttentionBlock& b, const std::string& stem, std::vector<bool>& dead,
                std::map<int, int>& negated) {
  if (b.mask_kind == AttentionBlock::MaskKind::Additive) return b.mask;
  if (b.mask_kind != AttentionBlock::MaskKind::WhereNegInf) return -1;
  if (auto it = negated.find(b.mask); it != negated.end()) return it->second;  // the layers share one causal mask
  if (is_constant(g, b.mask)) {
    Tensor attend = constant(g, b.mask).clone();
    for (int64_t e = 0; e < attend.numel(); ++e) attend.data<bool>()[e] = !attend.data<bool>()[e];
    return negated[b.mask] = add_constant(g, g.values[size_t(b.mask)].name + "_attend", std::move(attend));
  }
  // A Not in the Where's slot (it reads the condition, so the condition is made before).
  const int where = g.values[size_t(g.nodes[size_t(b.softmax)].inputs[0])].producer;
  Node& not_node = g.nodes[size_t(where)];
  ValueInfo m_info = g.values[size_t(b.mask)].info;
  not_node.op = Op::Not;
  not_node.name = stem + "/attend";
  not_node.attrs.clear();
  not_node.inputs = {b.mask};
  const int mask = new_value(g, stem + "/attend", m_info, where);
  not_node.outputs = {mask};
  dead[size_t(where)] = false;
  return mask;
}

// K for the block: where a Transpose read by nothing else made Kt (`composable`), that Transpose
// with its last two output dims swapped, one movement instead of two; else one more Transpose, in
// the QK MatMul's slot (it reads Kt, so Kt is made before).
int keys_of(Graph& g, const AttentionBlock& b, bool composable, const std::string& stem, std::vector<bool>& dead) {
  ValueInfo k_info = g.values[size_t(b.k_transposed)].info;  // fusible: a 4-D tensor of known dtype
  if (is_constant(g, b.k_transposed)) {
    k_info.dtype = constant(g, b.k_transposed).dtype();
    k_info.shape = constant(g, b.k_transposed).shape();
  }
  std::swap((*k_info.shape)[2], (*k_info.shape)[3]);
  k_info.dim_names.resize(4);
  std::swap(k_info.dim_names[2], k_info.dim_names[3]);
  if (composable) {
    Node& t = g.nodes[size_t(g.values[size_t(b.k_transposed)].producer)];
    const std::vector<int64_t> p = t.attr_ints("perm");
    t.attrs["perm"] = ints_attribute({p[0], p[1], p[3], p[2]});
    g.values[size_t(b.k_transposed)].info = k_info;
    return b.k_transposed;
  }
  const int qk_node = b.nodes.front();
  Node& host = g.nodes[size_t(qk_node)];
  host.op = Op::Transpose;
  host.name = stem + "/K";
  host.attrs.clear();
  host.attrs["perm"] = ints_attribute({0, 1, 3, 2});
  host.inputs = {b.k_transposed};
  const int k = new_value(g, stem + "/K", k_info, qk_node);
  host.outputs = {k};
  dead[size_t(qk_node)] = false;
  return k;
}

int fuse_attention(Graph& g, const PassConfig& config) {
  std::vector<AttentionBlock> blocks = find_attention(g);
  std::vector<bool> ok(blocks.size(), false), composable(blocks.size(), false);
  {
    PatternView p(g);
    for (size_t i = 0; i < blocks.size(); ++i) {
      ok[i] = fusible(p, blocks[i], config);
      const Node* t = p.producer(blocks[i].k_transposed, Op::Transpose);
      composable[i] = t && p.internal(blocks[i].k_transposed) && t->attr_ints("perm").size() == 4;
    }
  }
  std::vector<bool> dead(g.nodes.size(), false);
  std::map<int, int> negated;  // constant Where conditions and their negation
  int fused = 0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (!ok[i]) continue;
    const AttentionBlock& b = blocks[i];
    for (int n : b.nodes) dead[size_t(n)] = true;
    dead[size_t(b.output_matmul)] = false;
    const std::string stem = fused_name(g, g.nodes[size_t(b.output_matmul)], "Attention");
    const int k = keys_of(g, b, composable[i], stem, dead);
    const int mask = attend_mask(g, b, stem, dead, negated);
    Node& att = g.nodes[size_t(b.output_matmul)];
    att.op = Op::Attention;
    att.name = stem;
    att.inputs = {b.q, k, b.v};
    if (mask >= 0) att.inputs.push_back(mask);
    att.attrs.clear();
    att.attrs["scale"] = float_attribute(float(b.scale));
    ++fused;
  }
  if (fused) remove_nodes(g, std::move(dead));
  return fused;
}

}  // namespace terrace::passes
