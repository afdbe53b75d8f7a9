// What jit/cpu/dnnl_ops.cpp (products) and jit/cpu/dnnl_conv.cpp (convolution chains, pools) share
// beyond dnnl_common.h: the activations' host semantics, a thread's stream and scratch, names for
// descriptions, and a primitive built with and without its fused activation. Not for other files.
#pragma once
#include <oneapi/dnnl/dnnl.hpp>

#include <memory>
#include <vector>
#include <string>

#include "interp/graph.h"
#include "jit/cpu/dnnl_activation.h"
#include "jit/cpu/dnnl_common.h"
#include "jit/cpu/dnnl_ops.h"

namespace terrace::jit::dnnl_detail {

// True when oneDNN picked its reference implementation ("ref:any"; "simple:" is its reference for
// reorders), which runs compute one element at a time: tens of times slower than its JIT kernels.
inline bool is_reference(const dnnl::primitive_desc_base& pd) {
  const std::string impl = pd.impl_info_str();
  return impl.rfind("ref", 0) == 0;
}

using dnnl::memory;

// A stream and a scratchpad buffer per calling thread (calls may come from several threads at
// once), kept across calls: creating both each time was a visible part of a small product's call.
dnnl::stream& thread_stream();
void* thread_scratch(size_t bytes);
void append_activation(dnnl::post_ops& ops, const DnnlActivation& a);
// The interpreter's Relu and Clip (NaN stays), and the other activations' host forms.
float activate(const DnnlActivation& a, float x);
void apply_activation(const DnnlActivation& a, float* p, size_t n);
std::string dims_str(const memory::dims& d);
std::string dims_str(const memory::desc& d);
std::string activation_name(const DnnlActivation& a);
std::string activation_text(const DnnlActivation& a);  // "; post-op relu (...)", or ""
// The number of floats a plain memory descriptor spans.
size_t floats_of(const memory::desc& d);
bool has_zero_dim(const Shape& s);
// True for a layout with blocks (oneDNN's packed weights, nChw16c), false for plain strides.
bool is_blocked(const memory::desc& d);
// A MaxPool or AveragePool alone on plain NCHW buffers (dnnl_pool.cpp).
std::unique_ptr<DnnlPrimitive> make_pool(const Node& node, const Shape& x);

// What oneDNN's pooling primitive takes for `node` on x: the window per spatial dim, with the end
// padding that gives the interpreter's output size by floor division (see Pool, dnnl_pool.cpp), refusing
// the forms oneDNN cannot match.
struct PoolSpec {
  memory::dims strides, kernel, dilation, pad_l, pad_r;
  double taps = 1;
  dnnl::algorithm alg = dnnl::algorithm::pooling_max;
  bool include_pad = false;
};
PoolSpec pool_spec(const Node& node, const Shape& x);
// The pool's output shape on x (the interpreter's rules, interp/ops/nn_pool.cpp).
Shape pool_out_shape(const Node& node, const Shape& x);

// A product or convolution as run: built with its activation as a post-op (`fused`) and, when it
// has one, also without (`plain`, the activation then applied after it with the interpreter's
// semantics), for calls whose inputs are not all finite.
struct Activated {
  DnnlActivation activation;
  int threads = 1;
  dnnl::primitive fused, plain;
  memory::desc fused_scratch, plain_scratch;

  bool has_activation() const { return activation.kind != DnnlActivation::Kind::None; }
  // `inputs_finite` is asked only when there is an activation (it reads every input).
  template <typename Finite>
  void run(BoundArgs& args, Finite&& inputs_finite, float* out, size_t n) const {
    const bool use_fused = !has_activation() || inputs_finite();
    args.execute(use_fused ? fused : plain, use_fused ? fused_scratch : plain_scratch, threads);
    if (!use_fused) apply_activation(activation, out, n);
  }
};

}  // namespace terrace::jit::dnnl_detail
