// compile_cpu_kernel and run_cpu_kernel: render -> CpuJit, and an OpenMP loop over the range.
#include "jit/cpu/cpu_kernel.h"

#include <map>
#include <mutex>

#include <omp.h>

#include <algorithm>

#include "kernels/render_c.h"

namespace terrace::jit {

namespace {

// Every kernel is rendered under this one symbol, so kernels that compute the same thing over the
// same shapes (a transformer's twelve identical layers) have the same source and share one
// compiled copy while any of them lives.
constexpr const char* kSymbol = "terrace_kernel";

struct SharedCode {
  std::mutex mu;
  std::map<std::pair<const CpuJit*, std::string>, std::weak_ptr<CompiledCode>> by_source;
};

// Never destroyed: a compile the session abandoned may still use it while the process exits.
SharedCode& shared_code() {
  static SharedCode* s = new SharedCode;
  return *s;
}

}  // namespace

CpuKernel compile_cpu_kernel(const kernels::LoweredFunc& f, CpuJit& jit, const CodeCache* cache) {
  kernels::LoweredFunc named = f;
  named.name = kSymbol;
  CpuKernel k;
  k.source = kernels::render_c(named, kernels::Dialect::Cpp);
  k.parallel_extent = f.parallel_extent;
  k.work_per_iteration = f.work_per_iteration;
  SharedCode& shared = shared_code();
  auto key = std::make_pair(static_cast<const CpuJit*>(&jit), k.source);
  {
    std::lock_guard<std::mutex> lock(shared.mu);
    auto it = shared.by_source.find(key);
    if (it != shared.by_source.end()) k.code = it->second.lock();
  }
  if (!k.code) {
    // Two threads may compile the same source at once; both results work, the later is kept.
    k.code = jit.compile(f.name, k.source, {kSymbol}, cache);
    std::lock_guard<std::mutex> lock(shared.mu);
    std::erase_if(shared.by_source, [](const auto& entry) { return entry.second.expired(); });
    shared.by_source[key] = k.code;
  }
  k.fn = k.code->kernel(kSymbol);
  return k;
}

void run_cpu_kernel(const CpuKernel& kernel, std::span<void* const> buffers) {
  run_cpu_kernel(kernel, buffers, kernel.parallel_extent, kernel.work_per_iteration);
}

void run_cpu_kernel(const CpuKernel& kernel, std::span<void* const> buffers, int64_t extent,
                    int64_t work_per_iteration) {
  TERRACE_CHECK(kernel.fn, InvalidArgument, "run_cpu_kernel: kernel not compiled");
  void** args = const_cast<void**>(buffers.data());
  const int64_t n = extent;
  const int64_t grain = std::max<int64_t>(1, kMinElementsPerTask / std::max<int64_t>(1, work_per_iteration));
  if (n <= grain) {
    if (n > 0) kernel.fn(args, 0, n);
    return;
  }
  // OpenMP, the pool oneDNN's primitives run on, and always its whole team (jit/cpu/dnnl_ops.cpp's
  // threads_for: a team of another size re-docks libgomp's workers, which cost more than the
  // split saved). Pieces of at least a quarter of the grain, a few per thread, taken in turn (a
  // preempted thread's share goes to the others); threads without a piece wait at the join.
  const int threads = omp_get_max_threads();
  if (threads == 1) {  // ThreadTuner put this call on one thread: no parallel region to start
    kernel.fn(args, 0, n);
    return;
  }
  const int64_t pieces = std::min<int64_t>((4 * n + grain - 1) / grain, 4 * int64_t(threads));
  const int64_t step = (n + pieces - 1) / pieces;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t p = 0; p < pieces; ++p) {
    const int64_t begin = p * step, end = std::min(n, begin + step);
    if (begin < end) kernel.fn(args, begin, end);
  }
}

}  // namespace terrace::jit
