// PackedWeights: the weights in panels, an AVX2/FMA micro-kernel, the blocking and the threads.
#include "jit/packed_gemm.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

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
// With the rows of C prefetched (micro_kernel), against 120-row blocks without: GPT-2's vocabulary
// projection 0.91, BERT's up, QKV, down and output projections 0.88, 0.92, 0.96, 0.97 of the time
// (medians of 30 alternating calls in one process, 2 threads, the 2-core AVX2 machine, sixteenth
// session). 768 deep rather than the 256 that would keep a panel in L1: every product of BERT's with
// 768 inputs then sums in registers from start to end, without writing C back after each block,
// and took 0.88-0.91 of the time (its up and QKV projections; 0.96-0.98 for the others; a driver
// alternating both blockings in one process on the 2-core AVX2 machine, fifteenth session).
constexpr int kNr = 16, kMr = 6;
constexpr int64_t kKc = PackedWeights::kDepthBlock, kMc = PackedWeights::kRowBlock, kPanelsPerPass = 16;

// c[r, 0..ncols) (+)= a[r, 0..kc) . panel for r < M: 2 * M accumulators of 8 floats, every
// element of A broadcast and multiplied into both. `first`: the first block of k, which writes c
// (adding the bias); later blocks add to it.
template <int M>
__attribute__((target("avx2,fma"))) void micro_kernel(int64_t kc, const float* a, int64_t lda, const float* b,
                                                      float* c, int64_t ldc, bool first, int ncols,
                                                      const float* bias) {
  // The accumulators as named variables, each row under `if constexpr`: an array indexed in a
  // loop was kept on the stack by GCC (a store per FMA, a third of the speed).
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00,
         c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  // Rows past M are never read; their pointers stay at row 0 (no pointer formed past A's end).
  const float *a0 = a, *a1 = M > 1 ? a + lda : a, *a2 = M > 2 ? a + 2 * lda : a, *a3 = M > 3 ? a + 3 * lda : a,
              *a4 = M > 4 ? a + 4 * lda : a, *a5 = M > 5 ? a + 5 * lda : a;
  // The first block of k writes this call's rows of C at the end: their lines are asked for now,
  // so that the misses (a large output is in no cache: GPT-2's 25.7 MB logits) overlap the sums.
  if (first)
    for (int r = 0; r < M; ++r) {
      _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc + ncols - 1), _MM_HINT_T0);
    }
#define TR_ROW(r)                                               \
  if constexpr (M > r) {                                        \
    const __m256 x = _mm256_broadcast_ss(a##r + k);             \
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
constexpr MicroKernel kKernels[kMr + 1] = {nullptr,          micro_kernel<1>, micro_kernel<2>, micro_kernel<3>,
                                           micro_kernel<4>, micro_kernel<5>, micro_kernel<6>};

}  // namespace

bool packed_gemm_supported() {
  static const bool cpu = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  const char* v = std::getenv("TERRACE_PACKED_GEMM");  // read at each build: tests switch it
  return cpu && !(v && std::string(v) == "0");
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

void PackedWeights::multiply(const float* a, int64_t m, const float* bias, float* c, int threads) const {
  if (m <= 0 || n_ <= 0) return;
  if (k_ == 0) {  // an empty sum: the bias, or zero
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n_; ++j) c[i * n_ + j] = bias ? bias[j] : 0.0f;
    return;
  }
  const int64_t k = k_, n = n_, panels = panels_;
  const float* packed = data_.get();
  const int64_t blocks = (m + kMc - 1) / kMc, block_rows = ((m + blocks - 1) / blocks + kMr - 1) / kMr * kMr;
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const int team = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t p0 = panels * t / team, p1 = panels * (t + 1) / team;
    for (int64_t jc = p0; jc < p1; jc += kPanelsPerPass) {
      const int64_t je = std::min(p1, jc + kPanelsPerPass);
      for (int64_t pc = 0; pc < k; pc += kKc) {
        const int64_t kc = std::min(kKc, k - pc);
        const float* block = packed + pc * panels * kNr;
        for (int64_t ic = 0; ic < m; ic += block_rows) {
          const int64_t ie = std::min(m, ic + block_rows);
          for (int64_t j = jc; j < je; ++j) {
            const int ncols = int(std::min<int64_t>(kNr, n - j * kNr));
            const float* panel_bias = bias ? bias + j * kNr : nullptr;
            for (int64_t i = ic; i < ie; i += kMr) {
              const int rows = int(std::min<int64_t>(kMr, ie - i));
              kKernels[rows](kc, a + i * k + pc, k, block + j * kc * kNr, c + i * n + j * kNr, n, pc == 0, ncols,
                             panel_bias);
            }
          }
        }
      }
    }
  }
}

}  // namespace terrace::jit
