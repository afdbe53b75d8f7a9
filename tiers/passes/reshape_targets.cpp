// Reshape targets on symbolic dims: exporters write a Reshape that keeps a dynamic dim (the batch)
// as Reshape(x, Concat(Unsqueeze(Gather(Shape(s), k)), [16], [4], [16])), computing the target at
// run time; shape folding cannot fold dim k, whose size only the call knows. When dim k of s and
// dim i of x (i the position the piece lands at in the target) carry the same symbolic name, the
// piece is x's own dim i, which ONNX's Reshape copies for a target dim 0 (allowzero 0): the target
// becomes the constant [0, 16, 4, 16], the Shape arithmetic dies, and the Reshape (a view) can
// join a compiled region. Answers are bitwise the same (the target evaluates to the same shape).
//
// One name, one size: ONNX gives dims of one dim_param the same size, and shape inference gives an
// intermediate's dim a graph input's name only where it is that dim. Terrace does not check at run
// time that graph inputs agree on a shared name, so a name is used only when it appears on exactly
// one graph input dim: then every dim named so is that one dim of that one input.
#include <map>

#include "tiers/passes/passes.h"
#include "tiers/passes/pattern.h"

namespace terrace::passes {
namespace {

// The symbolic name of the single dim `v` holds, when v is Unsqueeze(Gather(Shape(s), k), [0]) or
// Gather(Shape(s), [k]) and dim k of s has a name; "" otherwise.
std::string shape_dim_name(const PatternView& p, int v) {
  const Graph& g = p.graph();
  int idx = -1, shape = -1;
  bool scalar_index = false;
  if (const Node* u = p.producer(v, Op::Unsqueeze)) {
    std::vector<int64_t> axes = u->inputs.size() > 1 && u->inputs[1] >= 0
                                    ? (is_constant(g, u->inputs[1]) ? constant(g, u->inputs[1]).to_int64_vector()
                                                                    : std::vector<int64_t>{-99})
                                    : u->attr_ints("axes", {});
    if (axes != std::vector<int64_t>{0} && axes != std::vector<int64_t>{-1}) return "";
    const Node* gather = p.producer(u->inputs[0], Op::Gather);
    if (!gather) return "";
    idx = gather->inputs.size() == 2 ? gather->inputs[1] : -1;
    shape = gather->inputs[0];
    scalar_index = true;
    if (gather->attr_int("axis", 0) != 0) return "";
  } else if (const Node* gather = p.producer(v, Op::Gather)) {
    if (gather->inputs.size() != 2 || gather->attr_int("axis", 0) != 0) return "";
    idx = gather->inputs[1];
    shape = gather->inputs[0];
  } else {
    return "";
  }
  if (!is_constant(g, idx) || constant(g, idx).numel() != 1 || constant(g, idx).rank() != (scalar_index ? 0 : 1))
    return "";
  const Node* sh = p.producer(shape, Op::Shape);
  if (!sh || sh->has_attr("start") || sh->has_attr("end")) return "";
  const int s = sh->inputs[0];
  const ValueInfo& info = g.values[size_t(s)].info;
  if (is_constant(g, s) || info.kind != ValueKind::Tensor || !info.shape) return "";
  const int64_t rank = int64_t(info.shape->size());
  int64_t k = constant(g, idx).to_int64_vector()[0];
  if (k < 0) k += rank;
  if (k < 0 || k >= rank || (*info.shape)[size_t(k)] >= 0 || size_t(k) >= info.dim_names.size()) return "";
  return info.dim_names[size_t(k)];
}

}  // namespace

int fold_reshape_targets(Graph& g, const PassConfig&) {
  std::map<std::string, int> on_inputs;  // how many graph input dims carry each name
  for (int v : g.inputs)
    for (const std::string& name : g.values[size_t(v)].info.dim_names)
      if (!name.empty()) ++on_inputs[name];
  PatternView p(g);
  int rewritten = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    if (n.op != Op::Reshape || n.inputs.size() != 2 || n.attr_int("allowzero", 0) != 0 ||
        is_constant(g, n.inputs[1]))
      continue;
    const Node* cat = p.producer(n.inputs[1], Op::Concat);
    const ValueInfo& x = g.values[size_t(n.inputs[0])].info;
    if (!cat || cat->attr_int("axis", 0) != 0 || x.kind != ValueKind::Tensor || !x.shape) continue;
    std::vector<int64_t> target;
    bool ok = true;
    for (int piece : cat->inputs) {
      if (piece >= 0 && is_constant(g, piece)) {
        const Tensor& t = constant(g, piece);
        if (t.dtype() != DType::Int64 || t.rank() != 1) ok = false;
        else for (int64_t d : t.to_int64_vector()) target.push_back(d);
        continue;
      }
      const std::string name = piece >= 0 ? shape_dim_name(p, piece) : "";
      const size_t at = target.size();
      ok = ok && !name.empty() && on_inputs[name] == 1 && at < x.shape->size() && (*x.shape)[at] < 0 &&
           at < x.dim_names.size() && x.dim_names[at] == name;
      target.push_back(0);  // x's own dim `at`
      if (!ok) break;
    }
    if (!ok) continue;
    n.inputs[1] = add_constant(g, g.values[size_t(n.inputs[1])].name + "_symbolic",
                               Tensor::from_vector<int64_t>({int64_t(target.size())}, target));
    ++rewritten;
  }
  if (rewritten) remove_nodes(g, std::vector<bool>(g.nodes.size(), false));  // the Shape arithmetic left unread
  return rewritten;
}

}  // namespace terrace::passes
