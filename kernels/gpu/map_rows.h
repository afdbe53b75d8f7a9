// The row mapping pass: a PerRowWarp or PerRowBlock kernel (kernels/schedule_cuda.h) rewritten so
// that its GPU mapping is in the IR, for the renderer to print: the Parallel loop as a warp or a
// block per row (ForKind::GpuWarp / GpuBlock), the row's lane loops spread over the lanes (GpuLane /
// GpuThread, or GpuRegisters for a row held in registers), each fold's per-thread values combined
// after its loop by FoldStart, WarpReduce, Barrier and BlockReduce nodes (as TVM's
// lower_thread_allreduce), the row's stores outside its loops made by its FirstThread, and a
// block's shared arrays (its rows' copies and the folds' parts)
// Allocate'd in MemoryScope::Shared around the row loop.
#pragma once
#include "kernels/ir.h"
#include "kernels/schedule_cuda.h"

namespace terrace::kernels::gpu {

// `body` (the kernel `s` was decided for) mapped as above; unchanged for the other mappings. The
// nodes inside the lane loops, and the loads and stores outside them, are shared with `body`, so
// the schedule's sets of accesses still name them.
Stmt map_rows(const Stmt& body, const CudaSchedule& s);

}  // namespace terrace::kernels::gpu
