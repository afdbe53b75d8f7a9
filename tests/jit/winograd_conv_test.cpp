// Tier 1's Winograd convolution (jit/cpu/winograd_conv.h) against the direct sum in double: images of
// even and odd sizes (tiles over the edge), one and several channel blocks and blocks of tiles,
// batch 2, with and without a bias and Relu, on one thread and on the caller's team. The bound is
// that of F(2x2, 3x3)'s float sums: (cin + 12) roundings of the magnitudes in the transformed
// domain, twice over.
#include "jit/cpu/winograd_conv.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/jit/chain_builder.h"

namespace terrace::testing {
namespace {

std::vector<float> uniform(size_t n, uint32_t seed) {
  const Tensor t = random_tensor(DType::Float32, {int64_t(n)}, -1, 1, seed, false);
  return std::vector<float>(t.data<float>(), t.data<float>() + n);
}

// [n][c][h][w] -> [n][c/8][h][w][8] and back.
size_t blocked_index(int64_t c_total, int64_t h, int64_t w, int64_t img, int64_t c, int64_t y, int64_t x) {
  return size_t((((img * (c_total / 8) + c / 8) * h + y) * w + x) * 8 + c % 8);
}

// The transforms' coefficients: V = Bt d Bt^T, U = G f G^T, Y = At M At^T.
constexpr double kBt[4][4] = {{1, 0, -1, 0}, {0, 1, 1, 0}, {0, -1, 1, 0}, {0, 1, 0, -1}};
constexpr double kG[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
constexpr double kAt[2][4] = {{1, 1, 1, 0}, {0, 1, -1, -1}};

TEST(WinogradConv, MatchesTheDirectSumWithinItsBound) {
  if (!jit::packed_gemm_supported()) GTEST_SKIP() << "this CPU has no AVX2 and FMA (or TERRACE_PACKED_GEMM=0)";
  struct Case {
    int64_t n, cin, cout, h, w;
  };
  const int team = omp_get_max_threads();
  for (const Case& k : {Case{1, 8, 8, 2, 2}, Case{1, 16, 24, 5, 7}, Case{2, 8, 16, 6, 6}, Case{1, 64, 16, 9, 4},
                        Case{1, 8, 8, 20, 17}})  // the last: 90 tiles, several blocks a thread
    for (bool with_bias : {false, true})
      for (bool relu : {false, true})
        for (int threads : {1, team}) {
          SCOPED_TRACE(std::to_string(k.n) + "x" + std::to_string(k.cin) + "x" + std::to_string(k.h) + "x" +
                       std::to_string(k.w) + " -> " + std::to_string(k.cout) + (with_bias ? ", bias" : "") +
                       (relu ? ", relu" : "") + ", threads " + std::to_string(threads));
          const std::vector<float> x = uniform(size_t(k.n * k.cin * k.h * k.w), 1),
                                   f = uniform(size_t(k.cout * k.cin * 9), 2), bias = uniform(size_t(k.cout), 3);
          std::vector<float> src(x.size()), dst(size_t(k.n * k.cout * k.h * k.w), NAN);
          for (int64_t i = 0; i < k.n; ++i)
            for (int64_t c = 0; c < k.cin; ++c)
              for (int64_t y = 0; y < k.h; ++y)
                for (int64_t xx = 0; xx < k.w; ++xx)
                  src[blocked_index(k.cin, k.h, k.w, i, c, y, xx)] = x[size_t(((i * k.cin + c) * k.h + y) * k.w + xx)];
          const jit::WinogradConv::Geometry g{k.n, k.cin, k.cout, k.h, k.w};
          jit::WinogradConv conv(g, f.data(), relu);
          conv.run(src.data(), with_bias ? bias.data() : nullptr, dst.data(), threads, 0);
          // |U| per output and input channel, in double.
          std::vector<double> u_abs(size_t(k.cout * k.cin * 16));
          for (int64_t o = 0; o < k.cout; ++o)
            for (int64_t c = 0; c < k.cin; ++c)
              for (int i = 0; i < 4; ++i)
                for (int j = 0; j < 4; ++j) {
                  double u = 0;
                  for (int a = 0; a < 3; ++a)
                    for (int b = 0; b < 3; ++b) u += kG[i][a] * f[size_t((o * k.cin + c) * 9 + a * 3 + b)] * kG[j][b];
                  u_abs[size_t((o * k.cin + c) * 16 + i * 4 + j)] = std::abs(u);
                }
          auto input = [&](int64_t img, int64_t c, int64_t y, int64_t xx) -> double {
            return y < 0 || y >= k.h || xx < 0 || xx >= k.w ? 0.0 : x[size_t(((img * k.cin + c) * k.h + y) * k.w + xx)];
          };
          for (int64_t img = 0; img < k.n; ++img)
            for (int64_t o = 0; o < k.cout; ++o)
              for (int64_t y = 0; y < k.h; ++y)
                for (int64_t xx = 0; xx < k.w; ++xx) {
                  double want = with_bias ? bias[size_t(o)] : 0.0, scale = std::abs(want);
                  const int64_t y0 = y / 2 * 2 - 1, x0 = xx / 2 * 2 - 1;  // the tile's 4x4 patch
                  for (int64_t c = 0; c < k.cin; ++c) {
                    for (int a = 0; a < 3; ++a)
                      for (int b = 0; b < 3; ++b)
                        want += double(f[size_t((o * k.cin + c) * 9 + a * 3 + b)]) * input(img, c, y - 1 + a, xx - 1 + b);
                    for (int i = 0; i < 4; ++i)  // the magnitudes this output sums in the transformed domain
                      for (int j = 0; j < 4; ++j) {
                        const double coefficient = std::abs(kAt[y % 2][i] * kAt[xx % 2][j]);
                        if (coefficient == 0) continue;
                        double v = 0;
                        for (int a = 0; a < 4; ++a)
                          for (int b = 0; b < 4; ++b)
                            v += std::abs(kBt[i][a] * kBt[j][b] * input(img, c, y0 + a, x0 + b));
                        scale += coefficient * u_abs[size_t((o * k.cin + c) * 16 + i * 4 + j)] * v;
                      }
                  }
                  if (relu) want = std::max(0.0, want);
                  const double got = dst[blocked_index(k.cout, k.h, k.w, img, o, y, xx)];
                  ASSERT_LE(std::abs(got - want), 2.0 * double(k.cin + 12) * std::ldexp(scale, -24))
                      << "image " << img << ", channel " << o << ", pixel " << y << "," << xx;
                }
        }
}

// Where it runs: channels in blocks of 8, a 2x2 image at least, 12 tiles a thread.
TEST(WinogradConv, FitsOnlyWhatItComputes) {
  if (!jit::packed_gemm_supported()) GTEST_SKIP() << "this CPU has no AVX2 and FMA (or TERRACE_PACKED_GEMM=0)";
  EXPECT_TRUE(jit::WinogradConv::fits({1, 64, 64, 14, 14}, 2));   // 49 tiles
  EXPECT_FALSE(jit::WinogradConv::fits({1, 64, 64, 14, 14}, 8));  // 6 a thread
  EXPECT_FALSE(jit::WinogradConv::fits({1, 60, 64, 14, 14}, 1));
  EXPECT_FALSE(jit::WinogradConv::fits({1, 64, 20, 14, 14}, 1));
  EXPECT_FALSE(jit::WinogradConv::fits({1, 64, 64, 1, 40}, 1));
  EXPECT_TRUE(jit::WinogradConv::fits({4, 64, 64, 7, 7}, 2));  // 64 tiles over the batch
}

}  // namespace
}  // namespace terrace::testing
