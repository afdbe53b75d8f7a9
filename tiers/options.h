// Options: what a Session may do (tiers, thresholds, validation, threads, cache).
#pragma once
#include <string>

namespace terrace {

enum class Tier { Interp = 0, Cpu = 1, Gpu = 2 };
const char* tier_name(Tier t);  // "interp", "cpu", "gpu"

enum class ValidateMode { Off, First, Always };

// The graph optimizer's level (tiers/passes/pipeline.h), as ONNX Runtime's levels go.
//   None:     the graph runs as loaded.
//   Basic:    constant and shape folding, no-op removal (Identity, inference Dropout, Reshape to
//             the same shape, ...), dead code: answers bitwise those of the loaded graph.
//   Extended: Basic, and BatchNormalization folded into the Conv or Gemm before it: answers
//             differ by rounding only, within ARCHITECTURE.md's tolerances.
enum class OptimizeLevel { None = 0, Basic = 1, Extended = 2 };

struct Options {
  Tier max_tier = Tier::Gpu;    // the highest tier regions may be promoted to
  int hot_threshold = 2;        // calls with one input signature before promotion to tier 1
  int gpu_threshold = 20;       // calls on tier 1 before promotion to tier 2 (GPU present)
  ValidateMode validate = ValidateMode::First;
  int validate_calls = 3;       // shadow-validated calls after each promotion
  // Continuous validation (with validate = First): after those calls, later calls of a compiled
  // version are re-checked against the interpreter on a background thread, as many as keep the
  // interpreter's time under this fraction of the version's own run time (measured: 1% costs
  // ResNet-50 no visible time on 2 cores, bench/RESULTS.md);
  // a mismatch demotes the version for the calls after it. 0 turns it off. $TERRACE_RECHECK.
  double recheck_budget = 0.01;
  int max_specializations = 8;  // compiled versions per region
  int interp_threads = 0;       // OpenMP threads for the interpreter during run(); 0: OMP_NUM_THREADS or all cores
  int compile_threads = 1;      // background compile threads
  // How long a session's destructor waits for a compile still running before it abandons it (the
  // compile ends on its own thread and its result is dropped): a compile cannot be interrupted.
  int compile_wait_ms = 2000;
  // The most nodes one region holds (0: no limit); larger fusible stretches become several
  // regions, so that no compile takes long (partition.h; measured in bench/RESULTS.md).
  int max_region_nodes = 64;
  std::string cache_dir;        // empty: $TERRACE_CACHE_DIR or ~/.cache/terrace
  // The graph optimizer's level before partitioning; $TERRACE_OPTIMIZE (none|basic|extended).
  // Extended by default: as ONNX Runtime's default (all levels), since a BatchNormalization left
  // unfolded costs a pass over its activations and a graph break, and its folding changes
  // answers by rounding only (every tier is validated against the interpreter running the same
  // optimized graph).
  OptimizeLevel optimize = OptimizeLevel::Extended;

  // Options with TERRACE_MAX_TIER, TERRACE_CACHE_DIR, TERRACE_RECHECK and TERRACE_OPTIMIZE applied over the defaults.
  static Options from_env();
};

}  // namespace terrace
