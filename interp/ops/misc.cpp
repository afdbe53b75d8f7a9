// Reference kernels of the 'misc' family (see interp/ops.def).
#include "interp/ops/common.h"

namespace terrace {

void register_misc_kernels(KernelTable&) {}

}  // namespace terrace
