// Terrace's own loops over oneDNN's layouts (NCHW, NHWC, nChw8c, nChw16c) for a convolution
// chain's steps that oneDNN has no fast primitive for on every CPU: a per-channel scale. Used by
// jit/cpu/dnnl_conv.cpp only.
#pragma once
#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>
#include <optional>

namespace terrace::jit::dnnl_detail {

// x times one value per channel, on a layout of dense spatial dims and at most one inner block
// of channels (plain, nhwc, nChw8c, nChw16c), for where oneDNN's binary is its reference code
// (below AVX2), which is orders of magnitude slower. Padding channels stay zero.
class ChannelScaleLoop {
 public:
  // nullopt where `x`'s layout is not of that form.
  static std::optional<ChannelScaleLoop> of(const dnnl::memory::desc& x, int64_t scale_batch);
  // y = x * s, s plain [scale_batch, C]; x and y in the layout `of` took.
  void run(const float* x, const float* s, float* y, int threads) const;

 private:
  int64_t n_ = 0, c_ = 0, blocks_ = 0, block_ = 1, pixels_ = 1, scale_batch_ = 1;
  int64_t batch_stride_ = 0, block_stride_ = 0, pixel_stride_ = 0;
};

}  // namespace terrace::jit::dnnl_detail
