// Tier 1's packed-weight product (jit/cpu/packed_gemm.h) against a double-precision reference: every
// tail of its blocking (rows not a multiple of 6 or of its row blocks, columns not a multiple of
// 16, depths not a multiple of its depth blocks or under one), both orders of the weights, with
// and without a bias, A read in place or from the team's copy, on one thread and on the caller's
// team; one row of A (the GEMV's own kernel) among them.
#include "jit/cpu/packed_gemm.h"

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

TEST(PackedGemm, MatchesADoubleReferenceOnEveryTail) {
  if (!jit::packed_gemm_supported()) GTEST_SKIP() << "this CPU has no AVX2 and FMA (or TERRACE_PACKED_GEMM=0)";
  const int team = omp_get_max_threads();
  const int64_t rows = jit::PackedWeights::kRowBlock, depth = jit::PackedWeights::kDepthBlock;
  for (int64_t m : {int64_t(1), int64_t(5), int64_t(6), int64_t(13), rows - 4, rows + 8, 2 * rows + 5})
    for (int64_t k : {int64_t(1), depth - 1, depth, depth + 1, 2 * depth + 100})
      for (int64_t n : {1, 15, 16, 17, 50})
        for (bool transposed : {false, true})
          for (bool with_bias : {false, true})
            for (int threads : {1, team})
              for (bool copy : {false, true}) {
                SCOPED_TRACE(std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n) +
                             (transposed ? " weights [n, k]" : " weights [k, n]") + (with_bias ? ", bias" : "") +
                             ", threads " + std::to_string(threads) + (copy ? ", A copied" : ", A in place"));
                const std::vector<float> a = uniform(size_t(m * k), 1), b = uniform(size_t(k * n), 2),
                                         bias = uniform(size_t(n), 3);
                jit::PackedWeights w(b.data(), k, n, transposed);
                EXPECT_EQ(w.k(), k);
                EXPECT_EQ(w.n(), n);
                // The copy's scratch: m k floats, as rows_floats asks for where it asks for any.
                std::vector<float> c(size_t(m * n), NAN), scratch(copy ? size_t(m * k) : 0, NAN);
                w.multiply(a.data(), m, with_bias ? bias.data() : nullptr, c.data(), threads,
                           copy ? scratch.data() : nullptr);
                double worst = 0;
                for (int64_t i = 0; i < m; ++i)
                  for (int64_t j = 0; j < n; ++j) {
                    double want = with_bias ? bias[size_t(j)] : 0.0, scale = std::abs(want);
                    for (int64_t p = 0; p < k; ++p) {
                      const double t = double(a[size_t(i * k + p)]) * (transposed ? b[size_t(j * k + p)] : b[size_t(p * n + j)]);
                      want += t;
                      scale += std::abs(t);
                    }
                    // A float sum of k + 1 terms: at most (k + 1) 2^-24 of the terms' magnitudes.
                    const double err = std::abs(double(c[size_t(i * n + j)]) - want);
                    ASSERT_LE(err, double(k + 1) * std::ldexp(scale, -24)) << "row " << i << ", column " << j;
                    worst = std::max(worst, err);
                  }
              }
}

// Relu in the product's stores (one row: the GEMV's; more: after the panels): max(0, x) of the
// sum with its bias, NaN kept (ONNX's Relu, as the interpreter computes it), on every path.
TEST(PackedGemm, ReluKeepsNaNAndZeroesNegativeSums) {
  if (!jit::packed_gemm_supported()) GTEST_SKIP() << "this CPU has no AVX2 and FMA (or TERRACE_PACKED_GEMM=0)";
  const int64_t depth = jit::PackedWeights::kDepthBlock;
  for (int64_t m : {int64_t(1), int64_t(13)})
    for (int64_t k : {int64_t(0), int64_t(7), depth + 1})
      for (int64_t n : {int64_t(15), int64_t(50), int64_t(64)})
        for (int threads : {1, omp_get_max_threads()}) {
          SCOPED_TRACE(std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n) + ", threads " +
                       std::to_string(threads));
          std::vector<float> a = uniform(size_t(m * k), 4), b = uniform(size_t(k * n), 5), bias = uniform(size_t(n), 6);
          if (k > 0) b[size_t(3 * n + 2)] = NAN;  // column 2 sums a NaN on every row
          jit::PackedWeights w(b.data(), k, n, false);
          std::vector<float> plain(size_t(m * n)), relu(size_t(m * n));
          w.multiply(a.data(), m, bias.data(), plain.data(), threads);
          w.multiply(a.data(), m, bias.data(), relu.data(), threads, nullptr, true);
          int negative = 0;
          for (size_t i = 0; i < plain.size(); ++i) {
            if (std::isnan(plain[i])) {
              EXPECT_TRUE(std::isnan(relu[i])) << "element " << i;
              continue;
            }
            negative += plain[i] < 0;
            EXPECT_EQ(relu[i], plain[i] < 0 ? 0.0f : plain[i]) << "element " << i;
          }
          EXPECT_GT(negative, 0);
          if (k > 0) {
            EXPECT_TRUE(std::isnan(relu[2]));
          }
        }
}

TEST(PackedGemm, EmptyDepthGivesTheBiasAndEmptyRowsWriteNothing) {
  if (!jit::packed_gemm_supported()) GTEST_SKIP() << "this CPU has no AVX2 and FMA (or TERRACE_PACKED_GEMM=0)";
  const std::vector<float> bias = {1.5f, -2.0f, 3.0f};
  jit::PackedWeights w(nullptr, 0, 3, false);
  std::vector<float> c(6, NAN);
  w.multiply(nullptr, 2, bias.data(), c.data(), 1);
  EXPECT_EQ(c, (std::vector<float>{1.5f, -2.0f, 3.0f, 1.5f, -2.0f, 3.0f}));
  w.multiply(nullptr, 2, nullptr, c.data(), 1);
  EXPECT_EQ(c, std::vector<float>(6, 0.0f));
  std::vector<float> untouched(3, 7.0f);
  jit::PackedWeights x(bias.data(), 1, 3, false);
  x.multiply(nullptr, 0, nullptr, untouched.data(), 1);
  EXPECT_EQ(untouched, std::vector<float>(3, 7.0f));
}

}  // namespace
}  // namespace terrace::testing
