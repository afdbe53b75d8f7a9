// The GPU kernel pipeline: a lowered (device-neutral) kernel, its CUDA schedule decided once
// (kernels/schedule_cuda.h, which splits a row's max or min into lanes first), then the mapping
// passes that write the schedule's decisions into the IR and the pass that makes the folds
// stores, each followed by verify() and, on request, a dump of the IR. The CUDA renderer prints
// what comes out.
#pragma once
#include <functional>
#include <string>

#include "kernels/ir.h"
#include "kernels/schedule_cuda.h"

namespace terrace::kernels::gpu {

struct GpuKernel {
  LoweredFunc func;       // the body after the passes
  CudaSchedule schedule;  // what they applied: the launch's block, the rows' caches, vector accesses
  Stmt source;            // the body before (the schedule's): keeps alive the nodes its sets name
};

// Called after each pass with its name and the kernel as it left it.
using PassObserver = std::function<void(const std::string& pass, const LoweredFunc& f)>;

// The passes over `s.body` (f's as scheduled; f's own where s has none) with its schedule `s`
// (schedule_cuda(f), perhaps adjusted: the element-by-element twin of a kernel whose rows move by
// vectors sets row_vector 1). TERRACE_GPU_PASS_DUMP_DIR: each pass's IR written there as
// <kernel>.<n>.<pass>.ir as well.
GpuKernel run_gpu_passes(const LoweredFunc& f, CudaSchedule s, const PassObserver& observe = {});

}  // namespace terrace::kernels::gpu
