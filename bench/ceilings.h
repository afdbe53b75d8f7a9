// The machine's own ceilings, measured: memory bandwidth (a large copy) and GEMM FLOP/s (oneDNN).
// Micro-benchmarks report their throughput as a fraction of these.
#pragma once

namespace terrace::bench {

struct Ceilings {
  double copy_bytes_per_s = 0;  // bytes read + written per second by a parallel memcpy of 256 MiB
  double gemm_flop_per_s = 0;   // 2*M*N*K per second of oneDNN's sgemm at 2048^3
};

// Measured on first use (about a second), then cached; printed to stderr once.
const Ceilings& machine_ceilings();

}  // namespace terrace::bench
