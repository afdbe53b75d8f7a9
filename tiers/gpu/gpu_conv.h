// Tier 2's convolution and pooling regions: the regions tier 1 forms around a Conv (a chain of
// convolutions with the Relu/Clip activations and residual Adds after them, tiers/cpu/cpu_library.h)
// or a MaxPool/AveragePool, as a GpuProgram of library steps. Each Conv is one cuDNN convolution
// (jit/cuda/cudnn_ops.h: fp32 FMA math, no TF32) followed, where it has a bias, a residual or an
// activation, by one epilogue kernel y = act(y + bias + z); pads that differ at the two ends of a
// dim get a zero-padded copy of the input first (cuDNN's pads are symmetric). Pools are a kernel
// of their own with the interpreter's semantics (ceil_mode, count_include_pad, dilations,
// asymmetric pads, NaN propagating through max). These kernels are one fixed CUDA C program,
// compiled by NVRTC once per arch into the disk cache. GlobalAveragePool is not here: tier 2
// renders it from the kernel IR, as tier 1 does.
#pragma once
#ifdef TERRACE_HAVE_CUDA
#include <string>
#include <vector>

#include "interp/graph.h"
#include "tiers/gpu/gpu_program.h"
#include "tiers/partition.h"

namespace terrace {
namespace jit {
class CodeCache;
}

// True for a region that build_gpu_conv_program takes: its first op is a Conv, a MaxPool or an
// AveragePool.
bool is_gpu_conv_region(const Graph& g, const Region& region);

// "" when tier 2 runs `node` (a Conv, MaxPool or AveragePool) here, else why not (a Conv needs
// cuDNN: cudnn_available's reason).
std::string gpu_conv_can_compile(const Graph& g, const Node& node);

// The fixed CUDA C program of the epilogue, padding and pooling kernels, and their names. It
// needs no GPU and no cuDNN: `terrace compile --tier gpu` puts its cubin into the cache for a conv
// or pool region (render_gpu_region).
const std::string& gpu_conv_kernels_source();
std::vector<std::string> gpu_conv_kernel_names();

// The pooling kernel's parameter block for a MaxPool or AveragePool over input shape `x` (23
// int64s: in, out, kernel, stride, dilation, pad_begin, pad_end, 3 each, right-aligned; planes;
// mode), as build_gpu_conv_program passes it, and the output's shape. For tests of the kernel
// on the host. Throws Error(CompileFailed) for attributes it does not take.
std::vector<int64_t> gpu_pool_params(const Node& node, const Shape& x, Shape* y);

// The same program without its library objects or kernels (steps named, no library calls, no
// cuDNN planning): needs no GPU and no cuDNN; throws what build_gpu_conv_program throws for the
// region's ops, attributes and shapes. For `terrace compile` and tests.
GpuProgram plan_gpu_conv_program(const Graph& g, const Region& region, const std::vector<Tensor>& inputs);

// The region's program for inputs of these dtypes and shapes: slots are the region's inputs, its
// outputs, then intermediates; steps are library calls (GpuKernel::library). The kernels' cubin
// for `arch` comes from `cache` or NVRTC. Throws Error(CompileFailed) naming the node for any op,
// attribute or shape it does not run (the region then keeps its tier-1 version).
GpuProgram build_gpu_conv_program(const Graph& g, const Region& region, const std::vector<Tensor>& inputs,
                                  const jit::CodeCache& cache, const std::string& arch);

}  // namespace terrace
#endif
