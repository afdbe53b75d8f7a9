// The element mapping pass: a PerElement kernel (kernels/schedule_cuda.h) with its Parallel loop,
// and in 2-D the Vectorized loop it flattens, as GpuElements loops, and the loads and stores the
// schedule moves 16 bytes at a time marked with their vector_lanes, for the renderer to print.
#pragma once
#include "kernels/ir.h"
#include "kernels/schedule_cuda.h"

namespace terrace::kernels::gpu {

// `body` (the kernel `s` was decided for) mapped as above; unchanged for the other mappings.
Stmt map_elements(const Stmt& body, const CudaSchedule& s);

}  // namespace terrace::kernels::gpu
