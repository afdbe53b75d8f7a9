// Tier 2: its backend (registered in tiers/ladder.cpp), its fusion rule, and its code for a region
// without a GPU: the CUDA C program the backend compiles (for tests, and for filling the cache
// ahead of time).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "interp/graph.h"
#include "tiers/backend.h"
#include "tiers/partition.h"

namespace terrace {
namespace jit {
class CodeCache;
}

struct GpuRegionCode {
  std::string source;                 // one translation unit: the prelude once, then every kernel
  std::vector<std::string> kernels;   // the __global__ functions, in launch order
};

// The region's CUDA C for inputs of these dtypes and shapes. Throws Error(CompileFailed) naming
// the node where the region holds an op tier 2 does not compile, Error(NotImplemented) in a build
// without TERRACE_WITH_CUDA.
GpuRegionCode render_gpu_region(const Graph& graph, const Region& region, const std::vector<Tensor>& inputs);

// Tier 2's Backend::fuses: false for what tier 1 fuses after a library op `last` and tier 2 does
// not: the activations Sigmoid, Tanh, LeakyRelu, Elu, HardSwish and Gelu (tier 2's cuBLASLt and
// cuDNN epilogues take Relu and Clip), a MatMul's bias Add, and a pool in a convolution chain; such
// a node becomes a region of its own rather than keep its product or convolution off the GPU.
// Defined in every build: Options::plan_for partitions with it where there is no GPU.
bool gpu_fuses(const Node& last, const Node& next);

// Tier 2's Backend::configure_passes: attention blocks fused into one Attention (float32, head
// sizes its kernel takes: tiers/gpu/gpu_attention.h). Defined in every build, as gpu_fuses.
void gpu_configure_passes(passes::PassConfig& config);

// The tier-2 backend: fused CUDA kernels through NVRTC on device 0; its cubins in the disk cache
// (`cache_dir`, Options::cache_dir). nullptr, with the reason in `why`, where there is no GPU, no
// driver or no NVRTC, or in a build without TERRACE_WITH_CUDA. `time_gemms`: each product's
// cuBLASLt candidates are timed (jit/cuda/cublaslt_ops.h) rather than the heuristic's first taken.
std::unique_ptr<Backend> make_gpu_backend(const std::string& cache_dir = "", std::string* why = nullptr,
                                          bool time_gemms = false);

// The cubin of a tier-2 program (`program` names it in NVRTC's messages) for `arch`: from `cache`,
// or NVRTC's, then stored. Its key holds everything the cubin depends on: the source, the arch,
// the options and NVRTC's version; not the driver's, since NVRTC alone makes it, which lets
// `terrace compile` fill the cache on a machine without a GPU. `cached`, if given, says which.
// Throws like jit::nvrtc_compile.
std::vector<char> compile_gpu_cubin(const std::string& source, const std::string& arch, const std::string& program,
                                    const jit::CodeCache& cache, bool* cached = nullptr);

}  // namespace terrace
