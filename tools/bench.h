// terrace bench's core, for the CLI (tools/cmd_bench.cpp) and the Python module alike: a model run
// from a cold start, its warm-up timeline, the steady state against an interpreter baseline, the
// break-even call, and the last call's outputs checked against the baseline's.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "interp/compare.h"
#include "tools/cli_util.h"
#include "tools/model_source.h"

namespace terrace::cli {

struct BenchSpec {
  ModelSource model;
  Options options = Options::from_env();  // max_tier: the highest tier to use, already one available here
  int64_t calls = 20;
  int64_t baseline_calls = -1;  // -1: min(calls, 20)
  int64_t steady_calls = 0;     // calls to run after the warm-up, beyond `calls` if need be
  double duration_s = 0;        // > 0: call for this long instead of `calls` times
  int64_t concurrency = 1;      // threads calling the one session at once
  // Inputs copied to tier 2's device once and outputs left there (ONNX Runtime's IoBinding), as a
  // caller whose data lives on the GPU runs: the calls time no host<->device copy of the model's
  // inputs and outputs (the GPU peers in bench/compare.py keep theirs on the device too).
  bool device_io = false;
  // The inputs of every call, made once the model is loaded (from its graph).
  std::function<NamedTensors(const Graph&)> inputs;
  std::vector<std::pair<std::string, std::string>> expect_files;  // {output, .npy or .pb file}
  // Varying traffic (--input-sets): the calls cycle through these sets, `rounds` times over (calls
  // = rounds x sets), each call's outputs checked against its set's expected ones where it has
  // them; the interpreter baseline runs the last set.
  struct InputSet {
    std::string name;
    NamedTensors inputs, expected;
  };
  std::vector<InputSet> input_sets;
  int64_t rounds = 1;
};

// One round through BenchSpec::input_sets.
struct RoundStats {
  int64_t calls = 0;
  int compiles = 0;  // versions published while its calls ran
  double median_ms = 0;
  std::vector<std::string> mismatches;  // "<set> output '<name>': <why>"
};

// A region as the benchmark sees it: from Session::region_reports, plus the first call that could
// use its compiled code (polled after every call, since the report knows only the trigger call).
struct RegionTimeline {
  int64_t id = 0;
  std::string ops, tier, state;
  double compile_ms = 0, tune_ms = 0;  // every compile's time, and the part of it spent tuning
  double validate_ms = 0;              // calls' time shadow-validating its new versions
  int64_t promoted_at_call = -1;  // the call that triggered the compile
  int64_t ready_at_call = -1;     // the first call after the compiled version was published
  int64_t changed_at_call = -1;   // the first call after its tier last changed (e.g. cpu -> gpu)
};

struct TimedRun {
  double load_ms = 0;
  std::vector<CallRecord> calls;
  std::vector<RegionTimeline> regions;
  NamedTensors outputs;  // the last call's
  std::string report_json;
  std::string threads;  // the team the session's calls ended on, and why (Session::threads_report)
  int validate_calls = 0;  // shadow-validated calls after each promotion
  double peak_mb = -1;     // the process's peak RSS when the run ended (peak_rss_mb)
  std::vector<double> done_at_ms;  // when each call ended (from the first call's start), in the order they ended
  std::vector<RoundStats> rounds;  // BenchSpec::input_sets' rounds
};

struct Stats {
  int64_t first_call = 0, count = 0;
  double median = 0, p90 = 0, p99 = 0, mean = 0, min = 0, max = 0;
  double per_s = 0;  // calls ended per second over those calls (with concurrency, several at once)
};

struct Check {
  std::string output, against;  // "interp" or the --expect file
  Comparison result;
  std::string line;  // what the CLI prints for it ("check y: DIFFERS from ..."), or ""
};

// From the first call's start to the steady state's first call (steady_from), and the work done
// by then: compiles (background, so beside the calls), the part of them spent tuning, the calls'
// shadow validation, and the calls themselves.
struct SteadyTime {
  bool reached = false;  // false: the run ended first (the figures are the run's)
  int64_t call = 0;      // the steady state's first call
  double ms = 0;
  double compile_ms = 0, tune_ms = 0, validate_ms = 0, calls_ms = 0;
};

struct BenchResult {
  NamedTensors inputs;
  TimedRun run, base;  // the tiered run and the interpreter baseline (the same, on the interpreter)
  Stats steady, base_steady;
  std::optional<int64_t> break_even;  // none: never within the run
  SteadyTime to_steady;
  std::vector<Check> checks;
  bool passed() const;  // every check equal
};

// Runs the benchmark: a cold session, then the baseline's. Errors of loading or calling propagate.
BenchResult run_bench(const BenchSpec& spec);

// Every tier any call of the run ran on, lowest first.
std::vector<std::string> tiers_ran(const TimedRun& run);
// "interp+cpu".
std::string joined(const std::vector<std::string>& parts);

// The whole result as `terrace bench --json` writes it (tools/plot_bench.py's and bench/compare.py's schema).
std::string bench_json(const BenchSpec& spec, const BenchResult& r);

}  // namespace terrace::cli
