// Tier 1's 3x3 convolution of stride 1 by Winograd's minimal filtering F(2x2, 3x3) for AVX2/FMA
// CPUs, in oneDNN's nChw8c layout (as DirectConv, jit/direct_conv.h): each 4x4 patch of the input
// and each 3x3 filter are transformed, the 16 positions of the transformed domain are 16 products
// (tiles x input channels by input channels x output channels, on PackedWeights), and each 4x4 of
// products becomes a 2x2 of outputs. 16 multiplies per 4 outputs and input channel against 36: 2.25x
// fewer. The transforms add and subtract (factors 1 and 1/2, exact in binary), so the error stays
// that of the sums (bench/RESULTS.md, seventeenth session, has the measured error against the
// interpreter's double sums).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "jit/packed_gemm.h"

namespace terrace::jit {

class WinogradConv {
 public:
  struct Geometry {
    int64_t n = 1, cin = 0, cout = 0, h = 0, w = 0;  // input and output are h x w (stride 1, pads 1)
  };
  // Whether this class computes it: channels in whole blocks of 8, an image of at least 2x2, and
  // enough 2x2 tiles for each of `threads` (each thread transforms and multiplies its own tiles,
  // reading all of the transformed weights).
  static bool fits(const Geometry& g, int threads);

  // `w`: [cout, cin, 3, 3] row-major (transformed and copied); `relu`: as DirectConv's.
  WinogradConv(const Geometry& g, const float* w, bool relu);

  // dst = conv(src) + bias in nChw8c (src [n][cin/8][h][w][8], dst [n][cout/8][h][w][8]); `bias`:
  // cout values or null; `threads` as PackedWeights::multiply. Needs packed_gemm_supported().
  void run(const float* src, const float* bias, float* dst, int threads) const;

  size_t bytes() const;

 private:
  Geometry g_;
  bool relu_ = false;
  std::vector<std::unique_ptr<PackedWeights>> u_;  // per position of the 4x4: [cin, cout]
};

}  // namespace terrace::jit
