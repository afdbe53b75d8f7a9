// Tier 2's code for a region without a GPU: the CUDA C program the GPU backend compiles (for
// tests, and for filling the cache ahead of time). The backend itself: make_gpu_backend (backend.h).
#pragma once
#include <string>
#include <vector>

#include "interp/graph.h"
#include "tiers/partition.h"

namespace terrace {

struct GpuRegionCode {
  std::string source;                 // one translation unit: the prelude once, then every kernel
  std::vector<std::string> kernels;   // the __global__ functions, in launch order
};

// The region's CUDA C for inputs of these dtypes and shapes. Throws Error(CompileFailed) naming
// the node where the region holds an op tier 2 does not compile, Error(NotImplemented) in a build
// without TERRACE_WITH_CUDA.
GpuRegionCode render_gpu_region(const Graph& graph, const Region& region, const std::vector<Tensor>& inputs);

}  // namespace terrace
