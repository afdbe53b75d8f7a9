// Reductions and normalisations lowered to kernels (kernels/lower_op.h). Not written yet.
#include "kernels/lower_op.h"

namespace terrace::kernels {

bool is_reduction_op(Op) { return false; }
std::string can_lower_reduction(const Graph&, const Node& node) {
  return std::string("tier 1 has no kernel for ") + op_name(node.op);
}
OpKernels lower_reduction(const Node& node, const std::vector<OpInput>&, const std::string&) {
  fail(ErrorCode::NotImplemented, node.describe(), ": tier 1 has no kernel for ", op_name(node.op));
}

}  // namespace terrace::kernels
