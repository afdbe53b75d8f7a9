// CpuKernel: a lowered kernel compiled by the CPU JIT, and its parallel runner (OpenMP).
#pragma once
#include <memory>
#include <span>

#include "jit/cpu/cpu_jit.h"
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

// Runs the kernel on its buffers (in slot order: the group's inputs, then its outputs). A range
// of at most kMinElementsPerTask elements runs on the calling thread; a longer one on the calling
// thread's whole OpenMP team (the pool oneDNN runs on), in pieces taken in turn. Every output
// element is written by exactly one piece, so the result does not depend on the thread count.
// 32 K elements: tens of microseconds of a fused kernel's work on one core, against a few for a
// fork and join of a team whose workers still spin from the last one. (It was 256 K while teams
// changed size from kernel to kernel, which made every fork cost more: jit/cpu/dnnl_ops.cpp's
// threads_for. On the GPU host's 16 cores BERT's softmax, layernorm and transposes, 98-295 K
// elements, then ran on one core each.)
inline constexpr int64_t kMinElementsPerTask = 1 << 15;
void run_cpu_kernel(const CpuKernel& kernel, std::span<void* const> buffers);
// The same over [0, extent) with `work_per_iteration`: a kernel whose range depends on a symbolic
// dim (tiers/symbolic_lowering.h) gets it per call.
void run_cpu_kernel(const CpuKernel& kernel, std::span<void* const> buffers, int64_t extent,
                    int64_t work_per_iteration);

}  // namespace terrace::jit
