// Reference kernels of the 'elementwise' family (see interp/ops.def).
#include "interp/ops/common.h"

namespace terrace {

void register_elementwise_kernels(KernelTable&) {}

}  // namespace terrace
