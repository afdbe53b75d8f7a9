// MatMul, Gemm, Det and Einsum: bitwise agreement with an ordered double sum, thread-count
// independence, broadcasting and errors.
#include <cmath>
#include <cstring>

#include "interp/ops/linalg_gemm.h"
#include "tests/ops_reduce_linalg/run_node.h"

namespace terrace::testing {
namespace {

// The specification of a float matmul: each output is the double sum over k in order, rounded once.
std::vector<float> ordered_matmul(const Tensor& a, const Tensor& b, int64_t M, int64_t K, int64_t N) {
  std::vector<float> r(size_t(M * N));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += double(a.data<float>()[i * K + k]) * double(b.data<float>()[k * N + j]);
      r[size_t(i * N + j)] = float(s);
    }
  return r;
}

TEST(MatMul, equals_the_ordered_double_sum_bitwise_for_odd_sizes) {
  // Sizes cross the GEMM's register, column and k blocks (4, 128, 256) unevenly.
  const int64_t M = 67, K = 301, N = 133;
  Tensor a = random_tensor({M, K}, 1), b = random_tensor({K, N}, 2);
  Tensor y = run1(Op::MatMul, {a, b});
  ASSERT_EQ(y.shape(), (Shape{M, N}));
  EXPECT_EQ(values_of<float>(y), ordered_matmul(a, b, M, K, N));
}

// A weight whose packed form would pass 32 MB (here 34 MB in double; GPT-2's output projection
// takes 309 MB) is packed a block of columns at a time: the same bits, alone and shared by a batch.
TEST(MatMul, wide_weight_packed_by_column_blocks_equals_the_ordered_double_sum_bitwise) {
  const int64_t M = 9, K = 64, N = 66000;
  Tensor a = random_tensor({M, K}, 40), b = random_tensor({K, N}, 41);
  Tensor y = run1(Op::MatMul, {a, b});
  ASSERT_EQ(y.shape(), (Shape{M, N}));
  const std::vector<float> want = ordered_matmul(a, b, M, K, N);
  EXPECT_EQ(values_of<float>(y), want);
  // [3, 3, K] x [K, N]: the batches' rows as one product with the shared weight.
  Tensor a3 = Tensor::empty(DType::Float32, {3, 3, K});
  std::memcpy(a3.data<float>(), a.data<float>(), size_t(M * K) * sizeof(float));
  Tensor y3 = run1(Op::MatMul, {a3, b});
  ASSERT_EQ(y3.shape(), (Shape{3, 3, N}));
  EXPECT_EQ(values_of<float>(y3), want);
}

// A few rows of A (a batch-1 Linear layer) take the unpacked path; it must give the same bits.
TEST(MatMul, few_rows_equal_the_ordered_double_sum_bitwise) {
  for (int64_t M : {1, 3, 4, 5}) {
    const int64_t K = 301, N = 133;
    Tensor a = random_tensor({M, K}, 10 + uint64_t(M)), b = random_tensor({K, N}, 20);
    auto one = with_threads(1, [&] { return values_of<float>(run1(Op::MatMul, {a, b})); });
    auto many = with_threads(5, [&] { return values_of<float>(run1(Op::MatMul, {a, b})); });
    EXPECT_EQ(one, ordered_matmul(a, b, M, K, N)) << "M=" << M;
    EXPECT_EQ(many, one) << "M=" << M;
  }
}

TEST(Gemm, one_row_with_transposed_b_equals_the_ordered_double_sum_bitwise) {
  const int64_t K = 784, N = 515;
  Tensor a = random_tensor({1, K}, 30), bt = random_tensor({N, K}, 31);
  Tensor b = Tensor::empty(DType::Float32, {K, N});
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) b.data<float>()[k * N + n] = bt.data<float>()[n * K + k];
  Tensor y = run1(Op::Gemm, {a, bt}, {{"transB", int_attr(1)}});
  EXPECT_EQ(values_of<float>(y), ordered_matmul(a, b, 1, K, N));
}

// The interpreter's double micro-kernel has a baseline (x86-64-v2) copy and an AVX2 copy picked
// at run time; both are called here on the same panels and must agree bitwise, so the path a
// machine without AVX2 takes is covered on any machine.
TEST(MatMul, the_baseline_and_avx2_micro_kernels_agree_bitwise) {
  using ops::kGemmMR;
  using ops::kGemmNR;
  auto baseline = ops::detail::gemm_micro_f64_variant("baseline");
  auto avx2 = ops::detail::gemm_micro_f64_variant("avx2");
  ASSERT_NE(baseline, nullptr);
  if (!avx2) GTEST_SKIP() << "this CPU has no AVX2: only the baseline copy can run";
  const int64_t kc = 37;
  std::vector<double> a(size_t(kc * kGemmMR)), b(size_t(kc * kGemmNR));
  for (size_t i = 0; i < a.size(); ++i) a[i] = std::sin(double(i) * 1.7) * 1e3;
  for (size_t i = 0; i < b.size(); ++i) b[i] = std::cos(double(i) * 0.3) / 7;
  std::vector<double> c1(size_t(kGemmMR * kGemmNR), 0.5), c2 = c1;
  baseline(kc, a.data(), b.data(), c1.data(), kGemmNR);
  avx2(kc, a.data(), b.data(), c2.data(), kGemmNR);
  EXPECT_EQ(std::memcmp(c1.data(), c2.data(), c1.size() * sizeof(double)), 0);
  EXPECT_EQ(ops::detail::gemm_micro_f64_variant("avx512"), nullptr) << "an unknown copy is refused";
}

TEST(MatMul, result_is_identical_for_any_thread_count) {
  Tensor a = random_tensor({3, 70, 200}, 3), b = random_tensor({200, 150}, 4);
  auto one = with_threads(1, [&] { return values_of<float>(run1(Op::MatMul, {a, b})); });
  auto many = with_threads(7, [&] { return values_of<float>(run1(Op::MatMul, {a, b})); });
  EXPECT_EQ(one, many);
}

TEST(MatMul, broadcasts_batches_and_promotes_vectors) {
  Tensor a = random_tensor({2, 1, 3, 4}, 5), b = random_tensor({5, 4, 2}, 6);
  EXPECT_EQ(run1(Op::MatMul, {a, b}).shape(), (Shape{2, 5, 3, 2}));
  Tensor v = random_tensor({4}, 7);
  EXPECT_EQ(run1(Op::MatMul, {a, v}).shape(), (Shape{2, 1, 3}));
  EXPECT_EQ(run1(Op::MatMul, {v, b}).shape(), (Shape{5, 2}));
  EXPECT_EQ(run1(Op::MatMul, {v, v}).shape(), (Shape{}));
}

TEST(MatMul, integer_products_are_exact) {
  Tensor a = Tensor::from_vector<int64_t>({1, 2}, {int64_t(1) << 40, 3});
  Tensor b = Tensor::from_vector<int64_t>({2, 1}, {1024, 1});
  EXPECT_EQ(values_of<int64_t>(run1(Op::MatMul, {a, b})), (std::vector<int64_t>{(int64_t(1) << 50) + 3}));
}

TEST(MatMul, mismatched_inner_dims_name_the_node) {
  Error e = error_of([] { run1(Op::MatMul, {random_tensor({2, 3}, 1), random_tensor({4, 2}, 2)}); });
  EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(std::string(e.what()).find("under_test"), std::string::npos);
}

TEST(Gemm, applies_transposes_alpha_beta_and_broadcast_c) {
  Tensor a = Tensor::from_vector<float>({2, 1}, {1, 2});   // transA: A' is [1, 2]
  Tensor b = Tensor::from_vector<float>({3, 2}, {1, 0, 0, 1, 1, 1});  // transB: B' is [2, 3]
  Tensor c = Tensor::from_vector<float>({3}, {10, 20, 30});
  Tensor y = run1(Op::Gemm, {a, b, c},
                  {{"transA", int_attr(1)}, {"transB", int_attr(1)}, {"alpha", float_attr(2)}, {"beta", float_attr(0.5f)}});
  ASSERT_EQ(y.shape(), (Shape{1, 3}));
  EXPECT_EQ(values_of<float>(y), (std::vector<float>{2 + 5, 4 + 10, 6 + 15}));
  EXPECT_EQ(run1(Op::Gemm, {a, b}, {{"transA", int_attr(1)}, {"transB", int_attr(1)}}).shape(), (Shape{1, 3}));
}

TEST(Det, handles_pivoting_batches_and_singular_matrices) {
  Tensor x = Tensor::from_vector<float>({3, 2, 2}, {0, 1, 1, 0, 2, 0, 0, 3, 1, 2, 2, 4});
  EXPECT_EQ(values_of<float>(run1(Op::Det, {x})), (std::vector<float>{-1, 6, 0}));
}

TEST(Einsum, implicit_output_sorts_the_single_labels) {
  Tensor a = random_tensor({2, 3}, 8), b = random_tensor({3, 4}, 9);
  Tensor y = run1(Op::Einsum, {b, a}, {{"equation", str_attr("jk,ij")}});  // implicit: "ik"
  ASSERT_EQ(y.shape(), (Shape{2, 4}));
  EXPECT_EQ(values_of<float>(y), ordered_matmul(a, b, 2, 3, 4));
}

TEST(Einsum, repeated_labels_take_diagonals_under_an_ellipsis) {
  Tensor x = Tensor::from_vector<float>({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  Tensor d = run1(Op::Einsum, {x}, {{"equation", str_attr("...ii -> ...i")}});
  EXPECT_EQ(values_of<float>(d), (std::vector<float>{1, 4, 5, 8}));
  Tensor tr = run1(Op::Einsum, {x}, {{"equation", str_attr("bii")}});  // implicit: "b", the traces
  EXPECT_EQ(values_of<float>(tr), (std::vector<float>{5, 13}));
}

TEST(Einsum, bad_equations_are_invalid_models) {
  Tensor x = random_tensor({2, 2}, 1);
  EXPECT_EQ(error_of([&] { run1(Op::Einsum, {x}, {{"equation", str_attr("ij,jk->ik")}}); }).code(),
            ErrorCode::InvalidModel);
  EXPECT_EQ(error_of([&] { run1(Op::Einsum, {x}, {{"equation", str_attr("ij->iz")}}); }).code(),
            ErrorCode::InvalidModel);
}

}  // namespace
}  // namespace terrace::testing
