// The row cache pass: a PerRowBlock kernel's row caches (kernels/schedule_cuda.h, RowCache) written
// into its IR after map_rows: each access of a cached buffer becomes an access of the row's copy
// (a Shared array, or each thread's registers at Var tr_k in the GpuRegisters loops), a store also
// writes memory unless a later loop writes the row again (or, by vectors, a RowCopy after its
// loop does), the inputs' rows are copied in by RowCopy once the row's leading lets are bound, and
// the loads read by 16-byte vectors in register loops are marked with their vector_lanes.
#pragma once
#include "kernels/ir.h"
#include "kernels/schedule_cuda.h"

namespace terrace::kernels::gpu {

// `body` after map_rows (whose loads and stores the schedule's sets still name); unchanged for the
// other mappings.
Stmt cache_rows(const Stmt& body, const CudaSchedule& s);

}  // namespace terrace::kernels::gpu
