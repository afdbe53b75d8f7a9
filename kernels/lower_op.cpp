#include "kernels/lower_op.h"

namespace terrace::kernels {

std::string can_lower_op(const Graph& g, const Node& node) {
  if (is_reduction_op(node.op)) return can_lower_reduction(g, node);
  if (is_movement_op(node.op)) return can_lower_movement(g, node);
  return std::string("tier 1 has no kernel for ") + op_name(node.op);
}

OpKernels lower_op(const Node& node, const std::vector<OpInput>& inputs, const std::string& name) {
  if (is_reduction_op(node.op)) return lower_reduction(node, inputs, name);
  if (is_movement_op(node.op)) return lower_movement(node, inputs, name);
  fail(ErrorCode::NotImplemented, node.describe(), ": tier 1 has no kernel for ", op_name(node.op));
}

}  // namespace terrace::kernels
