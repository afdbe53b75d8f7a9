// numpy-style batched matrix products on top of the packed GEMM (MatMul and its integer forms).
#pragma once
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

// out[batch*M + i, j] rows: for each batch, A·B with a/b read at the plan's offsets;
// emit(row, j0, n, const Acc* sums) with row = batch*M + i (the output is [batches, M, N]).
// When every batch shares B (a weight), A's batches are contiguous rows of one GEMM.
template <typename Acc, typename TA, typename TB, typename Emit>
void run_matmul(const MatMulPlan& p, const TA* a, const TB* b, Emit&& emit) {
  const int64_t batches = int64_t(p.a_off.size());
  bool shared_b = true, a_contig = true;
  for (int64_t t = 0; t < batches; ++t) {
    shared_b = shared_b && p.b_off[size_t(t)] == p.b_off[0];
    a_contig = a_contig && p.a_off[size_t(t)] == t * p.M * p.K;
  }
  if (batches > 1 && shared_b && a_contig && batches * p.M > kGemmSmallM) {
    auto B = pack_b<Acc>(b + p.b_off[0], p.K, p.N, p.N, 1);
    auto A = pack_a<Acc>(a, batches * p.M, p.K, p.K, 1);
    gemm_packed(A, B, emit);
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
  std::optional<PackedMatrix<Acc>> B;
  for (int64_t t = 0; t < batches; ++t) {
    if (t == 0 || p.b_off[size_t(t)] != p.b_off[size_t(t) - 1]) {
      B.reset();
      B.emplace(pack_b<Acc>(b + p.b_off[size_t(t)], p.K, p.N, p.N, 1));
    }
    auto A = pack_a<Acc>(a + p.a_off[size_t(t)], p.M, p.K, p.K, 1);
    gemm_packed(A, *B, [&](int64_t i, int64_t j0, int64_t n, const Acc* s) {
      emit(t * p.M + i, j0, n, s);
    });
  }
}

}  // namespace terrace::ops
