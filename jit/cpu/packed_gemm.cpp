// PackedWeights: the weights in panels, an AVX2/FMA micro-kernel, the blocking and the threads.
#include "jit/cpu/packed_gemm.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "interp/env_flag.h"
#include "interp/error.h"

namespace terrace::jit {
namespace {

// A panel: 16 columns (two 8-float vectors) of a block of up to kKc rows of the weights, stored
// row by row (the 16 values the micro-kernel multiplies by one element of A are consecutive).
// Block p of the weights (rows [p kKc, ...)) holds every panel in turn, so that a thread's panels
// of one block are contiguous. kKc rows of a panel take 48 KB, streamed from L2 while the kernel
// runs down the rows of A; up to kMc rows of A by kKc (396 KB) stay in L2 while the thread's panels
// pass. The rows are split into blocks of equal size (a multiple of kMr), so that 128 rows (BERT's
// and GPT-2's) are one block, not 120 rows and then 8 for which every panel streams past again.
// The rows of C are prefetched (micro_kernel). 768 deep rather than the 256 that would keep a
// panel in L1: a product with 768 inputs (BERT's) then sums in registers from start to end,
// without writing C back after each block (both measured in bench/RESULTS.md).
constexpr int kNr = 16, kMr = 6;
constexpr int64_t kKc = PackedWeights::kDepthBlock, kMc = PackedWeights::kRowBlock, kPanelsPerPass = 16;

// c[r, 0..ncols) (+)= a[r, 0..kc) . panel for r < M: 2 * M accumulators of 8 floats, every
// element of A broadcast and multiplied into both. `first`: the first block of k, which writes c
// (adding the bias); later blocks add to it. A is read in place (row r at a + r lda), or, when
// `Packed`, from the team's copy, where element k of row r is at a[k M + r] (multiply, below).
template <int M, bool Packed>
__attribute__((target("avx2,fma"))) void micro_kernel(int64_t kc, const float* a, int64_t lda, const float* b,
                                                      float* c, int64_t ldc, bool first, int ncols,
                                                      const float* bias) {
  // The accumulators as named variables, each row under `if constexpr`: an array indexed in a
  // loop was kept on the stack by GCC (a store per FMA, a third of the speed).
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00,
         c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  // Rows past M are never read; their pointers stay at row 0 (no pointer formed past A's end).
  const int64_t next_row = Packed ? 1 : lda, stride = Packed ? M : 1;
  const float *a0 = a, *a1 = M > 1 ? a + next_row : a, *a2 = M > 2 ? a + 2 * next_row : a,
              *a3 = M > 3 ? a + 3 * next_row : a, *a4 = M > 4 ? a + 4 * next_row : a,
              *a5 = M > 5 ? a + 5 * next_row : a;
  // The first block of k writes this call's rows of C at the end: their lines are asked for now,
  // so that the misses (a large output is in no cache: GPT-2's 25.7 MB logits) overlap the sums.
  if (first)
    for (int r = 0; r < M; ++r) {
      _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc + ncols - 1), _MM_HINT_T0);
    }
#define TR_ROW(r)                                               \
  if constexpr (M > r) {                                        \
    const __m256 x = _mm256_broadcast_ss(a##r + k * stride);    \
    c##r##0 = _mm256_fmadd_ps(x, b0, c##r##0);                  \
    c##r##1 = _mm256_fmadd_ps(x, b1, c##r##1);                  \
  }
#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_load_ps(b + k * kNr), b1 = _mm256_load_ps(b + k * kNr + 8);
    TR_ROW(0) TR_ROW(1) TR_ROW(2) TR_ROW(3) TR_ROW(4) TR_ROW(5)
  }
#undef TR_ROW
  const __m256 acc[6][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
  if (ncols == kNr) {
    const __m256 bias0 = bias ? _mm256_loadu_ps(bias) : _mm256_setzero_ps();
    const __m256 bias1 = bias ? _mm256_loadu_ps(bias + 8) : _mm256_setzero_ps();
    for (int r = 0; r < M; ++r) {
      float* out = c + r * ldc;
      if (first) {
        _mm256_storeu_ps(out, _mm256_add_ps(acc[r][0], bias0));
        _mm256_storeu_ps(out + 8, _mm256_add_ps(acc[r][1], bias1));
      } else {
        _mm256_storeu_ps(out, _mm256_add_ps(_mm256_loadu_ps(out), acc[r][0]));
        _mm256_storeu_ps(out + 8, _mm256_add_ps(_mm256_loadu_ps(out + 8), acc[r][1]));
      }
    }
    return;
  }
  // The last panel of a width that is not a multiple of 16: its padding columns (zeros) computed,
  // not stored.
  alignas(32) float t[kNr];
  for (int r = 0; r < M; ++r) {
    _mm256_store_ps(t, acc[r][0]);
    _mm256_store_ps(t + 8, acc[r][1]);
    float* out = c + r * ldc;
    for (int j = 0; j < ncols; ++j) out[j] = first ? t[j] + (bias ? bias[j] : 0.0f) : out[j] + t[j];
  }
}

using MicroKernel = void (*)(int64_t, const float*, int64_t, const float*, float*, int64_t, bool, int, const float*);
constexpr MicroKernel kKernels[2][kMr + 1] = {
    {nullptr, micro_kernel<1, false>, micro_kernel<2, false>, micro_kernel<3, false>, micro_kernel<4, false>,
     micro_kernel<5, false>, micro_kernel<6, false>},
    {nullptr, micro_kernel<1, true>, micro_kernel<2, true>, micro_kernel<3, true>, micro_kernel<4, true>,
     micro_kernel<5, true>, micro_kernel<6, true>}};

// Relu as ONNX's (x < 0 ? 0 : x): max(0, x) returns x when x is NaN.
__attribute__((target("avx2,fma"))) inline __m256 relu8(__m256 x) { return _mm256_max_ps(_mm256_setzero_ps(), x); }
inline float relu1(float x) { return x < 0.0f ? 0.0f : x; }

// c[j .. j + 16 P) = a . panels j .. j + P (+ bias, then Relu): one row of A, as a batch-1 layer
// has (a GEMV, bound by reading the weights). The 6-row kernel's one row has two accumulators,
// which wait on the FMAs' latency: here P panels side by side, 2 P accumulators, each panel's
// values consecutive as that kernel reads them, summed over every depth block in registers.
template <int P>
__attribute__((target("avx2,fma"))) void row_kernel(const float* a, int64_t k, const float* packed, int64_t panels,
                                                    int64_t j, float* c, int64_t n, const float* bias, bool relu) {
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00;
  for (int64_t pc = 0; pc < k; pc += kKc) {
    const int64_t kc = std::min(kKc, k - pc);
    const float* b = packed + pc * panels * kNr + j * kc * kNr;  // panel j of this block; j + p follows at p kc kNr
    const float* ak = a + pc;
#define TR_PANEL(p)                                                                     \
  if constexpr (P > p) {                                                                \
    c##p##0 = _mm256_fmadd_ps(x, _mm256_load_ps(b + (p * kc + kk) * kNr), c##p##0);     \
    c##p##1 = _mm256_fmadd_ps(x, _mm256_load_ps(b + (p * kc + kk) * kNr + 8), c##p##1); \
  }
#pragma GCC unroll 4
    for (int64_t kk = 0; kk < kc; ++kk) {
      const __m256 x = _mm256_broadcast_ss(ak + kk);
      TR_PANEL(0) TR_PANEL(1) TR_PANEL(2) TR_PANEL(3)
    }
#undef TR_PANEL
  }
  const __m256 acc[4][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}};
  for (int p = 0; p < P; ++p) {
    const int64_t col = (j + p) * kNr;
    const int ncols = int(std::min<int64_t>(kNr, n - col));
    float* out = c + col;
    if (ncols == kNr) {
      __m256 v0 = acc[p][0], v1 = acc[p][1];
      if (bias) {
        v0 = _mm256_add_ps(v0, _mm256_loadu_ps(bias + col));
        v1 = _mm256_add_ps(v1, _mm256_loadu_ps(bias + col + 8));
      }
      if (relu) v0 = relu8(v0), v1 = relu8(v1);
      _mm256_storeu_ps(out, v0);
      _mm256_storeu_ps(out + 8, v1);
      continue;
    }
    alignas(32) float t[kNr];  // the last panel of a width that is not a multiple of 16
    _mm256_store_ps(t, acc[p][0]);
    _mm256_store_ps(t + 8, acc[p][1]);
    for (int q = 0; q < ncols; ++q) {
      const float v = t[q] + (bias ? bias[col + q] : 0.0f);
      out[q] = relu ? relu1(v) : v;
    }
  }
}

using RowKernel = void (*)(const float*, int64_t, const float*, int64_t, int64_t, float*, int64_t, const float*, bool);
constexpr int kRowPanels = 4;
constexpr RowKernel kRowKernels[kRowPanels + 1] = {nullptr, row_kernel<1>, row_kernel<2>, row_kernel<3>, row_kernel<4>};

// Copies a group's `count` rows of A (kc elements each, row r at a + r lda) interleaved: element kk
// of row r to to[kk count + r]. Eight elements of every row at a time, transposed in registers
// (rows past `count` read row 0 again), each element's `count` values stored with 8 - count more
// that the next element's store overwrites: a chunk is taken only where an element follows it
// (count >= 4, so the spill stays inside that element). A scalar copy took ~7% of the time of a
// 128 x 768 by 768 product.
__attribute__((target("avx2,fma"))) void copy_group(const float* a, int64_t lda, int count, int64_t kc, float* to) {
  int64_t kk = 0;
  if (count >= 4) {
    const float* row[8];
    for (int r = 0; r < 8; ++r) row[r] = a + (r < count ? r : 0) * lda;
    for (; kk + 8 < kc; kk += 8) {
      // The 8 x 8 transpose: pairs, then quads, then halves.
      const __m256 r0 = _mm256_loadu_ps(row[0] + kk), r1 = _mm256_loadu_ps(row[1] + kk),
                   r2 = _mm256_loadu_ps(row[2] + kk), r3 = _mm256_loadu_ps(row[3] + kk),
                   r4 = _mm256_loadu_ps(row[4] + kk), r5 = _mm256_loadu_ps(row[5] + kk),
                   r6 = _mm256_loadu_ps(row[6] + kk), r7 = _mm256_loadu_ps(row[7] + kk);
      const __m256 u0 = _mm256_unpacklo_ps(r0, r1), u1 = _mm256_unpackhi_ps(r0, r1), u2 = _mm256_unpacklo_ps(r2, r3),
                   u3 = _mm256_unpackhi_ps(r2, r3), u4 = _mm256_unpacklo_ps(r4, r5), u5 = _mm256_unpackhi_ps(r4, r5),
                   u6 = _mm256_unpacklo_ps(r6, r7), u7 = _mm256_unpackhi_ps(r6, r7);
      const __m256 v0 = _mm256_shuffle_ps(u0, u2, 0x44), v1 = _mm256_shuffle_ps(u0, u2, 0xee),
                   v2 = _mm256_shuffle_ps(u1, u3, 0x44), v3 = _mm256_shuffle_ps(u1, u3, 0xee),
                   v4 = _mm256_shuffle_ps(u4, u6, 0x44), v5 = _mm256_shuffle_ps(u4, u6, 0xee),
                   v6 = _mm256_shuffle_ps(u5, u7, 0x44), v7 = _mm256_shuffle_ps(u5, u7, 0xee);
      float* out = to + kk * count;
      _mm256_storeu_ps(out, _mm256_permute2f128_ps(v0, v4, 0x20));
      _mm256_storeu_ps(out + count, _mm256_permute2f128_ps(v1, v5, 0x20));
      _mm256_storeu_ps(out + 2 * count, _mm256_permute2f128_ps(v2, v6, 0x20));
      _mm256_storeu_ps(out + 3 * count, _mm256_permute2f128_ps(v3, v7, 0x20));
      _mm256_storeu_ps(out + 4 * count, _mm256_permute2f128_ps(v0, v4, 0x31));
      _mm256_storeu_ps(out + 5 * count, _mm256_permute2f128_ps(v1, v5, 0x31));
      _mm256_storeu_ps(out + 6 * count, _mm256_permute2f128_ps(v2, v6, 0x31));
      _mm256_storeu_ps(out + 7 * count, _mm256_permute2f128_ps(v3, v7, 0x31));
    }
  }
  for (; kk < kc; ++kk)
    for (int r = 0; r < count; ++r) to[kk * count + r] = a[r * lda + kk];
}

// A block's rows split into groups of at most kMr, as evenly as they go: 128 rows are 18 groups of
// 6 and 4 of 5, not 21 of 6 and one of 2, a group on which the kernel (4 accumulators) waits on its
// FMAs' latency and streams the panel from L2 three times as fast.
struct RowGroups {
  int64_t begin, count, groups;
  RowGroups(int64_t b, int64_t e) : begin(b), count(e - b), groups((e - b + kMr - 1) / kMr) {}
  int64_t start(int64_t q) const { return begin + count * q / groups; }
  int rows(int64_t q) const { return int(start(q + 1) - start(q)); }
};

}  // namespace

bool packed_gemm_supported() {
  static const bool cpu = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return cpu && env_flag("TERRACE_PACKED_GEMM", true);  // read at each build: tests switch it
}

void PackedWeights::Free::operator()(float* p) const { std::free(p); }

PackedWeights::PackedWeights(const float* b, int64_t k, int64_t n, bool transposed)
    : k_(k), n_(n), panels_((n + kNr - 1) / kNr) {
  TERRACE_CHECK(k >= 0 && n >= 0, InvalidArgument, "PackedWeights: negative dimensions");
  const size_t floats = size_t(panels_) * kNr * size_t(k);
  size_ = std::max<size_t>(64, (floats * sizeof(float) + 63) / 64 * 64);
  data_.reset(static_cast<float*>(std::aligned_alloc(64, size_)));
  if (!data_) fail(ErrorCode::OutOfMemory, "PackedWeights: ", size_, " bytes for packed weights");
  float* out = data_.get();
  for (int64_t pc = 0; pc < k; pc += kKc) {
    const int64_t kc = std::min(kKc, k - pc);
    for (int64_t j = 0; j < panels_; ++j)
      for (int64_t kk = 0; kk < kc; ++kk)
        for (int col = 0; col < kNr; ++col) {
          const int64_t nn = j * kNr + col, row = pc + kk;
          *out++ = nn >= n ? 0.0f : transposed ? b[nn * k + row] : b[row * n + nn];
        }
  }
}

size_t PackedWeights::rows_floats(int64_t m) const {
  // The copy pays for products of more rows than one micro-kernel takes over 32 panels or more; on
  // small ones the team's barrier and the copy cost more than the products (bench/RESULTS.md).
  const bool pays = m > kMr && panels_ >= 32;
  return pays ? size_t(m) * size_t(k_) : 0;
}

void PackedWeights::multiply(const float* a, int64_t m, const float* bias, float* c, int threads, float* rows,
                             bool relu) const {
  if (m <= 0 || n_ <= 0) return;
  if (k_ == 0) {  // an empty sum: the bias, or zero
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n_; ++j) {
        const float v = bias ? bias[j] : 0.0f;
        c[i * n_ + j] = relu ? relu1(v) : v;
      }
    return;
  }
  const int64_t k = k_, n = n_, panels = panels_;
  const float* packed = data_.get();
  if (m == 1) {  // the panels split between the team, kRowPanels at a time
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
      const int team = omp_get_num_threads(), t = omp_get_thread_num();
      const int64_t p0 = panels * t / team, p1 = panels * (t + 1) / team;
      for (int64_t j = p0; j < p1; j += kRowPanels)
        kRowKernels[std::min<int64_t>(kRowPanels, p1 - j)](a, k, packed, panels, j, c, n, bias, relu);
    }
    return;
  }
  const int64_t blocks = (m + kMc - 1) / kMc, block_rows = ((m + blocks - 1) / blocks + kMr - 1) / kMr * kMr;
  const MicroKernel* kernels = kKernels[rows ? 1 : 0];
  // The copy holds each depth block's m rows in turn, and in a block each group's rows interleaved
  // (element kk of the group's row r at kk rows + r): the kernel reads one stream of whole lines
  // instead of 6 rows 3 KB apart, and A's block sits in each thread's L2 more surely while the
  // panels pass (the team copies it once for all panels).
  auto copied = [&](int64_t pc, int64_t kc, int64_t i) { return rows + pc * m + i * kc; };
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const int team = omp_get_num_threads(), t = omp_get_thread_num();
    if (rows) {
      int64_t turn = 0;  // the groups dealt out in turn
      for (int64_t pc = 0; pc < k; pc += kKc) {
        const int64_t kc = std::min(kKc, k - pc);
        for (int64_t ic = 0; ic < m; ic += block_rows) {
          const RowGroups g(ic, std::min(m, ic + block_rows));
          for (int64_t q = 0; q < g.groups; ++q, ++turn) {
            if (turn % team != t) continue;
            const int64_t i = g.start(q);
            copy_group(a + i * k + pc, k, g.rows(q), kc, copied(pc, kc, i));
          }
        }
      }
#pragma omp barrier
    }
    const int64_t p0 = panels * t / team, p1 = panels * (t + 1) / team;
    for (int64_t jc = p0; jc < p1; jc += kPanelsPerPass) {
      const int64_t je = std::min(p1, jc + kPanelsPerPass);
      for (int64_t pc = 0; pc < k; pc += kKc) {
        const int64_t kc = std::min(kKc, k - pc);
        const float* block = packed + pc * panels * kNr;
        for (int64_t ic = 0; ic < m; ic += block_rows) {
          const RowGroups g(ic, std::min(m, ic + block_rows));
          for (int64_t j = jc; j < je; ++j) {
            const int ncols = int(std::min<int64_t>(kNr, n - j * kNr));
            const float* panel_bias = bias ? bias + j * kNr : nullptr;
            for (int64_t q = 0; q < g.groups; ++q) {
              const int64_t i = g.start(q);
              kernels[g.rows(q)](kc, rows ? copied(pc, kc, i) : a + i * k + pc, k, block + j * kc * kNr,
                                 c + i * n + j * kNr, n, pc == 0, ncols, panel_bias);
            }
          }
        }
      }
    }
    if (relu)  // this thread's columns, while they are in its cache
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = p0 * kNr, end = std::min(n, p1 * kNr); j < end; ++j) c[i * n + j] = relu1(c[i * n + j]);
  }
}

}  // namespace terrace::jit
