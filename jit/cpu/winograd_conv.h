// Tier 1's 3x3 convolution of stride 1 by Winograd's minimal filtering F(2x2, 3x3) for AVX2/FMA
// CPUs, in oneDNN's nChw8c layout (the layout a convolution chain keeps between its steps there):
// each 4x4 patch of the input and each 3x3 filter are transformed, the 16 positions of the
// transformed domain are 16 products (tiles x input channels by input channels x output channels,
// on PackedWeights), and each 4x4 of products becomes a 2x2 of outputs: 16 multiplies per 4 outputs
// and input channel against 36, 2.25x fewer. oneDNN 2.6 has Winograd on AVX-512 only, and neither
// its jit:avx2 direct convolution nor a direct kernel of our own keeps up with ONNX Runtime's 3x3s
// there (bench/RESULTS.md). The transforms add and subtract with factors 1 and 1/2,
// so the error stays that of the float sums over the transformed magnitudes
// (tests/jit/winograd_conv_test.cpp checks it against that bound).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "interp/tensor.h"
#include "jit/cpu/packed_gemm.h"

namespace terrace::jit {

// Whether WinogradConv may take a chain's convolution of these channels on this machine: an
// AVX2/FMA CPU (packed_gemm_supported), TERRACE_WINOGRAD not "0", at least 64 channels in and out,
// in blocks of 8. A chain also needs a 3x3 of stride 1 and pads 1, nChw8c on both sides and enough
// tiles (dnnl_ops.cpp, winograd_for).
bool winograd_enabled(int64_t cin, int64_t cout);

// What F(2x2, 3x3)'s rounding may add to a 3x3 convolution of stride 1 and pads 1 (validation's
// allowance, tiers/cpu/cpu_library.cpp): over magnitudes z (Float64 [N, C, H, W]: |x| plus x's own
// error bound) and weights w (Float32 [K, C, 3, 3]), per output element
//   gamma_{2 (C + 12)} 4 sum_c (sum of |w[k, c]|) (sum of z[c] over the output's tile's 4x4 patch).
// The transformed domain's magnitudes, sum_ij |A| |U| |V|, are at most 4 times those sums (the
// largest of sum_i |At[r, i]| |G[i, a]| |Bt[i, p]| is 2); C + 12 roundings (the C products' sum,
// the input, weight and output transforms, the bias) are counted twice over. Float64 [N, K, H, W].
Tensor winograd_rounding_bound(const Tensor& z, const Tensor& w);

class WinogradConv {
 public:
  struct Geometry {
    int64_t n = 1, cin = 0, cout = 0, h = 0, w = 0;  // input and output are h x w (stride 1, pads 1)
  };
  // Whether this class computes it: channels in whole blocks of 8, an image of at least 2x2, and
  // enough 2x2 tiles for each of `threads` (each thread transforms and multiplies its own tiles,
  // reading all of the transformed weights).
  static bool fits(const Geometry& g, int threads);

  // `w`: [cout, cin, 3, 3] row-major (transformed and copied); `relu`: max(0, x) after the bias
  // (NaN stays NaN, as the interpreter's Relu).
  WinogradConv(const Geometry& g, const float* w, bool relu);

  // dst = conv(src) + bias in nChw8c (src [n][cin/8][h][w][8], dst [n][cout/8][h][w][8]); `bias`:
  // cout values or null; `threads` as PackedWeights::multiply; `slot`: the thread_buffer
  // (jit/cpu/dnnl_common.h) each thread keeps its blocks in, one the caller leaves free. Needs
  // packed_gemm_supported().
  void run(const float* src, const float* bias, float* dst, int threads, size_t slot) const;

  size_t bytes() const;

 private:
  Geometry g_;
  bool relu_ = false;
  std::vector<std::unique_ptr<PackedWeights>> u_;  // per position of the 4x4: [cin, cout]
};

}  // namespace terrace::jit
