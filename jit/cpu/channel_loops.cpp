// Terrace's own loops over channel-blocked layouts (jit/cpu/channel_loops.h).
#include "jit/cpu/channel_loops.h"

#include <algorithm>
#include <cstring>

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

std::optional<ChannelRuns> ChannelRuns::of(const memory::desc& md) {
  const dnnl_memory_desc_t& d = md.data;
  if (d.format_kind != dnnl_blocked || d.ndims != 4 || d.offset0 != 0 || d.padded_dims[1] != d.dims[1])
    return std::nullopt;  // padding channels: a range's floats are not one run
  const dnnl_blocking_desc_t& b = d.format_desc.blocking;
  const int64_t c = d.dims[1], h = d.dims[2], w = d.dims[3];
  const dnnl_dims_t& s = b.strides;
  ChannelRuns l;
  if (b.inner_nblks == 0 && s[1] == 1 && s[3] == c && s[2] == c * w && s[0] == c * h * w) {  // nhwc
    l.tag = memory::format_tag::acdb;
    l.unit = 1;
    l.runs = h * w;
    return l;
  }
  if (b.inner_nblks > 1 || (b.inner_nblks == 1 && (b.inner_idxs[0] != 1 || (b.inner_blks[0] != 8 && b.inner_blks[0] != 16))))
    return std::nullopt;
  l.block = b.inner_nblks == 1 ? b.inner_blks[0] : 1;
  if (c % l.block != 0 || s[3] != l.block || s[2] != l.block * w || s[1] != s[2] * h || s[0] != s[1] * (c / l.block))
    return std::nullopt;
  l.tag = l.block == 16 ? memory::format_tag::aBcd16b : l.block == 8 ? memory::format_tag::aBcd8b : memory::format_tag::abcd;
  l.unit = h * w;
  l.runs = 1;
  return l;
}

memory::desc ChannelRuns::desc(const memory::dims& dims, memory::format_tag tag) {
  return memory::desc(dims, memory::data_type::f32, tag);
}

std::string ChannelRuns::name() const {
  return tag == memory::format_tag::acdb ? "nhwc" : block == 1 ? "nchw" : "nChw" + std::to_string(block) + "c";
}

void copy_runs(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t rows, int64_t len,
               int threads) {
  // Pieces of at least 16 KiB: below that a thread's start costs more than its copy.
  const int64_t pieces = std::max<int64_t>(1, std::min<int64_t>(threads, len / 4096));
  const int64_t items = rows * pieces;
#pragma omp parallel for num_threads(threads) if (threads > 1 && items > 1) schedule(static)
  for (int64_t i = 0; i < items; ++i) {
    const int64_t r = i / pieces, p = i % pieces;
    const int64_t begin = len * p / pieces, end = len * (p + 1) / pieces;
    std::memcpy(dst + r * dst_stride + begin, src + r * src_stride + begin, size_t(end - begin) * sizeof(float));
  }
}

void add_into(float* y, const float* a, int64_t n, int threads) {
#pragma omp parallel for simd num_threads(threads) if (threads > 1) schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] += a[i];
}

}  // namespace terrace::jit::dnnl_detail
