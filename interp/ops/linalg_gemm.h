// The interpreter's one GEMM (used by MatMul, Gemm, Conv, ConvTranspose and their integer forms):
// packed panels, double (or 64-bit integer) accumulation, each output's sum in fixed k order.
#pragma once
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <omp.h>
#include <type_traits>
#include <vector>

#include "interp/tensor.h"

namespace terrace::ops {

// What sums of T accumulate in: double for floating types, 64-bit integers for integers.
template <typename T>
using acc_t = std::conditional_t<
    std::is_integral_v<T>, std::conditional_t<std::is_same_v<T, uint64_t>, uint64_t, int64_t>,
    double>;

// Rounds an accumulated value once to T. Doubles reach 16-bit floats through a round-to-odd
// float, so the result is the correctly rounded value, not a double rounding.
template <typename T, typename Acc>
T round_to(Acc v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    double d = double(v);
    float f = float(d);
    if (double(f) != d && std::isfinite(f)) {
      if (std::fabs(double(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);
      f = bits_to_float(float_to_bits(f) | 1u);
    }
    return T(f);
  } else if constexpr (std::is_floating_point_v<T>) {
    return T(v);
  } else {
    return T(v);  // integers wrap modulo 2^bits, as ONNX integer arithmetic does
  }
}

// Converts an element to its accumulator type (16-bit floats go through float).
template <typename Acc, typename T>
inline Acc to_acc(T v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) return Acc(float(v));
  else return Acc(v);
}

// Register tile of the micro-kernel: MR rows of A by NR columns of B.
inline constexpr int64_t kGemmMR = 8, kGemmNR = 4;

// Per-thread scratch memory for packed operands, reused from call to call so that the large
// packing buffers are neither re-zeroed nor page-faulted again on every call (that cost as much
// as a small GEMM). Contents start uninitialised. Buffers over kKeepBytes are released when
// their user ends, so one huge product (an LM head) does not pin its memory.
enum class ScratchSlot { A, B };
template <typename Acc>
class ScratchBuffer {
 public:
  static constexpr size_t kKeepBytes = size_t(64) << 20;
  ScratchBuffer(ScratchSlot slot, size_t n) : slot_(&store()[size_t(slot)]) {
    if (slot_->n < n) {
      slot_->p.reset();
      slot_->p.reset(new Acc[n]);
      slot_->n = n;
    }
  }
  ScratchBuffer(ScratchBuffer&& o) noexcept : slot_(o.slot_) { o.slot_ = nullptr; }
  ScratchBuffer& operator=(ScratchBuffer&&) = delete;
  ~ScratchBuffer() {
    if (slot_ && slot_->n * sizeof(Acc) > kKeepBytes) slot_->p.reset(), slot_->n = 0;
  }
  Acc* data() const { return slot_->p.get(); }

 private:
  struct Slot {
    std::unique_ptr<Acc[]> p;
    size_t n = 0;
  };
  static std::array<Slot, 2>& store() {
    thread_local std::array<Slot, 2> slots;
    return slots;
  }
  Slot* slot_;
};

// A [M,K] packed as panels of MR rows; panel p holds K x MR values, k-major, rows past M zero.
// B [K,N] packed as panels of NR columns; panel q holds K x NR values, k-major, columns past N
// zero. A lives in this thread's A scratch slot, B in its B slot: one of each at a time.
template <typename Acc>
struct PackedMatrix {
  int64_t rows = 0, cols = 0;  // logical M,K (A) or K,N (B)
  ScratchBuffer<Acc> buf;
  const Acc* data() const { return buf.data(); }
};
inline int64_t packed_a_size(int64_t M, int64_t K) { return (M + kGemmMR - 1) / kGemmMR * kGemmMR * K; }
inline int64_t packed_b_size(int64_t K, int64_t N) { return (N + kGemmNR - 1) / kGemmNR * kGemmNR * K; }

// Packs A[i,k] = a[i*rs + k*cs] (any strides, so transposes cost nothing) into dst.
template <typename Acc, typename T>
void pack_a_into(Acc* dst, const T* a, int64_t M, int64_t K, int64_t rs, int64_t cs) {
  const int64_t panels = (M + kGemmMR - 1) / kGemmMR;
#pragma omp parallel for schedule(static) if (M * K > (1 << 16))
  for (int64_t q = 0; q < panels; ++q) {
    Acc* d = dst + q * K * kGemmMR;
    for (int64_t r = 0; r < kGemmMR; ++r) {
      if (q * kGemmMR + r >= M) {
        for (int64_t k = 0; k < K; ++k) d[k * kGemmMR + r] = Acc(0);
        continue;
      }
      const T* src = a + (q * kGemmMR + r) * rs;
      for (int64_t k = 0; k < K; ++k) d[k * kGemmMR + r] = to_acc<Acc>(src[k * cs]);
    }
  }
}

// Packs B[k,n] = b[k*rs + n*cs] into dst.
template <typename Acc, typename T>
void pack_b_into(Acc* dst, const T* b, int64_t K, int64_t N, int64_t rs, int64_t cs) {
  const int64_t panels = (N + kGemmNR - 1) / kGemmNR;
#pragma omp parallel for schedule(static) if (K * N > (1 << 16))
  for (int64_t q = 0; q < panels; ++q) {
    Acc* d = dst + q * K * kGemmNR;
    const int64_t cols = std::min(kGemmNR, N - q * kGemmNR);
    for (int64_t k = 0; k < K; ++k) {
      const T* src = b + k * rs + q * kGemmNR * cs;
      for (int64_t s = 0; s < kGemmNR; ++s) d[k * kGemmNR + s] = s < cols ? to_acc<Acc>(src[s * cs]) : Acc(0);
    }
  }
}

template <typename Acc, typename T>
PackedMatrix<Acc> pack_a(const T* a, int64_t M, int64_t K, int64_t rs, int64_t cs) {
  PackedMatrix<Acc> p{M, K, ScratchBuffer<Acc>(ScratchSlot::A, size_t(packed_a_size(M, K)))};
  pack_a_into(p.buf.data(), a, M, K, rs, cs);
  return p;
}
template <typename Acc, typename T>
PackedMatrix<Acc> pack_b(const T* b, int64_t K, int64_t N, int64_t rs, int64_t cs) {
  PackedMatrix<Acc> p{K, N, ScratchBuffer<Acc>(ScratchSlot::B, size_t(packed_b_size(K, N)))};
  pack_b_into(p.buf.data(), b, K, N, rs, cs);
  return p;
}

// Runs f(i) for i in [0, n) on OpenMP threads (static schedule); an exception thrown by f is
// caught inside the region and the first one rethrown after it, as none may escape a region.
template <typename F>
void parallel_for_catching(int64_t n, bool parallel, F&& f) {
  std::exception_ptr err;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t i = 0; i < n; ++i) {
    try {
      f(i);
    } catch (...) {
#pragma omp critical(terrace_parallel_for_catching)
      if (!err) err = std::current_exception();
    }
  }
  if (err) std::rethrow_exception(err);
}

namespace detail {
// c[MR x NR] (row stride ldc) += a-panel slice * b-panel slice over kc steps, k in order.
template <typename Acc>
inline void gemm_micro_body(int64_t kc, const Acc* __restrict a, const Acc* __restrict b,
                            Acc* __restrict c, int64_t ldc) {
  Acc acc[kGemmMR][kGemmNR];
#pragma GCC unroll 8
  for (int64_t r = 0; r < kGemmMR; ++r)
#pragma GCC unroll 8
    for (int64_t s = 0; s < kGemmNR; ++s) acc[r][s] = c[r * ldc + s];
  for (int64_t k = 0; k < kc; ++k) {
#pragma GCC unroll 8
    for (int64_t r = 0; r < kGemmMR; ++r)
#pragma GCC unroll 8
      for (int64_t s = 0; s < kGemmNR; ++s) acc[r][s] += a[r] * b[s];
    a += kGemmMR;
    b += kGemmNR;
  }
#pragma GCC unroll 8
  for (int64_t r = 0; r < kGemmMR; ++r)
#pragma GCC unroll 8
    for (int64_t s = 0; s < kGemmNR; ++s) c[r * ldc + s] = acc[r][s];
}

// The double micro-kernel, compiled out of line once per instruction set (gemm_micro.cpp): AVX2
// where the CPU has it. Separate multiplies and adds (no FMA) give the same bits on either.
void gemm_micro_f64(int64_t kc, const double* __restrict a, const double* __restrict b,
                    double* __restrict c, int64_t ldc);
using GemmMicroF64 = void (*)(int64_t, const double*, const double*, double*, int64_t);
// One copy by name ("baseline", "avx2"), for tests; nullptr where this CPU cannot run it.
GemmMicroF64 gemm_micro_f64_variant(const char* isa);

template <typename Acc>
inline void gemm_micro(int64_t kc, const Acc* __restrict a, const Acc* __restrict b,
                       Acc* __restrict c, int64_t ldc) {
  if constexpr (std::is_same_v<Acc, double>) gemm_micro_f64(kc, a, b, c, ldc);
  else gemm_micro_body(kc, a, b, c, ldc);
}
}  // namespace detail

// C = A·B from packed operands (A [M,K], B [K,N]). Output tiles run in parallel; within a tile
// the k range is blocked for the caches, but every C element still sums its k terms in order
// 0..K-1, so the result is independent of tiling and thread count. For each finished row
// segment, emit(i, j0, n, const Acc* sums) is called (from worker threads; it must not throw).
template <typename Acc, typename Emit>
void gemm_packed(const Acc* A, const Acc* B, int64_t M, int64_t K, int64_t N, Emit&& emit) {
  constexpr int64_t MC = 64, NC = 128, KC = 256;
  if (M == 0 || N == 0) return;
  const int64_t tiles_m = (M + MC - 1) / MC, tiles_n = (N + NC - 1) / NC;
  const int64_t tiles = tiles_m * tiles_n;
  const bool parallel = tiles > 1 && M * N * std::max<int64_t>(K, 1) > (1 << 15);
  // One C tile per thread, allocated here: nothing inside the region may throw.
  std::vector<Acc> ctiles(size_t((parallel ? omp_get_max_threads() : 1) * MC * NC));
#pragma omp parallel if (parallel)
  {
    Acc* ctile = ctiles.data() + (parallel ? omp_get_thread_num() : 0) * MC * NC;
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t i0 = (t / tiles_n) * MC, j0 = (t % tiles_n) * NC;
      const int64_t mc = std::min(MC, M - i0), nc = std::min(NC, N - j0);
      std::fill(ctile, ctile + MC * NC, Acc(0));
      for (int64_t k0 = 0; k0 < K; k0 += KC) {
        const int64_t kc = std::min(KC, K - k0);
        for (int64_t jj = 0; jj < nc; jj += kGemmNR) {
          const Acc* bp = B + ((j0 + jj) / kGemmNR) * K * kGemmNR + k0 * kGemmNR;
          for (int64_t ii = 0; ii < mc; ii += kGemmMR) {
            const Acc* ap = A + ((i0 + ii) / kGemmMR) * K * kGemmMR + k0 * kGemmMR;
            detail::gemm_micro(kc, ap, bp, ctile + ii * NC + jj, NC);
          }
        }
      }
      for (int64_t ii = 0; ii < mc; ++ii) emit(i0 + ii, j0, nc, ctile + ii * NC);
    }
  }
}

// Products with at most this many rows of A skip packing (gemm_small_m).
inline constexpr int64_t kGemmSmallM = 4;

// C = A·B for a few rows of A (M <= kGemmSmallM: a batch-1 Linear layer), straight from the
// operands, A[i,k] = a[i*ars + k*acs] and B[k,n] = b[k*brs + n*bcs]. Packing B would convert
// every one of its K*N elements to reach only M products each: for M = 1 that cost more than the
// product. Every sum still runs k = 0..K-1 in order from 0, as in gemm_packed, so both paths and
// every thread count give the same bits. emit as in gemm_packed (it must not throw).
template <typename Acc, typename T, typename Emit>
void gemm_small_m(const T* a, int64_t ars, int64_t acs, const T* b, int64_t brs, int64_t bcs,
                  int64_t M, int64_t K, int64_t N, Emit&& emit) {
  constexpr int64_t NB = 8;  // outputs summed side by side: independent chains for the FPU
  const int64_t blocks = (N + NB - 1) / NB;
  const bool parallel = blocks > 1 && M * N * std::max<int64_t>(K, 1) > (1 << 15);
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t q = 0; q < blocks; ++q) {
    const int64_t j0 = q * NB, n = std::min(NB, N - j0);
    for (int64_t i = 0; i < M; ++i) {
      Acc acc[NB] = {};
      const T* ai = a + i * ars;
      const T* bj = b + j0 * bcs;
      if (n == NB) {
        for (int64_t k = 0; k < K; ++k) {
          const Acc av = to_acc<Acc>(ai[k * acs]);
          const T* bk = bj + k * brs;
#pragma GCC unroll 8
          for (int64_t s = 0; s < NB; ++s) acc[s] += av * to_acc<Acc>(bk[s * bcs]);
        }
      } else {
        for (int64_t k = 0; k < K; ++k) {
          const Acc av = to_acc<Acc>(ai[k * acs]);
          for (int64_t s = 0; s < n; ++s) acc[s] += av * to_acc<Acc>(bj[k * brs + s * bcs]);
        }
      }
      emit(i, j0, n, static_cast<const Acc*>(acc));
    }
  }
}

template <typename Acc, typename Emit>
void gemm_packed(const PackedMatrix<Acc>& A, const PackedMatrix<Acc>& B, Emit&& emit) {
  TERRACE_ASSERT(B.rows == A.cols, "gemm: inner dimensions differ");
  gemm_packed(A.data(), B.data(), A.rows, A.cols, B.cols, emit);
}

}  // namespace terrace::ops
