// The double GEMM micro-kernel, cloned per instruction set: the interpreter is built for
// x86-64-v2 (SSE4.2) so that it runs anywhere, and this one loop gets an AVX2 copy that the
// dynamic loader picks on CPUs that have it. The interpreter builds with -ffp-contract=off, so
// both copies multiply and add separately and give identical results.
#include "interp/ops/linalg_gemm.h"

namespace terrace::ops::detail {

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx2", "default")))
#endif
void gemm_micro_f64(int64_t kc, const double* __restrict a, const double* __restrict b,
                    double* __restrict c, int64_t ldc) {
  gemm_micro_body<double>(kc, a, b, c, ldc);
}

}  // namespace terrace::ops::detail
