// Reference kernels of the 'control' family (see interp/ops.def).
#include "interp/ops/common.h"

namespace terrace {

void register_control_kernels(KernelTable&) {}

}  // namespace terrace
