// The double GEMM micro-kernel, compiled twice: the interpreter is built for x86-64-v2 (SSE4.2)
// so that it runs anywhere, and this one loop also gets an AVX2 copy, picked once at run time on
// CPUs that have it. The interpreter builds with -ffp-contract=off, so both copies multiply and
// add separately and give identical results (tests/ops_reduce_linalg checks it bitwise).
// The choice is an explicit function pointer, not GCC's target_clones: an ifunc resolver runs
// before sanitizer runtimes start (a ThreadSanitizer build crashed in it at load), and the
// baseline copy could not be called on a machine with AVX2 to test it.
#include <cstdlib>
#include <cstring>

#include "interp/ops/linalg_gemm.h"

namespace terrace::ops::detail {
namespace {

void micro_baseline(int64_t kc, const double* __restrict a, const double* __restrict b, double* __restrict c,
                    int64_t ldc) {
  gemm_micro_body<double>(kc, a, b, c, ldc);
}

#if defined(__x86_64__) && defined(__GNUC__)
#define TERRACE_GEMM_AVX2 1
__attribute__((target("avx2"))) void micro_avx2(int64_t kc, const double* __restrict a, const double* __restrict b,
                                                double* __restrict c, int64_t ldc) {
  gemm_micro_body<double>(kc, a, b, c, ldc);
}
#endif

GemmMicroF64 pick() {
#ifdef TERRACE_GEMM_AVX2
  if (__builtin_cpu_supports("avx2")) return micro_avx2;
#endif
  return micro_baseline;
}

}  // namespace

GemmMicroF64 gemm_micro_f64_variant(const char* isa) {
  if (std::strcmp(isa, "baseline") == 0) return micro_baseline;
#ifdef TERRACE_GEMM_AVX2
  if (std::strcmp(isa, "avx2") == 0) return __builtin_cpu_supports("avx2") ? micro_avx2 : nullptr;
#endif
  return nullptr;
}

void gemm_micro_f64(int64_t kc, const double* __restrict a, const double* __restrict b, double* __restrict c,
                    int64_t ldc) {
  static const GemmMicroF64 micro = pick();
  micro(kc, a, b, c, ldc);
}

}  // namespace terrace::ops::detail
