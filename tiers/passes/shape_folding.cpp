// Shape folding: Shape and Size of values whose dims are statically known become initializers,
// and so does shape arithmetic that only moves known dims around. A Shape of a value with some
// unknown dims (a dynamic batch) is tracked as a partly known vector, unknown entries held by a
// sentinel; Gather, Slice, Concat, Unsqueeze, Squeeze, Reshape, Flatten and Identity move its
// entries without computing with them, so running their kernels on that vector tells which
// entries of the result are known. A result with no unknown entry becomes an initializer
// (Shape(x)[1:] of a [batch,3,224,224] input: [3,224,224]); the arithmetic after it (Div, Mul,
// Cast, ConstantOfShape, ...) is then constant folding's.
#include <algorithm>
#include <limits>
#include <optional>
#include <unordered_map>

#include "interp/interpreter.h"
#include "tiers/passes/graph_edit.h"
#include "tiers/passes/passes.h"

namespace terrace::passes {
namespace {

// No dim is negative: a negative entry is an unknown dim.
constexpr int64_t kUnknown = std::numeric_limits<int64_t>::min() / 2;

bool has_unknown(const Tensor& t) {
  if (t.dtype() != DType::Int64) return true;
  const int64_t* p = t.data<int64_t>();
  for (int64_t i = 0; i < t.numel(); ++i)
    if (p[i] == kUnknown) return true;
  return false;
}

// Ops that only move the entries of their data inputs (which inputs: `data_input`).
bool moves_data(Op op) {
  switch (op) {
    case Op::Gather: case Op::Slice: case Op::Concat: case Op::Unsqueeze: case Op::Squeeze:
    case Op::Reshape: case Op::Flatten: case Op::Identity:
      return true;
    default:
      return false;
  }
}
bool data_input(Op op, size_t k) { return op == Op::Concat || k == 0; }

// The dims of x (unknown ones as kUnknown) that Shape(x) returns, given its start and end.
std::optional<Tensor> shape_of(const Graph& g, const Node& n) {
  int x = n.inputs.empty() ? -1 : n.inputs[0];
  if (x < 0) return std::nullopt;
  Shape dims;
  if (is_constant(g, x)) dims = constant(g, x).shape();
  else {
    const ValueInfo& info = g.values[size_t(x)].info;
    if (info.kind != ValueKind::Tensor || !info.shape) return std::nullopt;
    dims = *info.shape;
  }
  const int64_t rank = int64_t(dims.size());
  auto clamp = [rank](int64_t i) { return std::clamp(i < 0 ? i + rank : i, int64_t(0), rank); };
  int64_t start = clamp(n.attr_int("start", 0)), end = clamp(n.attr_int("end", rank));
  std::vector<int64_t> out;
  for (int64_t d = start; d < end; ++d) out.push_back(dims[size_t(d)] < 0 ? kUnknown : dims[size_t(d)]);
  return Tensor::from_vector<int64_t>({int64_t(out.size())}, out);
}

}  // namespace

int fold_shapes(Graph& g, const PassConfig&) {
  Frame frame;
  frame.graph = &g;
  frame.env.resize(g.values.size());
  std::unordered_map<int, Tensor> partial;  // value -> its entries, unknown ones kUnknown
  std::vector<bool> dead(g.nodes.size(), false);
  int folded = 0;
  auto settle = [&](size_t i, int out, Tensor t) {
    if (has_unknown(t)) {
      partial[out] = std::move(t);
      return;
    }
    make_constant(g, out, std::move(t));
    dead[i] = true;
    ++folded;
  };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.outputs.size() != 1 || n.outputs[0] < 0) continue;
    const int out = n.outputs[0];
    if (n.op == Op::Shape) {
      if (auto t = shape_of(g, n)) settle(i, out, std::move(*t));
      continue;
    }
    if (n.op == Op::Size) {
      int x = n.inputs.empty() ? -1 : n.inputs[0];
      if (const Shape* s = static_shape(g, x)) {
        int64_t count = 1;
        for (int64_t d : *s) count *= d;
        settle(i, out, Tensor::scalar<int64_t>(count));
      }
      continue;
    }
    if (!moves_data(n.op)) continue;
    // At least one data input partly known, every other input constant.
    bool any_partial = false, ok = true;
    std::vector<RValue> values(n.inputs.size());
    for (size_t k = 0; k < n.inputs.size() && ok; ++k) {
      int v = n.inputs[k];
      if (v < 0) continue;
      if (auto it = partial.find(v); it != partial.end() && data_input(n.op, k)) {
        values[k] = RValue(it->second);
        any_partial = true;
      } else if (is_constant(g, v)) {
        values[k] = RValue(constant(g, v));
      } else {
        ok = false;
      }
    }
    if (!ok || !any_partial) continue;
    std::vector<const RValue*> in;
    for (size_t k = 0; k < n.inputs.size(); ++k) in.push_back(n.inputs[k] >= 0 ? &values[k] : nullptr);
    try {
      std::vector<RValue> r = interpret_node(n, in, &frame);
      if (!r.empty() && r[0].kind == ValueKind::Tensor && r[0].tensor.defined())
        settle(i, out, std::move(r[0].tensor));
    } catch (const std::exception&) {
      // left to fail at run time
    }
  }
  if (folded) remove_nodes(g, std::move(dead));
  return folded;
}

}  // namespace terrace::passes
