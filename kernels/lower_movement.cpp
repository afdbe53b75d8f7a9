// Data movement lowered to kernels (kernels/lower_op.h). Not written yet.
#include "kernels/lower_op.h"

namespace terrace::kernels {

bool is_movement_op(Op) { return false; }
std::string can_lower_movement(const Graph&, const Node& node) {
  return std::string("tier 1 has no kernel for ") + op_name(node.op);
}
OpKernels lower_movement(const Node& node, const std::vector<OpInput>&, const std::string&) {
  fail(ErrorCode::NotImplemented, node.describe(), ": tier 1 has no kernel for ", op_name(node.op));
}

}  // namespace terrace::kernels
