// What jit/'s oneDNN files (dnnl_ops, dnnl_deconv, dnnl_rnn) share: one CPU engine, plain
// row-major float32 memory over Terrace's buffers, the thread count for a primitive's size, and
// primitive attributes without a library-managed scratchpad. Defined in dnnl_ops.cpp.
#pragma once
#include <oneapi/dnnl/dnnl.hpp>

namespace terrace::jit {

dnnl::engine& cpu_engine();
// A row-major float32 descriptor of `dims`.
dnnl::memory::desc plain(const dnnl::memory::dims& dims);
// oneDNN memory over `data` (not copied; the caller keeps it alive).
dnnl::memory wrap(const dnnl::memory::desc& d, const float* data);
// The OpenMP threads a primitive of `flops` multiply-adds runs on: one per 200 thousand (about
// 10 us of work), up to the machine's.
int threads_for(double flops);
// Primitives keep no scratchpad of their own (oneDNN's library-managed one belongs to the thread
// that created the primitive, and tier 1 creates on a compile thread and runs on callers'): each
// call brings one, sized by the primitive descriptor.
dnnl::primitive_attr user_scratchpad();

}  // namespace terrace::jit
