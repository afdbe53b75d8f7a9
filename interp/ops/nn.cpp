// Reference kernels of the 'nn' family (see interp/ops.def).
#include "interp/ops/common.h"

namespace terrace {

void register_nn_kernels(KernelTable&) {}

}  // namespace terrace
