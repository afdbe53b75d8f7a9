// terrace bench: runs a model N times from a cold start and reports the warm-up timeline.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "tools/bench.h"
#include "tools/cli_util.h"
#include "tools/conformance.h"
#include "tools/data_files.h"
#include "tools/tensor_files.h"

namespace terrace::cli {

namespace {
struct BenchArgs {
  std::string model, json_path, plot_path;
  int64_t calls = 20;
  int64_t baseline_calls = -1;  // -1: min(calls, 20)
  int64_t steady_calls = 0;     // calls to run after the warm-up, beyond --calls if need be
  int64_t batch = 0;            // 0: not given, random inputs get batch 1
  double duration_s = 0;        // > 0: call for this long instead of --calls times
  int64_t concurrency = 1;      // threads calling the one session at once
  bool quiet = false;
  bool device_io = false;
  std::vector<std::pair<std::string, std::string>> expect_files;
  ParsedArgs args;  // --input's files are read against the model's graph, once it is loaded
  Options options = Options::from_env();
};

// --duration's value: seconds above 0, "2.5" or "2.5s".
double parse_duration(const std::string& text) {
  char* end = nullptr;
  const double s = std::strtod(text.c_str(), &end);
  const bool ok = !text.empty() && end != text.c_str() && (*end == 0 || (end[0] == 's' && end[1] == 0));
  if (!ok || !std::isfinite(s) || s <= 0 || s > 1e6)
    throw UsageError{"--duration expects seconds above 0 (such as 10 or 2.5), got '" + text + "'"};
  return s;
}

BenchArgs parse_bench_args(const ParsedArgs& args) {
  BenchArgs b;
  b.model = args.operands[0];
  b.args = args;
  if (auto v = args.get("--calls")) b.calls = parse_positive("--calls", *v);
  if (auto v = args.get("--duration")) b.duration_s = parse_duration(*v);
  if (args.get("--calls") && args.get("--duration"))
    throw UsageError{"--calls and --duration both say how long to run: give one"};
  if (auto v = args.get("--concurrency")) b.concurrency = parse_positive("--concurrency", *v);
  if (auto v = args.get("--steady-calls")) b.steady_calls = parse_count("--steady-calls", *v);
  if (auto v = args.get("--baseline-calls")) b.baseline_calls = parse_positive("--baseline-calls", *v);
  if (auto v = args.get("--batch")) b.batch = parse_positive("--batch", *v);
  bool asked = tier_from_env();
  if (auto v = args.get("--tier")) b.options.max_tier = parse_tier(*v), asked = true;
  b.options.max_tier = effective_tier("bench", b.options.max_tier, asked);
  apply_session_options(args, b.options);
  b.expect_files = assignments(args, "--expect");
  b.json_path = args.get("--json").value_or("");
  b.plot_path = args.get("--plot").value_or("");
  if (args.get("--json") && b.json_path.empty()) throw UsageError{"--json needs a file name"};
  if (args.get("--plot") && b.plot_path.empty()) throw UsageError{"--plot needs a file name"};
  b.quiet = args.has("--quiet");
  b.device_io = args.has("--device-io");
  if (b.device_io && b.options.max_tier != Tier::Gpu)
    throw UsageError{std::string("--device-io binds inputs and outputs on tier 2's device: it needs --tier gpu on a "
                     "machine with a GPU; this run's highest tier is ") + tier_name(b.options.max_tier)};
  if (b.baseline_calls < 0) b.baseline_calls = std::min<int64_t>(b.calls, 20);
  // A zoo folder stands for its model.onnx.
  if (std::filesystem::is_directory(b.model)) b.model += "/model.onnx";
  return b;
}

// Random inputs (the symbolic dim `batch` set by --batch), each replaced by --input's file.
NamedTensors bench_inputs(const Graph& graph, const BenchArgs& b) {
  std::vector<std::pair<std::string, int64_t>> dims;
  if (b.batch > 0) dims.emplace_back("batch", b.batch);
  check_dim_names(graph, dims, "--batch");
  for (auto& [n, v] : assignments(b.args, "--dim")) dims.emplace_back(n, parse_count("--dim " + n, v));
  check_dim_names(graph, dims);
  for (auto& [name, file] : b.expect_files) {
    bool found = false;
    for (int id : graph.outputs) found = found || graph.values[size_t(id)].name == name;
    if (!found) throw UsageError{"--expect names '" + name + "', which is not a graph output"};
  }
  NamedTensors inputs = random_inputs(graph, 42, dims, parse_shapes(b.args, graph));
  for (auto& [name, t] : input_files(b.args, graph)) {
    auto it = std::find_if(inputs.begin(), inputs.end(), [&](auto& p) { return p.first == name; });
    it->second = t;
  }
  return inputs;
}

// --input-sets: DIR's data sets as named tensors (inputs, and the expected outputs they have).
std::vector<BenchSpec::InputSet> input_sets(const Graph& graph, const std::string& dir) {
  std::vector<BenchSpec::InputSet> out;
  for (const conformance::DataSet& set : conformance::load_data_sets(graph, dir)) {
    BenchSpec::InputSet s{set.name, {}, {}};
    auto add = [&](const std::vector<RValue>& values, const std::vector<int>& ids, NamedTensors& to) {
      for (size_t i = 0; i < values.size(); ++i) {
        const std::string& name = graph.values[size_t(ids[i])].name;
        if (values[i].kind != ValueKind::Tensor)
          throw UsageError{"--input-sets: " + set.name + "'s '" + name + "' is a sequence or optional; bench takes tensors"};
        if (values[i].tensor.defined()) to.emplace_back(name, values[i].tensor);
      }
    };
    add(set.inputs, graph.inputs, s.inputs);
    add(set.outputs, graph.outputs, s.expected);
    out.push_back(std::move(s));
  }
  return out;
}

void print_timeline(const TimedRun& run) {
  const auto& calls = run.calls;
  for (size_t i = 0; i < calls.size(); ++i) {
    // Long runs show the start, every change of tiers and the end.
    bool changed = i > 0 && calls[i].tiers != calls[i - 1].tiers;
    bool show = calls.size() <= 30 || i < 5 || changed || i + 1 == calls.size();
    if (!show) {
      if (i > 0 && (i == 5 || changed)) std::printf("   ...\n");
      continue;
    }
    std::printf("call %4lld  %10.3f ms  [%s]\n", (long long)calls[i].index, calls[i].ms, joined(calls[i].tiers).c_str());
  }
  for (auto& r : run.regions) {
    std::printf("region %lld [%s]: %s, %s, compile %.1f ms", (long long)r.id, r.ops.c_str(), r.tier.c_str(),
                r.state.c_str(), r.compile_ms);
    if (r.promoted_at_call >= 0) std::printf(", promoted at call %lld", (long long)r.promoted_at_call);
    if (r.ready_at_call >= 0) std::printf(", ready from call %lld", (long long)r.ready_at_call);
    std::printf("\n");
  }
}

// Compiles run in the background, beside the calls: their sum may pass the wall time.
void print_time_to_steady(const SteadyTime& t) {
  if (t.reached) std::printf("time to steady state: %.1f ms (to call %lld)", t.ms, (long long)t.call);
  else std::printf("time to steady state: not reached within the run's %lld calls (%.1f ms)", (long long)t.call, t.ms);
  std::printf("; work by then: compiles %.1f ms and tuning %.1f ms (background), shadow validation %.1f ms, "
              "calls %.1f ms\n", t.compile_ms, t.tune_ms, t.validate_ms, t.calls_ms);
}

void print_summary(const BenchArgs& b, const BenchResult& r) {
  const TimedRun& run = r.run;
  const Stats &steady = r.steady, &base_steady = r.base_steady;
  const std::optional<int64_t>& even = r.break_even;
  std::printf("load %.1f ms, first call %.3f ms, time to first result %.1f ms\n", run.load_ms,
              run.calls[0].ms, run.load_ms + run.calls[0].ms);
  if (b.options.max_tier != Tier::Interp) print_time_to_steady(r.to_steady);
  if (b.concurrency > 1 || b.duration_s > 0)
    std::printf("%lld calls in %.3g s from %lld thread%s\n", (long long)run.calls.size(),
                run.done_at_ms.empty() ? 0.0 : run.done_at_ms.back() / 1e3, (long long)b.concurrency,
                b.concurrency > 1 ? "s" : "");
  std::printf("steady state (calls %lld.., n=%lld): p50 %.3f ms, p90 %.3f ms, p99 %.3f ms, min %.3f ms, max %.3f ms; "
              "%.1f calls/s\n", (long long)steady.first_call, (long long)steady.count, steady.median, steady.p90,
              steady.p99, steady.min, steady.max, steady.per_s);
  std::printf("threads: %s\n", run.threads.c_str());
  std::printf("interpreter: p50 %.3f ms (n=%lld); speedup %.2fx\n", base_steady.median,
              (long long)base_steady.count, base_steady.median / steady.median);
  if (even) std::printf("break-even: call %lld (compile time included)\n", (long long)*even);
  else std::printf("break-even: never within %zu calls (compile time included)\n", run.calls.size());
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs tools/plot_bench.py (installed, or the source tree's) on the JSON; it writes FILE and FILE
// with an .svg extension.
void plot(const std::string& json_path, const std::string& plot_path) {
  std::vector<std::string> looked;
  const std::string script = cli::data_file("plot_bench.py", "tools/plot_bench.py", &looked).string();
  if (script.empty()) {
    std::string where;
    for (const std::string& p : looked) where += (where.empty() ? "" : ", ") + p;
    fail(ErrorCode::IoError, "--plot needs plot_bench.py, found in none of: ", where);
  }
  std::string cmd = "/usr/bin/python3 " + shell_quote(script) + " " + shell_quote(json_path) + " --out " +
                    shell_quote(plot_path);
  std::fflush(stdout);  // the script's output comes after ours
  TERRACE_CHECK(std::system(cmd.c_str()) == 0, IoError, "plotting failed: ", cmd);
}
}  // namespace
const CommandDef kBenchCommand{
    "bench",
    "MODEL",
    "Runs a model (a .onnx file, or a folder holding model.onnx) from a cold start and reports the "
    "warm-up timeline, the steady state against the interpreter and the break-even call.",
    {
        {"--calls", "N", "calls to time (default 20)"},
        {"--duration", "S", "call for S seconds instead of --calls times"},
        {"--concurrency", "K", "K threads calling the one session at once (default 1); the baseline too"},
        {"--steady-calls", "N", "keep calling until N calls after the warm-up are timed (at most 5 minutes)"},
        {"--baseline-calls", "N", "calls of the interpreter baseline (default min(calls, 20))"},
        {"--tier", "interp|cpu|gpu", "the highest tier regions may be promoted to (default: the highest built)"},
        {"--batch", "N", "the symbolic dim 'batch' of the random inputs (default 1)"},
        {"--input", "NAME=FILE|FILE.npz", "the input NAME from a .npy or TensorProto .pb file instead of random values; or every input an .npz (numpy.savez) holds", true},
        {"--expect", "NAME=FILE", "check output NAME of the last call against a .npy or TensorProto .pb file", true},
        {"--json", "FILE", "write the timeline, statistics and report as JSON (tools/plot_bench.py's schema)"},
        {"--plot", "FILE.png", "plot the timeline to FILE.png and FILE.svg (and its JSON next to it)"},
        {"--quiet", nullptr, "no per-call timeline"},
        {"--device-io", nullptr,
         "inputs copied to tier 2's device once, outputs left there (IoBinding), as a GPU-resident caller; needs --tier gpu"},
        kProfileOption,
        kStrictOption,
        kModeOption,
        kThreadsOption,
        kShapesOption,
        {"--dim", "SYM=N", "the symbolic dim SYM of the random inputs (default 1; --batch N is --dim batch=N)", true},
        {"--input-sets", "DIR", "varying traffic: the calls cycle through DIR's test_data_set_N folders (ONNX's test-data layout), each call's outputs checked where its folder has them; the baseline runs the last"},
        {"--rounds", "N", "with --input-sets: go through the sets N times (the calls: N x sets; default 1); each round's calls, median, compiles and checks are printed and in the JSON's rounds"},
    },
    1,
    1,
    "MODEL",
    "The last call's outputs are checked against the interpreter baseline's and the --expect files\n"
    "(with --input-sets, every call's against its set's); the last line is `&&&& PASSED ...` or\n"
    "`&&&& FAILED ...`.\n",
};

int cmd_bench(const ParsedArgs& args) {
  BenchArgs b = parse_bench_args(args);
  BenchSpec spec;
  spec.model.path = b.model;
  spec.options = b.options;
  spec.calls = b.calls;
  spec.baseline_calls = b.baseline_calls;
  spec.steady_calls = b.steady_calls;
  spec.duration_s = b.duration_s;
  spec.concurrency = b.concurrency;
  spec.device_io = b.device_io;
  spec.expect_files = b.expect_files;
  spec.inputs = [&](const Graph& graph) { return bench_inputs(graph, b); };
  if (auto dir = args.get("--input-sets")) {
    for (const char* other : {"--input", "--dim", "--shapes", "--batch", "--calls", "--duration", "--steady-calls",
                              "--device-io", "--expect"})
      if (args.has(other))
        throw UsageError{std::string("--input-sets gives every call's inputs and expected outputs: no ") + other};
    spec.input_sets = input_sets(*spec.model.graph(), *dir);
    if (auto n = args.get("--rounds")) spec.rounds = parse_positive("--rounds", *n);
  } else if (args.has("--rounds")) {
    throw UsageError{"--rounds goes through --input-sets: give the folder"};
  }
  const BenchResult r = run_bench(spec);
  for (size_t k = 0; k < r.run.rounds.size(); ++k) {
    const RoundStats& rs = r.run.rounds[k];
    std::printf("round %zu: %lld calls, median %.3f ms, %d versions published, %s\n", k + 1, (long long)rs.calls,
                rs.median_ms, rs.compiles, rs.mismatches.empty() ? "outputs match" : "OUTPUTS DIFFER");
    for (size_t m = 0; m < rs.mismatches.size() && m < 5; ++m) std::printf("  %s\n", rs.mismatches[m].c_str());
  }
  for (const Check& c : r.checks)
    if (!c.line.empty()) std::printf("%s\n", c.line.c_str());

  if (!b.quiet) print_timeline(r.run);
  print_summary(b, r);
  std::printf("tiers: up to %s allowed; ran on %s\n", tier_name(b.options.max_tier), joined(tiers_ran(r.run)).c_str());
  const bool ok = r.passed();
  std::printf("check: outputs %s the interpreter%s\n", ok ? "match" : "DIFFER from",
              b.expect_files.empty() ? "" : " and the --expect files");

  std::string json_path = b.json_path;
  if (json_path.empty() && !b.plot_path.empty())
    json_path = std::filesystem::path(b.plot_path).replace_extension(".json").string();
  for (const std::string& file : {json_path, b.plot_path})
    if (auto dir = std::filesystem::path(file).parent_path(); !file.empty() && !dir.empty())
      std::filesystem::create_directories(dir);
  if (!json_path.empty()) write_text_file(json_path, bench_json(spec, r));
  if (!b.plot_path.empty()) plot(json_path, b.plot_path);
  return ok ? 0 : 1;
}

}  // namespace terrace::cli
