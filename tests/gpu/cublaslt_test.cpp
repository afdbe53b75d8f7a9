// cuBLASLt GEMMs (jit/cuda/cublaslt_ops.h) against a float64 host product: row-major operands, either
// transposed, bias and Relu epilogues, a C matrix, strided batches. They need a GPU and skip here.
#ifdef TERRACE_HAVE_CUDA
#include "jit/cuda/cublaslt_ops.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <vector>

#include "interp/error.h"
#include "jit/code_cache.h"
#include "jit/cuda/cuda_memory.h"

namespace terrace::jit::cuda {
namespace {

#define SKIP_WITHOUT_CUBLASLT()                                          \
  do {                                                                   \
    std::string why_;                                                    \
    if (!cublaslt_available(&why_)) GTEST_SKIP() << "no cuBLASLt: " << why_; \
  } while (0)

TEST(CublasLt, unavailable_says_why) {
  std::string why;
  if (cublaslt_available(&why)) GTEST_SKIP() << "cuBLASLt is here";
  EXPECT_FALSE(why.empty());
  EXPECT_THROW(CublasLtGemm(GemmSpec{}), Error);
}

std::vector<float> random_floats(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

CUdeviceptr upload(const std::vector<float>& v, std::vector<DeviceBuffer>& keep, const Stream& s) {
  keep.emplace_back(v.size() * sizeof(float), s.get());
  copy_to_device(keep.back().ptr(), v.data(), v.size() * sizeof(float), s);
  return keep.back().ptr();
}

void check_gemm(const GemmSpec& spec, const CodeCache* tuning = nullptr) {
  const int64_t m = spec.m, n = spec.n, k = spec.k, batch = spec.batch;
  auto a = random_floats(size_t(batch * m * k), 1), b = random_floats(size_t((spec.stride_b ? batch : 1) * k * n), 2);
  auto c = random_floats(size_t(m * n), 3), bias = random_floats(size_t(n), 4);
  Stream s;
  std::vector<DeviceBuffer> keep;
  CUdeviceptr da = upload(a, keep, s), db = upload(b, keep, s), dc = upload(c, keep, s), dbias = upload(bias, keep, s);
  DeviceBuffer dy(size_t(batch * m * n) * sizeof(float), s.get());
  CublasLtGemm gemm(spec, tuning);
  gemm.run(da, db, dc, dbias, dy.ptr(), s.get());
  std::vector<float> y(size_t(batch * m * n));
  copy_to_host(y.data(), dy.ptr(), y.size() * sizeof(float), s);
  s.synchronize();
  for (int64_t t = 0; t < batch; ++t)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < k; ++p) {
          double av = spec.trans_a ? a[size_t(t * m * k + p * m + i)] : a[size_t(t * m * k + i * k + p)];
          const int64_t bo = spec.stride_b ? t * k * n : 0;
          double bv = spec.trans_b ? b[size_t(bo + j * k + p)] : b[size_t(bo + p * n + j)];
          acc += av * bv;
        }
        double want = spec.alpha * acc;
        if (spec.has_c) want += spec.beta * c[size_t(i * n + j)];
        if (spec.has_bias) want += bias[size_t(j)];
        if (spec.relu) want = std::max(want, 0.0);
        // fp32 FFMA over k terms of magnitude <= 1: within k * 2^-23 of the exact sum, relatively.
        ASSERT_NEAR(y[size_t(t * m * n + i * n + j)], want, 1e-6 * double(k) + 1e-6)
            << spec.describe() << " at " << t << "," << i << "," << j;
      }
}

TEST(CublasLt, plain_product_matches_the_host) {
  SKIP_WITHOUT_CUBLASLT();
  check_gemm({.m = 33, .n = 65, .k = 127});
}

TEST(CublasLt, transposed_operands_bias_and_relu) {
  SKIP_WITHOUT_CUBLASLT();
  check_gemm({.m = 7, .n = 512, .k = 784, .trans_a = true, .trans_b = true, .has_bias = true, .relu = true});
}

TEST(CublasLt, c_matrix_with_alpha_and_beta) {
  SKIP_WITHOUT_CUBLASLT();
  check_gemm({.m = 16, .n = 24, .k = 40, .alpha = 0.5f, .beta = 2.0f, .has_c = true});
}

TEST(CublasLt, strided_batches) {
  SKIP_WITHOUT_CUBLASLT();
  check_gemm({.m = 128, .n = 64, .k = 64, .batch = 12, .stride_a = 128 * 64, .stride_b = 64 * 64});
}

// A timed choice goes into the tuning records; a later plan of the same product takes it without
// timing and computes the same product; a corrupt record is a miss, timed again.
TEST(CublasLt, a_timed_choice_is_recorded_and_a_later_plan_takes_it) {
  SKIP_WITHOUT_CUBLASLT();
  const GemmSpec spec{.m = 128, .n = 768, .k = 768, .has_bias = true};
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("terrace-cublaslt-tuning-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  CodeCache cache(dir);
  const CublasLtGemm first(spec, &cache);
  if (first.algorithm().rfind("timed", 0) != 0)
    GTEST_SKIP() << "nothing timed here (one candidate, or TERRACE_GEMM_TUNE=0): " << first.algorithm();
  ASSERT_EQ(cache.info().entries, 1u);
  EXPECT_EQ(CublasLtGemm(spec, &cache).algorithm(), "from the tuning record");
  check_gemm(spec, &cache);  // the recorded algorithm's product
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.is_regular_file()) std::filesystem::resize_file(e.path(), std::filesystem::file_size(e.path()) - 1);
  EXPECT_EQ(CublasLtGemm(spec, &cache).algorithm().rfind("timed", 0), 0u) << "a truncated record is a miss";
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace terrace::jit::cuda
#endif
