// Reference kernels of the 'linalg' family (see interp/ops.def).
#include "interp/ops/common.h"

namespace terrace {

void register_linalg_kernels(KernelTable&) {}

}  // namespace terrace
