// Tier 2 takes a whole call plan (Backend::take_plan) as one CUDA graph: every region's launches,
// library calls and copies captured in order on a private stream, over memory the graph owns
// (static input buffers, one scratch arena that the regions' planned intermediates share since they
// run one after another, and the values between regions in a pool that reuses a buffer once its
// value is dead). A call copies its inputs in, launches the graph once and copies the outputs out
// (GPU-NOTES.md: 1.3 us a kernel replayed against 4 us launched, and no host work per region).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "interp/tensor.h"
#include "jit/cuda/cuda_driver.h"
#include "tiers/backend.h"

namespace terrace {

class GraphMemory;  // gpu_graph.cpp

// What a region writes into while it is captured.
struct GraphCapture {
  const jit::cuda::Stream& stream;  // the capturing stream: every launch and copy goes here
  std::shared_ptr<GraphMemory> memory;
  CUdeviceptr scratch = 0;  // the regions' planned intermediates (at least each one's arena_bytes)
  // Run-time checks' error words, read after each replay.
  struct Check {
    CUdeviceptr word;
    std::string node, message;
  };
  std::vector<Check> checks;
  std::vector<Tensor> held;  // device tensors the graph reads that it does not own (resident constants)

  // A device tensor in the graph's memory: its buffer comes back to the graph's pool, never to
  // anyone else, when the last tensor over it goes.
  Tensor tensor(DType dtype, const Shape& shape);
  // A run-time check's error word at `word` (in a region's arena, which the next region reuses):
  // copied to a word of the graph's own right after the region, and read from there.
  void check(CUdeviceptr word, std::string node, std::string message);
};

// A compiled region that can be captured (tier 2's GpuRegion).
class CapturableRegion {
 public:
  virtual ~CapturableRegion() = default;
  // Enqueues the region's work on cx.stream for `inputs` (device tensors in the graph's memory, or
  // the host initializers the region keeps resident); returns its outputs, in the graph's memory.
  // Throws where the region cannot be captured.
  virtual std::vector<Tensor> capture(const std::vector<Tensor>& inputs, GraphCapture& cx) = 0;
  virtual size_t arena_bytes() const = 0;
};

// Captures `plan` (every step's code a CapturableRegion) as one CUDA graph replayed on `stream`;
// null with the reason in `why` where it cannot.
std::unique_ptr<TakenPlan> capture_whole_plan(const WholePlan& plan, const std::shared_ptr<jit::cuda::Stream>& stream,
                                              std::string& why);

}  // namespace terrace
