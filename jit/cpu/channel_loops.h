// Terrace's own loops over oneDNN's layouts (NCHW, NHWC, nChw8c, nChw16c) for a convolution
// chain's steps that oneDNN has no fast primitive for on every CPU: a per-channel scale, the
// copies of a chained Concat or Split, a residual Add. Used by jit/cpu/dnnl_conv.cpp only.
#pragma once
#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>
#include <optional>
#include <string>

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

// A dense layout in which the channels [c0, c1) of a tensor are runs of (c1 - c0) * unit floats
// at c0 * unit in each run of C * unit, `runs` runs an image, where c0 and c1 are multiples of
// `block`: plain NCHW and nChw8c/nChw16c (one run an image, unit H * W), NHWC (one run a pixel,
// unit 1). A channel Concat or Split is then a copy of runs, on any CPU.
struct ChannelRuns {
  dnnl::memory::format_tag tag = dnnl::memory::format_tag::abcd;
  int64_t block = 1, unit = 0, runs = 0;
  // nullopt where `d` is no such layout (padded channels, other blocks, strides).
  static std::optional<ChannelRuns> of(const dnnl::memory::desc& d);
  // The descriptor of 4-D `dims` in the layout `tag` names (abcd, acdb, aBcd8b, aBcd16b).
  static dnnl::memory::desc desc(const dnnl::memory::dims& dims, dnnl::memory::format_tag tag);
  // "nchw", "nhwc", "nChw8c", "nChw16c".
  std::string name() const;
};

// Copies `rows` runs of `len` floats, from src + r * src_stride to dst + r * dst_stride, on
// `threads` OpenMP threads (each run cut into pieces so that one image's runs use them all).
void copy_runs(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t rows, int64_t len,
               int threads);

// y += a over n floats, on `threads` OpenMP threads: a residual Add that oneDNN's kernel below
// AVX-512 cannot take as a post-op after an activation (both in one layout, padding zero).
void add_into(float* y, const float* a, int64_t n, int threads);

}  // namespace terrace::jit::dnnl_detail
