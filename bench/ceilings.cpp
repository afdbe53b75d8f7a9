// Measures the machine's memory-bandwidth and GEMM ceilings (best of a few runs each).
#include "bench/ceilings.h"

#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

namespace terrace::bench {

namespace {

// The best (shortest) wall time of `reps` runs of `fn`, in seconds.
double best_seconds(int reps, const std::function<void()>& fn) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

double measure_copy() {
  constexpr size_t kBytes = size_t(256) << 20;  // far beyond any last-level cache
  std::vector<char> src(kBytes, 1), dst(kBytes, 0);
  // One contiguous chunk per thread: a single thread cannot saturate the memory system.
  double s = best_seconds(5, [&] {
#pragma omp parallel
    {
      size_t n = size_t(omp_get_num_threads()), t = size_t(omp_get_thread_num());
      size_t lo = kBytes * t / n, hi = kBytes * (t + 1) / n;
      std::memcpy(dst.data() + lo, src.data() + lo, hi - lo);
    }
  });
  return 2.0 * double(kBytes) / s;
}

double measure_gemm() {
  constexpr int64_t n = 2048;
  std::vector<float> a(size_t(n * n), 0.5f), b(size_t(n * n), 0.25f), c(size_t(n * n));
  auto sgemm = [&] {
    dnnl_status_t st = dnnl_sgemm('N', 'N', n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);
    if (st != dnnl_success) std::fprintf(stderr, "ceilings: dnnl_sgemm failed (%d)\n", int(st));
  };
  sgemm();  // oneDNN picks and JITs its kernel on the first call
  return 2.0 * double(n) * double(n) * double(n) / best_seconds(3, sgemm);
}

}  // namespace

const Ceilings& machine_ceilings() {
  static const Ceilings c = [] {
    Ceilings m{measure_copy(), measure_gemm()};
    std::fprintf(stderr, "ceilings: copy %.2f GB/s (read+write), oneDNN sgemm %.1f GFLOP/s, %d threads\n",
                 m.copy_bytes_per_s / 1e9, m.gemm_flop_per_s / 1e9, omp_get_max_threads());
    return m;
  }();
  return c;
}

}  // namespace terrace::bench
