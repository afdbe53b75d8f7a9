// What jit/'s oneDNN files (dnnl_ops, dnnl_deconv, dnnl_rnn) share: one CPU engine, plain
// row-major float32 memory over Terrace's buffers, the thread count for a primitive's size,
// primitive attributes without a library-managed scratchpad, building under a thread count,
// running with bound arguments, the finiteness check of fused activations, per-thread buffers.
// Defined in dnnl_ops.cpp but for the template.
#pragma once
#include <oneapi/dnnl/dnnl.hpp>

#include <unordered_map>
#include <vector>

#include "interp/error.h"
#include "interp/graph.h"
#include "interp/omp_threads.h"

namespace terrace::jit {

dnnl::engine& cpu_engine();
// A row-major float32 descriptor of `dims`.
dnnl::memory::desc plain(const dnnl::memory::dims& dims);
// oneDNN memory over `data` (not copied; the caller keeps it alive).
dnnl::memory wrap(const dnnl::memory::desc& d, const float* data);
// The OpenMP threads a primitive of `flops` multiply-adds runs on: 1 below kSerialWork, else the
// calling thread's whole OpenMP setting (never a team of another size: dnnl_ops.cpp says why).
// 1e5: a batch-1 layer of ~1e5 multiply-adds is already faster on two threads than on one
// (bench/RESULTS.md).
inline constexpr double kSerialWork = 1e5;
int threads_for(double flops);
// Primitives keep no scratchpad of their own (oneDNN's library-managed one belongs to the thread
// that created the primitive, and tier 1 creates on a compile thread and runs on callers'): each
// call brings one, sized by the primitive descriptor.
dnnl::primitive_attr user_scratchpad();

// Runs f, which builds oneDNN objects, with `threads` OpenMP threads: oneDNN sizes a primitive's
// scratchpad by the count at creation, and each run uses the same count (a call with more, e.g.
// under a caller's own OpenMP setting, would write past it). oneDNN's errors become CompileFailed
// naming the node and `what` ("primitive", "deconvolution").
template <typename F>
auto building(const Node& node, int threads, const char* what, F&& f) {
  ScopedOmpThreads scope(threads);
  try {
    return f();
  } catch (const dnnl::error& e) {
    fail(ErrorCode::CompileFailed, node.describe(), ": oneDNN builds no ", what, ": ", e.what());
  }
}

// A primitive's arguments as oneDNN memory objects made on first use and pointed at each call's
// buffers afterwards: creating one took 270 ns and re-pointing it 11 ns (oneDNN 2.6, the 2-core
// machine), and with the argument map that was a tenth of a batch-1 Linear layer's call. Used by
// one call at a time (its owner's try_lock); an argument keeps the descriptor it was first bound
// with, but for the scratchpad, whose size may differ between an owner's primitives.
class BoundArgs {
 public:
  void bind(int arg, const dnnl::memory::desc& d, const void* data);
  void bind(int arg, const dnnl::memory& m);  // a memory object made by the caller
  // Runs p on the bound arguments and this thread's scratchpad with `threads` OpenMP threads
  // (threads_to_run), and gives the caller back its own setting.
  void execute(const dnnl::primitive& p, const dnnl::memory::desc& scratch, int threads);

 private:
  std::vector<int> ids_;
  std::vector<dnnl::memory> mems_;
  dnnl::memory scratch_;
  size_t scratch_bytes_ = 0;
  std::vector<dnnl_exec_arg_t> raw_;
};

// Runs p once on `args`, memory objects the caller made (BoundArgs::execute).
void execute(const dnnl::primitive& p, const dnnl::memory::desc& scratch,
             const std::unordered_map<int, dnnl::memory>& args, int threads);

// oneDNN's Relu (and Clip) post-op is the interpreter's Relu on finite values only, and what it
// does with infinities and NaN depends on the implementation oneDNN picks for the shape and the
// CPU: measured with oneDNN 2.6 on AVX-512, a small convolution's reference path turns -inf into
// NaN (0 * -inf), while the JIT paths of a 3x3 or 1x1 convolution and of MatMul turn NaN into 0
// (vmaxps). The interpreter gives 0 for -inf and keeps NaN. A non-finite value before the
// activation needs a non-finite input (or an fp32 overflow, which validation judges like any
// rounding difference), so a fused primitive runs only on inputs that are all finite; other calls
// run the same product without the post-op and apply the interpreter's Relu after it.
bool all_finite(const float* p, size_t n, int threads);

// A buffer of the calling thread (a chain's blocked values, a deconvolution's
// packed weights or output, a recurrent layer's gates), at least `bytes` long and 64-byte
// aligned, kept across calls (a fresh allocation of a few MB per call costs its page faults again
// each time). Callers number their slots;
// a primitive uses them only while it runs, so primitives share them.
float* thread_buffer(size_t slot, size_t bytes);

}  // namespace terrace::jit
