// Terrace's own loops over channel-blocked layouts (jit/cpu/channel_loops.h).
#include "jit/cpu/channel_loops.h"

namespace terrace::jit::dnnl_detail {

using dnnl::memory;

std::optional<ChannelScaleLoop> ChannelScaleLoop::of(const memory::desc& x, int64_t scale_batch) {
  const dnnl_memory_desc_t& d = x.data;
  if (d.format_kind != dnnl_blocked || d.ndims < 3) return std::nullopt;
  const dnnl_blocking_desc_t& b = d.format_desc.blocking;
  if (b.inner_nblks > 1 || (b.inner_nblks == 1 && b.inner_idxs[0] != 1)) return std::nullopt;
  ChannelScaleLoop l;
  l.block_ = b.inner_nblks == 1 ? b.inner_blks[0] : 1;
  l.n_ = d.dims[0];
  l.c_ = d.dims[1];
  l.blocks_ = d.padded_dims[1] / l.block_;
  l.batch_stride_ = b.strides[0];
  l.block_stride_ = b.strides[1];
  l.pixel_stride_ = b.strides[d.ndims - 1];
  l.pixels_ = 1;
  for (int i = 2; i < d.ndims; ++i) {
    l.pixels_ *= d.padded_dims[i];
    if (i + 1 < d.ndims && b.strides[i] != b.strides[i + 1] * d.padded_dims[i + 1]) return std::nullopt;
  }
  l.scale_batch_ = scale_batch;
  return l;
}

void ChannelScaleLoop::run(const float* x, const float* s, float* y, int threads) const {
  const int64_t items = n_ * blocks_ * pixels_;
  const bool channels_inner = block_stride_ < pixel_stride_;  // nhwc: go pixel by pixel
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
  for (int64_t i = 0; i < items; ++i) {
    const int64_t n = i / (blocks_ * pixels_), r = i % (blocks_ * pixels_);
    const int64_t cb = channels_inner ? r % blocks_ : r / pixels_, p = channels_inner ? r / blocks_ : r % pixels_;
    const int64_t at = n * batch_stride_ + cb * block_stride_ + p * pixel_stride_;
    const float* sc = s + (scale_batch_ == 1 ? 0 : n) * c_;
    for (int64_t j = 0; j < block_; ++j) {
      const int64_t ch = cb * block_ + j;
      y[at + j] = ch < c_ ? x[at + j] * sc[ch] : 0.0f;
    }
  }
}

}  // namespace terrace::jit::dnnl_detail
