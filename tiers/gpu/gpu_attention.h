// Tier 2's attention regions: one ONNX Attention node (the graph passes' fused block, softmax(Q K^T
// * scale + mask) V; tiers/passes/attention.cpp) run by one fixed CUDA kernel in float32, flash-
// attention style: each warp owns a query row, K and V pass through shared memory a tile of 32 keys
// at a time, and the softmax is taken online (a running max and sum), so the scores never reach
// memory. The interpreter's semantics: an additive float mask or a boolean one (true: attend), both
// broadcast; is_causal; a row with every key masked is NaN. The kernel is compiled by NVRTC once per
// arch into the disk cache.
#pragma once
#include <cstdint>
#include <string>

#include "interp/graph.h"
#include "tiers/partition.h"

namespace terrace {

// Head sizes (of Q and K, and of V) up to this fit the kernel's shared tiles.
inline constexpr int64_t kGpuAttentionMaxHead = 128;

// "" when tier 2 runs this Attention node, else why not: 4-D float32 Q, K and V, no past key or
// value, no extra outputs, no softcap, head sizes up to kGpuAttentionMaxHead.
std::string gpu_attention_can_compile(const Graph& g, const Node& node);

// True for a region that is one Attention node (partition keeps it alone: tier 1 does not compile it).
bool is_gpu_attention_region(const Graph& g, const Region& region);

// The CUDA C program for Q/K head size `head` and V's `value_head` (compile-time there, so that its
// loops unroll), and its kernel's name; needs no GPU (tests, `terrace compile`).
std::string gpu_attention_kernel_source(int64_t head, int64_t value_head);
inline constexpr const char* kGpuAttentionKernel = "terrace_attention";

}  // namespace terrace

#ifdef TERRACE_HAVE_CUDA
#include "tiers/gpu/gpu_program.h"

namespace terrace {
namespace jit {
class CodeCache;
}

// The region's program for inputs of these shapes; with `cache` (and `arch`), its library step
// launches the compiled kernel, without one it only plans (no NVRTC, no GPU). Throws
// Error(CompileFailed) naming the node for what gpu_attention_can_compile refuses.
GpuProgram build_gpu_attention_program(const Graph& g, const Region& region, const std::vector<Tensor>& inputs,
                                       const jit::CodeCache* cache, const std::string& arch);

}  // namespace terrace
#endif
