// CpuKernel: a lowered kernel compiled by the CPU JIT, and its parallel runner (OpenMP).
#pragma once
#include <memory>
#include <span>

#include "jit/cpu_jit.h"
#include "kernels/ir.h"

namespace terrace::jit {

struct CpuKernel {
  std::shared_ptr<CompiledCode> code;  // keeps the machine code loaded
  CpuKernelFn fn = nullptr;
  int64_t parallel_extent = 0;         // the range [0, n) the runner splits
  int64_t work_per_iteration = 1;      // elements per iteration of that range
  std::string source;                  // the rendered C++ (for dumps and repros)

  double compile_ms() const { return code ? code->timings().total_ms() : 0; }
};

// Renders `f` as C++ and compiles it, or reuses the code of a live kernel with the same source
// (kernels render under one symbol name, so equal kernels of different regions share code).
// Throws CompileFailed (with Clang's diagnostics).
// `cache`: the disk cache to use (nullptr: the JIT's own, CodeCache::default_dir()).
CpuKernel compile_cpu_kernel(const kernels::LoweredFunc& f, CpuJit& jit = CpuJit::global(),
                             const CodeCache* cache = nullptr);

// Runs the kernel on its buffers (in slot order: the group's inputs, then its outputs). The
// range is split across the calling thread's OpenMP threads (the pool oneDNN runs on) in pieces
// of at least kMinElementsPerTask elements, at most one thread per piece, so small tensors run on
// the calling thread. Every output element is written by exactly one piece, so the result does
// not depend on the thread count.
// 256 K elements (a few hundred microseconds of a fused kernel's work): a fork and join costs
// microseconds on an idle machine but milliseconds where a worker is preempted, and splitting a
// 100-microsecond kernel saves at most half of it. Measured on this 2-core machine under other
// builds (terrace bench --profile, BERT, 2 threads): its Add+Add+LayerNormalization regions took
// 32.7 ms a call with 32 K-element pieces against 3.3 ms with 256 K (1.1 ms on one thread); on
// the 16-core host MobileNetV2 was slower than on 2 cores from over-splitting small ops.
inline constexpr int64_t kMinElementsPerTask = 1 << 18;
void run_cpu_kernel(const CpuKernel& kernel, std::span<void* const> buffers);

}  // namespace terrace::jit
