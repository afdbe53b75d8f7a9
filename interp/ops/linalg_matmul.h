// numpy-style batched matrix products on top of the packed GEMM (MatMul and its integer forms).
#pragma once
#include <algorithm>
#include <optional>

#include "interp/graph.h"
#include "interp/ops/linalg_gemm.h"

namespace terrace::ops {

// Shapes and batch offsets of a numpy matmul: 1-D operands are promoted (and the promoted dim
// dropped from the output), batch dims broadcast.
struct MatMulPlan {
  Shape out_shape;
  int64_t M = 0, K = 0, N = 0;
  std::vector<int64_t> a_off, b_off;  // element offset of each batch's matrix in a and b
};
MatMulPlan plan_matmul(const Node& node, const Shape& a, const Shape& b);

// C = A·B with B [K, N] read from b (row stride N) and packed a block of columns at a time where
// packing it whole would take more than 32 MB: GPT-2's [768, 50257] output projection is 309 MB
// packed in double, a transient the size of half the model, and 12.6 MB in blocks of 2,048
// columns. Every sum still runs over k in order, so the blocks change no bit of the result.
// done(cols) after each block: B's first `cols` columns are not read again (run_matmul's caller
// may let their memory go).
inline constexpr size_t kPackBWholeBytes = size_t(32) << 20;
template <typename Acc, typename TB, typename Emit, typename Done>
void gemm_b_by_blocks(const PackedMatrix<Acc>& A, const TB* b, int64_t K, int64_t N, Emit&& emit, Done&& done) {
  constexpr size_t kBlock = size_t(16) << 20;
  const size_t whole = size_t(packed_b_size(K, N)) * sizeof(Acc);
  int64_t cols = N;
  if (whole > kPackBWholeBytes) {
    constexpr int64_t kStep = 128;  // gemm_packed's column tile, a multiple of kGemmNR
    cols = std::max<int64_t>(kStep, int64_t(kBlock / (size_t(std::max<int64_t>(K, 1)) * sizeof(Acc))) / kStep * kStep);
  }
  for (int64_t j0 = 0; j0 < N; j0 += cols) {
    const int64_t n = std::min(cols, N - j0);
    auto B = pack_b<Acc>(b + j0, K, n, N, 1);
    gemm_packed(A, B, [&](int64_t i, int64_t jj, int64_t nn, const Acc* sums) { emit(i, j0 + jj, nn, sums); });
    done(j0 + n);
  }
}

// out[batch*M + i, j] rows: for each batch, A·B with a/b read at the plan's offsets;
// emit(row, j0, n, const Acc* sums) with row = batch*M + i (the output is [batches, M, N]).
// When every batch shares B (a weight), A's batches are contiguous rows of one GEMM.
template <typename Acc, typename TA, typename TB, typename Emit, typename Done>
void run_matmul(const MatMulPlan& p, const TA* a, const TB* b, Emit&& emit, Done&& done_with_b);
template <typename Acc, typename TA, typename TB, typename Emit>
void run_matmul(const MatMulPlan& p, const TA* a, const TB* b, Emit&& emit) {
  run_matmul<Acc>(p, a, b, emit, [](int64_t) {});
}

// done_with_b(cols): as gemm_b_by_blocks's done, where one product reads B (one batch, or one B
// that every batch shares); never called otherwise.
template <typename Acc, typename TA, typename TB, typename Emit, typename Done>
void run_matmul(const MatMulPlan& p, const TA* a, const TB* b, Emit&& emit, Done&& done_with_b) {
  const int64_t batches = int64_t(p.a_off.size());
  bool shared_b = true, a_contig = true;
  for (int64_t t = 0; t < batches; ++t) {
    shared_b = shared_b && p.b_off[size_t(t)] == p.b_off[0];
    a_contig = a_contig && p.a_off[size_t(t)] == t * p.M * p.K;
  }
  if (batches > 1 && shared_b && a_contig && batches * p.M > kGemmSmallM) {
    auto A = pack_a<Acc>(a, batches * p.M, p.K, p.K, 1);
    gemm_b_by_blocks(A, b + p.b_off[0], p.K, p.N, emit, done_with_b);
    return;
  }
  if (p.M <= kGemmSmallM) {
    for (int64_t t = 0; t < batches; ++t)
      gemm_small_m<Acc>(a + p.a_off[size_t(t)], p.K, int64_t(1), b + p.b_off[size_t(t)], p.N,
                        int64_t(1), p.M, p.K, p.N, [&](int64_t i, int64_t j0, int64_t n, const Acc* s) {
                          emit(t * p.M + i, j0, n, s);
                        });
    return;
  }
  // B packed once for the batches that share it, unless it is packed by blocks anyway.
  const bool by_blocks = size_t(packed_b_size(p.K, p.N)) * sizeof(Acc) > kPackBWholeBytes;
  std::optional<PackedMatrix<Acc>> B;
  for (int64_t t = 0; t < batches; ++t) {
    auto A = pack_a<Acc>(a + p.a_off[size_t(t)], p.M, p.K, p.K, 1);
    auto rows = [&](int64_t i, int64_t j0, int64_t n, const Acc* s) { emit(t * p.M + i, j0, n, s); };
    if (by_blocks) {
      gemm_b_by_blocks(A, b + p.b_off[size_t(t)], p.K, p.N, rows, [&](int64_t cols) {
        if (batches == 1) done_with_b(cols);
      });
      continue;
    }
    if (t == 0 || p.b_off[size_t(t)] != p.b_off[size_t(t) - 1]) {
      B.reset();
      B.emplace(pack_b<Acc>(b + p.b_off[size_t(t)], p.K, p.N, p.N, 1));
    }
    gemm_packed(A, *B, rows);
  }
}

}  // namespace terrace::ops
