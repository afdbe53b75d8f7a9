// No-op elimination: nodes whose result is an exact copy of their first input are removed, their
// readers reading the input instead (where the result is a graph output or read by a body by
// name, the input's producer writes the result under its name instead; a graph input passed
// straight to a graph output keeps its node). Removed: Identity; Dropout in inference (no
// training_mode, or a constant false one, or a ratio of 0) whose mask nobody reads; Cast and
// CastLike to the type the input has; Transpose by the identity permutation; Concat, Sum, Max,
// Min and Mean of one input; Reshape, Flatten, Squeeze, Unsqueeze, Expand and Tile whose result
// has the input's static shape, and a Reshape whose constant target keeps every dim (0 copies a
// dim, a known dim equal to the input's, at most one -1 for the dim left).
#include "tiers/passes/graph_edit.h"
#include "tiers/passes/passes.h"

namespace terrace::passes {
namespace {

std::optional<DType> dtype_of(const Graph& g, int v) {
  if (v < 0) return std::nullopt;
  if (is_constant(g, v)) return constant(g, v).dtype();
  const ValueInfo& info = g.values[size_t(v)].info;
  if (info.kind != ValueKind::Tensor) return std::nullopt;
  return info.dtype;
}

const Shape* known_rank(const Graph& g, int v) {
  if (v < 0) return nullptr;
  if (is_constant(g, v)) return &constant(g, v).shape();
  const ValueInfo& info = g.values[size_t(v)].info;
  return info.kind == ValueKind::Tensor && info.shape ? &*info.shape : nullptr;
}

bool constant_scalar(const Graph& g, int v, double* value) {
  if (!is_constant(g, v)) return false;
  const Tensor& t = constant(g, v);
  if (t.numel() != 1 || t.dtype() == DType::String) return false;
  *value = t.get_as_double(0);
  return true;
}

bool dropout_is_identity(const Graph& g, const Node& n, const std::vector<int>& uses) {
  if (n.outputs.size() > 1 && n.outputs[1] >= 0 && uses[size_t(n.outputs[1])] > 0) return false;
  if (n.inputs.size() < 3 || n.inputs[2] < 0) return true;
  double training = 0, ratio = 0.5;
  if (!constant_scalar(g, n.inputs[2], &training)) return false;
  if (training == 0) return true;
  if (n.inputs.size() > 1 && n.inputs[1] >= 0 && !constant_scalar(g, n.inputs[1], &ratio)) return false;
  return ratio == 0;
}

// A Reshape whose constant target gives back the input's shape, known dims or not.
bool reshape_keeps_shape(const Graph& g, const Node& n) {
  if (n.inputs.size() < 2 || !is_constant(g, n.inputs[1])) return false;
  const Shape* in = known_rank(g, n.inputs[0]);
  const Tensor& target = constant(g, n.inputs[1]);
  if (!in || target.rank() != 1 || target.dtype() != DType::Int64 || target.numel() != int64_t(in->size()))
    return false;
  const bool allowzero = n.attr_int("allowzero", 0) != 0;
  int free_dims = 0;
  for (size_t d = 0; d < in->size(); ++d) {
    int64_t t = target.data<int64_t>()[d], have = (*in)[d];
    if (t == 0 && !allowzero) continue;
    if (t >= 0 && t == have) continue;
    if (t == -1) {
      ++free_dims;
      continue;
    }
    return false;
  }
  return free_dims <= 1;
}

bool same_static_shape(const Graph& g, int a, int b) {
  const Shape* sa = static_shape(g, a);
  const Shape* sb = static_shape(g, b);
  return sa && sb && *sa == *sb;
}

// True when node n's first output is an exact copy of its first input.
bool is_noop(const Graph& g, const Node& n, const std::vector<int>& uses) {
  if (n.inputs.empty() || n.inputs[0] < 0 || n.outputs.empty() || n.outputs[0] < 0) return false;
  for (size_t k = 1; k < n.outputs.size(); ++k)
    if (n.outputs[k] >= 0 && !(n.op == Op::Dropout && k == 1)) return false;
  const int in = n.inputs[0], out = n.outputs[0];
  switch (n.op) {
    case Op::Identity:
      return true;
    case Op::Dropout:
      return dropout_is_identity(g, n, uses);
    case Op::Cast: {
      DType to;
      auto from = dtype_of(g, in);
      return n.has_attr("to") && dtype_from_onnx(int(n.attr_int("to")), &to) && from && *from == to;
    }
    case Op::CastLike: {
      auto from = dtype_of(g, in);
      auto to = n.inputs.size() > 1 ? dtype_of(g, n.inputs[1]) : std::nullopt;
      return from && to && *from == *to;
    }
    case Op::Transpose: {
      const Shape* s = known_rank(g, in);
      if (!s) return false;
      std::vector<int64_t> perm = n.attr_ints("perm", {});
      if (!n.has_attr("perm")) return s->size() <= 1;
      if (perm.size() != s->size()) return false;
      for (size_t d = 0; d < perm.size(); ++d)
        if (perm[d] != int64_t(d)) return false;
      return true;
    }
    case Op::Concat: case Op::Sum: case Op::Max: case Op::Min: case Op::Mean:
      return n.inputs.size() == 1 && dtype_of(g, in) && dtype_of(g, in) == dtype_of(g, out);
    case Op::Reshape:
      return same_static_shape(g, in, out) || reshape_keeps_shape(g, n);
    case Op::Flatten: case Op::Squeeze: case Op::Unsqueeze: case Op::Expand: case Op::Tile:
      return same_static_shape(g, in, out);
    default:
      return false;
  }
}

}  // namespace

int eliminate_noops(Graph& g, const PassConfig&) {
  std::vector<int> uses = use_counts(g);
  std::vector<bool> pinned = pinned_values(g);
  std::vector<bool> dead(g.nodes.size(), false);
  int removed = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (!is_noop(g, n, uses)) continue;
    const int in = n.inputs[0], out = n.outputs[0];
    if (!bypass(g, int(i), in, out, pinned)) continue;
    dead[i] = true;
    ++removed;
  }
  if (removed) remove_nodes(g, std::move(dead));
  return removed;
}

}  // namespace terrace::passes
