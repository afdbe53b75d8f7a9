#include "kernels/lower_op.h"

#include <algorithm>

namespace terrace::kernels {

namespace {

// Ops evaluated at compile time when every input they read is known (Shape and Size read only
// their input's shape).
bool evaluable(Op op) {
  switch (op) {
    case Op::Shape: case Op::Size: case Op::Constant: case Op::ConstantOfShape: case Op::Identity:
    case Op::Gather: case Op::Unsqueeze: case Op::Squeeze: case Op::Concat: case Op::Slice:
    case Op::Reshape: case Op::Flatten: case Op::Transpose: case Op::Expand: case Op::Tile:
    case Op::Cast: case Op::Add: case Op::Sub: case Op::Mul: case Op::Div: case Op::Mod:
    case Op::Neg: case Op::Abs: case Op::Sqrt: case Op::Floor: case Op::Ceil: case Op::Max: case Op::Min:
    case Op::Equal: case Op::Less: case Op::Greater: case Op::LessOrEqual: case Op::GreaterOrEqual:
    case Op::Not: case Op::And: case Op::Or: case Op::Where: case Op::Range: case Op::Trilu:
    case Op::ReduceProd: case Op::ReduceSum: case Op::ReduceMax: case Op::ReduceMin:
      return true;
    default:
      return false;
  }
}

constexpr int64_t kMaxKnownElements = int64_t(1) << 20;

bool known(const Graph& g, int v, int depth) {
  if (v < 0) return true;  // an absent optional input
  const Value& value = g.values[size_t(v)];
  if (value.info.kind != ValueKind::Tensor) return false;
  if (const auto& shape = value.info.shape; shape) {
    int64_t n = 1;
    for (int64_t d : *shape)
      if (d >= 0) n = d > 0 && n > kMaxKnownElements / d ? kMaxKnownElements + 1 : n * d;  // no overflow
    if (n > kMaxKnownElements) return false;
  }
  if (g.initializers.count(v)) return std::find(g.inputs.begin(), g.inputs.end(), v) == g.inputs.end();
  if (value.producer < 0 || depth > 32) return false;
  const Node& node = g.nodes[size_t(value.producer)];
  if (!evaluable(node.op) || !node.subgraphs().empty()) return false;
  if (node.op == Op::Shape || node.op == Op::Size) return true;
  for (int u : node.inputs)
    if (!known(g, u, depth + 1)) return false;
  return true;
}

}  // namespace

bool known_at_compile_time(const Graph& g, int v) { return known(g, v, 0); }

std::string narrow_dtype_reason(const Graph& g, const Node& node) {
  for (const auto* list : {&node.inputs, &node.outputs})
    for (int v : *list) {
      if (v < 0) continue;
      const Value& value = g.values[size_t(v)];
      if (value.info.dtype && is_narrow(*value.info.dtype))
        return "'" + value.name + "' is " + dtype_name(*value.info.dtype) +
               ": the float8, int4/uint4 and float4 types have no compiled kernels (they run in the interpreter)";
    }
  return "";
}

std::string can_lower_op(const Graph& g, const Node& node) {
  if (std::string why = narrow_dtype_reason(g, node); !why.empty()) return why;
  if (is_reduction_op(node.op)) return can_lower_reduction(g, node);
  if (is_movement_op(node.op)) return can_lower_movement(g, node);
  return std::string("tier 1 has no kernel for ") + op_name(node.op);
}

OpKernels lower_op(const Node& node, const std::vector<OpInput>& inputs, const std::string& name) {
  for (const OpInput& in : inputs)
    TERRACE_CHECK(in.absent || !is_narrow(in.sig.dtype), NotImplemented, node.describe(), ": an input is ",
                  dtype_name(in.sig.dtype), ", which has no compiled kernels (float8, int4/uint4, float4)");
  if (is_reduction_op(node.op)) return lower_reduction(node, inputs, name);
  if (is_movement_op(node.op)) return lower_movement(node, inputs, name);
  fail(ErrorCode::NotImplemented, node.describe(), ": tier 1 has no kernel for ", op_name(node.op));
}

}  // namespace terrace::kernels
