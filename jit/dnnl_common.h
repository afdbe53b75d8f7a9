// What jit/'s oneDNN files (dnnl_ops, dnnl_deconv, dnnl_rnn) share: one CPU engine, plain
// row-major float32 memory over Terrace's buffers, the thread count for a primitive's size, and
// primitive attributes without a library-managed scratchpad, and building under a thread count.
// Defined in dnnl_ops.cpp but for the template.
#pragma once
#include <oneapi/dnnl/dnnl.hpp>

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
inline constexpr double kSerialWork = 2e5;
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

}  // namespace terrace::jit
