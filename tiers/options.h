// Options: what a Session may do (tiers, thresholds, validation, threads, cache).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace terrace {

class Trace;    // tiers/trace.h
class Backend;  // tiers/backend.h

// The built-in tiers; a plug-in tier (Options::extra_tiers) takes a number above them, below
// kMaxTiers.
enum class Tier { Interp = 0, Cpu = 1, Gpu = 2 };
inline constexpr int kMaxTiers = 8;
const char* tier_name(Tier t);  // "interp", "cpu", "gpu", then "tier3" ...

enum class ValidateMode { Off, First, Always };

// The graph optimizer's level (tiers/passes/pipeline.h), as ONNX Runtime's levels go.
//   None:     the graph runs as loaded.
//   Basic:    constant and shape folding, no-op removal (Identity, inference Dropout, Reshape to
//             the same shape, ...), dead code: answers bitwise those of the loaded graph.
//   Extended: Basic, and BatchNormalization folded into the Conv or Gemm before it: answers
//             differ by rounding only, within ARCHITECTURE.md's tolerances.
enum class OptimizeLevel { None = 0, Basic = 1, Extended = 2 };

// Presets, named as torch.compile's modes; what each does today (Options::resolved applies it):
//   Default:        the fields as set.
//   ReduceOverhead: less time before compiled code serves: a region is compiled after its first
//                   call (hot_threshold 1), climbs to the next tier after at most 2 calls on
//                   the one below (climb_threshold), and a new version is shadow-validated on 1 call (validate_calls
//                   at most 1; continuous re-checks stay). Compiled answers are still checked.
//   MaxAutotune:    Default, and tier 2 times the heuristic's first 8 cuBLASLt algorithms of every
//                   product while compiling it, keeping a faster one (cuDNN's are timed in every
//                   mode); both kept as tuning records (jit/tuning.h). On the zoo (H200) the first
//                   won every product: bench/RESULTS.md.
// $TERRACE_MODE (default|reduce-overhead|max-autotune).
// Once every step of one input signature runs compiled versions that are validated and at the top
// of their climb, calls with that signature run a call plan (tiers/call_plan.h) instead of
// dispatching region by region (Steps), and a tier may take the plan whole (Whole: tier 2 captures
// it as one CUDA graph). $TERRACE_CALL_PLANS (off|steps|whole).
enum class CallPlanMode { Off = 0, Steps = 1, Whole = 2 };

enum class Mode { Default = 0, ReduceOverhead = 1, MaxAutotune = 2 };
const char* mode_name(Mode m);  // "default", "reduce-overhead", "max-autotune"

struct Options {
  Tier max_tier = Tier::Gpu;    // the highest tier regions may be promoted to
  int hot_threshold = 2;        // calls with one input signature before promotion to tier 1
  // Calls served on one compiled tier before a region climbs to the next (tier 2, plug-in tiers).
  int climb_threshold = 20;
  ValidateMode validate = ValidateMode::First;
  int validate_calls = 3;       // shadow-validated calls after each promotion
  // Continuous validation (with validate = First): after those calls, later calls of a compiled
  // version are re-checked against the interpreter on a background thread, as many as keep the
  // interpreter's time under this fraction of the version's own run time (measured: 1% costs
  // ResNet-50 no visible time on 2 cores, bench/RESULTS.md);
  // a mismatch demotes the version for the calls after it. 0 turns it off. $TERRACE_RECHECK.
  double recheck_budget = 0.01;
  int max_specializations = 8;  // compiled versions per region; also call plans per session
  // Distinct input signatures of a region, differing in one dim, after which it compiles one
  // symbolic version (that dim a kernel parameter: tiers/symbolic_lowering.h) for the sizes with no
  // exact version; exact versions are then compiled only for hot sizes (a quarter of the calls).
  // 0: static versions only. $TERRACE_SYMBOLIC_AFTER.
  int symbolic_after = 3;
  CallPlanMode call_plans = CallPlanMode::Whole;
  // OpenMP threads a call runs with (the interpreter's and tier 1's parallel work); 0: OMP_NUM_THREADS
  // if set, else chosen per session by measurement between all cores and one (adapt_threads).
  int interp_threads = 0;
  // With interp_threads 0 and OMP_NUM_THREADS unset: time calls on all cores and on one thread and
  // run the faster (tiers/thread_tuner.h: a loaded machine makes every OpenMP join wait for a
  // descheduled worker). Off: all cores, as before. $TERRACE_ADAPT_THREADS (on|off).
  bool adapt_threads = true;
  // The bodies of If, Loop and Scan run as plans of their own (tiers/body_plans.h): their regions
  // compiled, guarded and validated like the graph's, so that the work inside a branch (silero
  // VAD's LSTM and convolutions, chosen by its sample rate) is not interpreted. Off: the
  // interpreter runs every body. $TERRACE_COMPILE_BODIES (on|off).
  bool compile_bodies = true;
  // A climb is judged by the calls it serves: once a signature's calls run a plan on a higher tier,
  // their median time is compared with the plan below's; clearly slower (call_plan.h says by how
  // much), the higher versions are taken out of service and the region stays below, the report
  // saying why. Off: every region climbs as far as it can. $TERRACE_JUDGE_CLIMBS (on|off).
  bool judge_climbs = true;
  int compile_threads = 1;      // background compile threads
  // How long a session's destructor waits for a compile still running before it abandons it (the
  // compile ends on its own thread and its result is dropped): a compile cannot be interrupted.
  int compile_wait_ms = 2000;
  // The most nodes one region holds (0: no limit); larger fusible stretches become several
  // regions, so that no compile takes long (partition.h; measured in bench/RESULTS.md).
  int max_region_nodes = 64;
  // Partition as a session whose ladder reaches this tier does (each built-in tier's fusion rule up
  // to it applies) even where a tier cannot run here: `terrace compile --tier gpu` fills a cache
  // for a GPU the machine may not have. Interp: the ladder's own tiers only.
  Tier plan_for = Tier::Interp;
  // Plug-in tiers above the built-in ones that max_tier allows (tier 1 at least), lowest first,
  // each a factory of its Backend: a region climbs to each from the tier below as it climbs to
  // tier 2 (Backend::promotion_threshold). Nothing else in the session changes for them (the
  // tests' fake tier is one).
  std::vector<std::function<std::unique_ptr<Backend>()>> extra_tiers;
  std::string cache_dir;        // empty: $TERRACE_CACHE_DIR or ~/.cache/terrace
  // The graph optimizer's level before partitioning; $TERRACE_OPTIMIZE (none|basic|extended).
  // Extended by default: as ONNX Runtime's default (all levels), since a BatchNormalization left
  // unfolded costs a pass over its activations and a graph break, and its folding changes
  // answers by rounding only (every tier is validated against the interpreter running the same
  // optimized graph).
  OptimizeLevel optimize = OptimizeLevel::Extended;

  // Interpreter only (torch.compile's disable): max_tier = Tier::Interp, or $TERRACE_MAX_TIER=interp.
  // Nothing is compiled; every node runs in the interpreter.

  // The preset above; $TERRACE_MODE.
  Mode mode = Mode::Default;
  // torch.compile's fullgraph: loading fails with Error(NotImplemented) listing every graph break
  // (a node no compiled tier takes) with its reason, instead of running those nodes in the
  // interpreter. $TERRACE_STRICT=1.
  bool strict = false;
  // A Chrome trace of the session (tiers/trace.h): calls, region executions with their tier,
  // compiles on their background threads, validations, deopts, transfers; written when the
  // session is destroyed or on Session::write_profile. Sessions of one process given the same
  // file record into one trace (Trace::for_file). Empty: off. $TERRACE_PROFILE.
  std::string profile_file;
  // The recorder: made by the session from profile_file when null; a caller may set one to share
  // a trace between sessions.
  std::shared_ptr<Trace> trace;

  // Options with TERRACE_MAX_TIER, TERRACE_CACHE_DIR, TERRACE_RECHECK, TERRACE_OPTIMIZE,
  // TERRACE_MODE, TERRACE_STRICT, TERRACE_ADAPT_THREADS, TERRACE_COMPILE_BODIES,
  // TERRACE_JUDGE_CLIMBS, TERRACE_SYMBOLIC_AFTER and TERRACE_PROFILE applied over the defaults.
  static Options from_env();
  // These options with `mode` applied to the fields it sets (what a session runs with).
  Options resolved() const;
};

}  // namespace terrace
