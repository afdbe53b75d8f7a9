// compile_cpu_kernel and run_cpu_kernel: render -> CpuJit, and tbb::parallel_for over the range.
#include "jit/cpu_kernel.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "kernels/render_c.h"

namespace terrace::jit {

CpuKernel compile_cpu_kernel(const kernels::LoweredFunc& f, CpuJit& jit) {
  CpuKernel k;
  k.source = kernels::render_c(f, kernels::Dialect::Cpp);
  k.code = jit.compile(f.name, k.source, {f.name});
  k.fn = k.code->kernel(f.name);
  k.parallel_extent = f.parallel_extent;
  k.work_per_iteration = f.work_per_iteration;
  return k;
}

void run_cpu_kernel(const CpuKernel& kernel, std::span<void* const> buffers) {
  TERRACE_CHECK(kernel.fn, InvalidArgument, "run_cpu_kernel: kernel not compiled");
  void** args = const_cast<void**>(buffers.data());
  const int64_t n = kernel.parallel_extent;
  const int64_t grain = std::max<int64_t>(1, kMinElementsPerTask / kernel.work_per_iteration);
  if (n <= grain) {
    if (n > 0) kernel.fn(args, 0, n);
    return;
  }
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, grain),
                    [&](const tbb::blocked_range<int64_t>& r) { kernel.fn(args, r.begin(), r.end()); });
}

}  // namespace terrace::jit
