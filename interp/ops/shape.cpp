// Reference kernels of the 'shape' family (see interp/ops.def).
#include "interp/ops/common.h"

namespace terrace {

void register_shape_kernels(KernelTable&) {}

}  // namespace terrace
