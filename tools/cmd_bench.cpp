// terrace bench: runs a model N times from a cold start and reports the warm-up timeline.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <mutex>
#include <thread>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <optional>

#include "interp/compare.h"
#include "interp/onnx_import.h"
#include "tiers/tier_manager.h"
#include "tools/cli_util.h"
#include "tools/data_files.h"
#include "tools/fp64_reference.h"
#include "tools/json_out.h"
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

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// A region as the benchmark sees it: from Session::region_reports, plus the first call that could
// use its compiled code (polled after every call, since the report knows only the trigger call).
struct RegionTimeline {
  int64_t id = 0;
  std::string ops, tier, state;
  double compile_ms = 0;
  int64_t promoted_at_call = -1;  // the call that triggered the compile
  int64_t ready_at_call = -1;     // the first call after the compiled version was published
  int64_t changed_at_call = -1;   // the first call after its tier last changed (e.g. cpu -> gpu)
};

// Refreshes `regions` from the session's region reports taken after call `call`.
void update_regions(std::vector<RegionTimeline>& regions, const Session& session, int64_t call) {
  const std::vector<RegionReport> reports = session.region_reports();
  regions.resize(reports.size());
  for (size_t i = 0; i < reports.size(); ++i) {
    const RegionReport& f = reports[i];
    RegionTimeline& r = regions[i];
    r.id = f.id;
    r.ops = f.ops;
    if (!r.tier.empty() && r.tier != tier_name(f.tier)) r.changed_at_call = call + 1;
    r.tier = tier_name(f.tier);
    r.state = f.state;
    r.compile_ms = f.compile_ms;
    r.promoted_at_call = f.promoted_at_call;
    if (r.ready_at_call < 0 && f.versions > 0) r.ready_at_call = call + 1;
  }
}

struct TimedRun {
  double load_ms = 0;
  std::vector<CallRecord> calls;
  std::vector<RegionTimeline> regions;
  NamedTensors outputs;  // the last call's
  std::string report_json;
  int validate_calls = 0;  // shadow-validated calls after each promotion
  double peak_mb = -1;     // the process's peak RSS when the run ended (peak_rss_mb)
  std::vector<double> done_at_ms;  // when each call ended (from the first call's start), in the order they ended
};

// The call from which the last region's compiled code was usable; -1 if none was.
int64_t last_ready(const TimedRun& run) {
  int64_t last = -1;
  for (auto& r : run.regions) last = std::max({last, r.ready_at_call, r.changed_at_call});
  return last;
}

// The first call of the steady state: after the last region became ready and its shadow-validated
// calls (never call 0, which pays for first-touch allocations).
int64_t steady_from(const TimedRun& run) {
  return std::max<int64_t>(1, last_ready(run) + run.validate_calls);
}

// Calls `call` from `threads` threads at once (the session is thread-safe) while `more(started)`
// holds, then `done(outputs)` under one lock. The first error stops every thread and is rethrown.
void call_concurrently(int64_t threads, const std::function<bool(int64_t)>& more,
                       const std::function<NamedTensors()>& call, const std::function<void(NamedTensors&)>& done) {
  std::mutex mu;
  int64_t started = 0;
  std::exception_ptr error;
  auto worker = [&] {
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (error || !more(started)) return;
        ++started;
      }
      try {
        NamedTensors out = call();
        std::lock_guard<std::mutex> lock(mu);
        done(out);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!error) error = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

// Loads the model into a new Session (a cold start) and runs it `calls` times (or for
// `duration_s` seconds, when above 0) from b.concurrency threads; then, while fewer than
// `steady_calls` of them are steady (or a compile is in flight), more, for at most 5 minutes.
TimedRun timed_run(const BenchArgs& b, Options options, int64_t calls, int64_t steady_calls,
                   NamedTensors& inputs, double duration_s = 0) {
  TimedRun run;
  if (options.validate == ValidateMode::First) run.validate_calls = options.validate_calls;
  auto t0 = std::chrono::steady_clock::now();
  auto session = Session::load(b.model, options);
  run.load_ms = ms_since(t0);
  if (inputs.empty()) inputs = bench_inputs(session->graph(), b);
  Progress progress(std::string("bench ") + tier_name(options.max_tier) + ", calls", duration_s > 0 ? 0 : calls);
  // Tier 2 comes after Options::climb_threshold calls on tier 1: until that many calls have passed
  // with no region changing tier, a region may still be on its way to the GPU.
  const int64_t settle = options.max_tier == Tier::Gpu ? options.climb_threshold + run.validate_calls + 2 : 0;
  auto warming = [&](int64_t done) {
    bool compiling =
        std::any_of(run.regions.begin(), run.regions.end(), [](auto& r) { return r.state == "compiling"; });
    return compiling || done - last_ready(run) < settle || done - steady_from(run) < steady_calls;
  };
  int64_t c = 0;  // calls ended
  const auto start = std::chrono::steady_clock::now();
  auto call = [&] { return session->run(inputs); };
  auto done = [&](NamedTensors& out) {
    run.outputs = std::move(out);
    run.done_at_ms.push_back(ms_since(start));
    if (options.max_tier != Tier::Interp) update_regions(run.regions, *session, c);
    char last[48];
    std::snprintf(last, sizeof last, "last call %.3f ms", session->last_call().ms);
    progress.update(++c, last);
  };
  // At least one call however short the duration: the report reads the first.
  auto in_time = [&](int64_t started) { return started == 0 || ms_since(start) < duration_s * 1e3; };
  if (duration_s > 0) call_concurrently(b.concurrency, in_time, call, done);
  else call_concurrently(b.concurrency, [&](int64_t started) { return started < calls; }, call, done);
  auto extra = std::chrono::steady_clock::now();
  call_concurrently(b.concurrency, [&](int64_t) { return steady_calls > 0 && warming(c) && ms_since(extra) < 300e3; },
                    call, done);
  session->wait_for_compiles();  // compile times of jobs still in flight belong in the report
  run.report_json = session->report_json();
  update_regions(run.regions, *session, c - 1);  // ready_at_call == c: after the run
  run.calls = session->calls();
  run.peak_mb = peak_rss_mb();
  return run;
}

struct Stats {
  int64_t first_call = 0, count = 0;
  double median = 0, p90 = 0, p99 = 0, mean = 0, min = 0, max = 0;
  double per_s = 0;  // calls ended per second over those calls (with --concurrency, several at once)
};

// Nearest-rank percentiles over calls [first, end) (as ONNX Runtime's perf test reports them).
Stats stats_from(const std::vector<double>& ms, int64_t first) {
  Stats s;
  s.first_call = first;
  std::vector<double> v(ms.begin() + first, ms.end());
  s.count = int64_t(v.size());
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  auto rank = [&](double p) { return v[size_t(std::max(0.0, std::ceil(p * double(v.size())) - 1))]; };
  s.median = rank(0.5), s.p90 = rank(0.9), s.p99 = rank(0.99);
  s.min = v.front(), s.max = v.back();
  for (double x : v) s.mean += x / double(v.size());
  return s;
}

// Calls per second from the end of call first - 1 to the end of the last (by when calls ended:
// with several threads, call indices end out of order).
double throughput(const TimedRun& run, int64_t first) {
  const std::vector<double>& at = run.done_at_ms;
  if (at.empty() || first >= int64_t(at.size())) return 0;
  const double span = at.back() - (first > 0 ? at[size_t(first - 1)] : 0);
  return span > 0 ? double(int64_t(at.size()) - first) * 1e3 / span : 0;
}

std::vector<double> latencies(const std::vector<CallRecord>& calls) {
  std::vector<double> ms;
  for (auto& c : calls) ms.push_back(c.ms);
  return ms;
}

// steady_from, or if the run is too short for that, the calls after the last region became ready;
// failing that, all calls after call 0.
int64_t steady_start(const TimedRun& run) {
  int64_t n = int64_t(run.calls.size());
  for (int64_t first : {steady_from(run), last_ready(run), int64_t(1)})
    if (first >= 1 && first < n) return first;
  return 0;
}

// The first call from which the tiered run's cumulative time (compile time charged when the code
// became ready) stays below the interpreter's. Interpreter calls past the baseline's length are
// estimated by its steady median. nullopt: never within the run.
std::optional<int64_t> break_even(const TimedRun& run, const std::vector<double>& interp_ms,
                                  double interp_median) {
  size_t n = run.calls.size();
  std::vector<double> cost = latencies(run.calls);
  for (auto& r : run.regions) {
    int64_t at = r.ready_at_call >= 0 ? r.ready_at_call : std::max<int64_t>(r.promoted_at_call, 0);
    cost[std::min(size_t(at), n - 1)] += r.compile_ms;
  }
  std::optional<int64_t> found;
  double tiered = 0, interp = 0;
  for (size_t k = 0; k < n; ++k) {
    tiered += cost[k];
    interp += k < interp_ms.size() ? interp_ms[k] : interp_median;
    if (tiered >= interp) found.reset();
    else if (!found) found = int64_t(k);
  }
  return found;
}

struct Check {
  std::string output, against;  // "interp" or the --expect file
  Comparison result;
};

// Compares output `name` with `want` (Tolerance::for_dtype, ARCHITECTURE.md's "Rules"); prints a
// mismatch. Against the interpreter, a float output beyond that tolerance gets terrace validate's
// second opinion (tools/fp64_reference.h): it passes when it is as close to the model computed in
// float64 as the interpreter is (fp32 roundings in another order, compounded over a deep network:
// ResNet-50 in one convolution chain differs from the interpreter by 3.5e-5 on a logit of -0.007).
Check check_output(const NamedTensors& got, const std::string& name, const Tensor& want, std::string against,
                   const std::function<const Tensor*()>& exact = {}) {
  auto it = std::find_if(got.begin(), got.end(), [&](auto& p) { return p.first == name; });
  if (it == got.end()) throw UsageError{"--expect names '" + name + "', which is not an output"};
  Check c{name, std::move(against), compare_tensors(want, it->second, Tolerance::for_dtype(want.dtype()))};
  if (!c.result.equal && exact && is_float(want.dtype())) {
    std::string detail;
    if (const Tensor* e = exact(); e && close_to_float64(want, it->second, *e, &detail)) {
      c.result.equal = true;
      std::printf("check %s: beyond %s's tolerance (%s), within the float64 model's: %s\n", name.c_str(),
                  c.against.c_str(), c.result.message.c_str(), detail.c_str());
      return c;
    } else if (!detail.empty()) {
      c.result.message += "; " + detail;
    }
  }
  if (!c.result.equal)
    std::printf("check %s: DIFFERS from %s: %s\n", name.c_str(), c.against.c_str(), c.result.message.c_str());
  return c;
}

// The last call's outputs against the interpreter baseline's and the --expect files.
std::vector<Check> check_outputs(const BenchArgs& b, const NamedTensors& inputs, const NamedTensors& got,
                                 const NamedTensors& interp) {
  std::vector<Check> checks;
  std::optional<NamedTensors> exact;  // the float64 model's outputs, computed when first needed
  std::string why;
  auto exact_of = [&](const std::string& name) -> const Tensor* {
    if (!exact) {
      exact.emplace();
      if (auto widened = widen_to_float64(*load_onnx_file(b.model).graph, &why))
        *exact = float64_outputs(*widened, inputs, &why);
    }
    for (auto& [n, t] : *exact)
      if (n == name) return &t;
    return nullptr;
  };
  for (auto& [name, t] : interp)
    checks.push_back(check_output(got, name, t, "interp", [&, name = name] { return exact_of(name); }));
  for (auto& [name, file] : b.expect_files) checks.push_back(check_output(got, name, load_tensor_file(file), file));
  return checks;
}

// Every tier any call of the run ran on, lowest first.
std::vector<std::string> tiers_ran(const TimedRun& run) {
  std::vector<std::string> out;
  for (const char* t : {"interp", "cpu", "gpu"})
    for (auto& c : run.calls)
      if (std::find(c.tiers.begin(), c.tiers.end(), t) != c.tiers.end()) {
        out.push_back(t);
        break;
      }
  return out;
}

std::string joined(const std::vector<std::string>& parts) {
  std::string s;
  for (auto& p : parts) s += (s.empty() ? "" : "+") + p;
  return s;
}

Json stats_json(const Stats& s) {
  // median_ms is p50_ms under the name tools/plot_bench.py and bench/compare.py read.
  return {{"first_call", s.first_call}, {"count", s.count}, {"median_ms", s.median}, {"p50_ms", s.median},
          {"p90_ms", s.p90},           {"p99_ms", s.p99},  {"min_ms", s.min},        {"max_ms", s.max},
          {"mean_ms", s.mean},         {"calls_per_s", s.per_s}};
}

// The whole result as JSON: the schema tools/plot_bench.py and bench/compare.py read.
std::string result_json(const BenchArgs& b, const NamedTensors& inputs, const TimedRun& run,
                        const Stats& steady, const TimedRun& base, const Stats& base_steady,
                        std::optional<int64_t> even, const std::vector<Check>& checks) {
  Json j;
  j["model"] = b.model;
  j["tier"] = tier_name(b.options.max_tier);
  j["tiers_ran"] = tiers_ran(run);
  j["inputs"] = Json::array();
  for (auto& [name, t] : inputs)
    j["inputs"].push_back({{"name", name}, {"dtype", dtype_name(t.dtype())}, {"shape", t.shape()}});
  j["concurrency"] = b.concurrency;
  j["duration_s"] = b.duration_s > 0 ? Json(b.duration_s) : Json(nullptr);
  j["load_ms"] = run.load_ms;
  // The model's load and the tiered run, what a process serving the model holds at most (compare.py's
  // column, against ONNX Runtime's process); the interpreter baseline that follows in this process
  // (a second load, the interpreter's float64 packing) only in process_peak_rss_mb. BERT on 2
  // cores: 585 MB against 803 with the baseline.
  j["peak_rss_mb"] = run.peak_mb;
  j["process_peak_rss_mb"] = peak_rss_mb();
  j["first_call_ms"] = run.calls[0].ms;
  j["time_to_first_result_ms"] = run.load_ms + run.calls[0].ms;
  j["calls"] = Json::array();
  for (auto& c : run.calls) j["calls"].push_back({{"index", c.index}, {"ms", c.ms}, {"tiers", c.tiers}});
  j["regions"] = Json::array();
  for (auto& r : run.regions)
    j["regions"].push_back({{"id", r.id}, {"ops", r.ops}, {"tier", r.tier}, {"state", r.state},
                            {"compile_ms", r.compile_ms}, {"promoted_at_call", r.promoted_at_call},
                            {"ready_at_call", r.ready_at_call}});
  j["steady"] = stats_json(steady);
  Json calls_ms = Json::array();
  for (auto& c : base.calls) calls_ms.push_back(c.ms);
  j["baseline"] = {{"tier", "interp"}, {"load_ms", base.load_ms}, {"calls_ms", calls_ms}, {"steady", stats_json(base_steady)}};
  j["speedup"] = base_steady.median / steady.median;
  j["break_even_call"] = even ? Json(*even) : Json("never");
  j["checks"] = Json::array();
  for (const Check& c : checks)
    j["checks"].push_back({{"output", c.output}, {"against", c.against}, {"equal", c.result.equal},
                           {"max_abs_err", c.result.max_abs_err}, {"max_rel_err", c.result.max_rel_err},
                           {"message", c.result.message}});
  j["report"] = Json::parse(run.report_json);
  return json_text(j);
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

void print_summary(const BenchArgs& b, const TimedRun& run, const Stats& steady, const Stats& base_steady,
                   std::optional<int64_t> even) {
  std::printf("load %.1f ms, first call %.3f ms, time to first result %.1f ms\n", run.load_ms,
              run.calls[0].ms, run.load_ms + run.calls[0].ms);
  if (b.concurrency > 1 || b.duration_s > 0)
    std::printf("%lld calls in %.3g s from %lld thread%s\n", (long long)run.calls.size(),
                run.done_at_ms.empty() ? 0.0 : run.done_at_ms.back() / 1e3, (long long)b.concurrency,
                b.concurrency > 1 ? "s" : "");
  std::printf("steady state (calls %lld.., n=%lld): p50 %.3f ms, p90 %.3f ms, p99 %.3f ms, min %.3f ms, max %.3f ms; "
              "%.1f calls/s\n", (long long)steady.first_call, (long long)steady.count, steady.median, steady.p90,
              steady.p99, steady.min, steady.max, steady.per_s);
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
        kProfileOption,
        kStrictOption,
        kModeOption,
        kThreadsOption,
        kShapesOption,
        {"--dim", "SYM=N", "the symbolic dim SYM of the random inputs (default 1; --batch N is --dim batch=N)", true},
    },
    1,
    1,
    "MODEL",
    "The last call's outputs are checked against the interpreter baseline's and the --expect files;\n"
    "the last line is `&&&& PASSED ...` or `&&&& FAILED ...`.\n",
};

int cmd_bench(const ParsedArgs& args) {
  BenchArgs b = parse_bench_args(args);
  NamedTensors inputs;
  TimedRun run = timed_run(b, b.options, b.calls, b.steady_calls, inputs, b.duration_s);
#if defined(__GLIBC__)
  // The tiered session is gone: its freed heap goes back to the system before the baseline's
  // session loads, so that the process's peak RSS (process_peak_rss_mb) is one session's, not
  // two sessions' worth of glibc's retained heap (BERT: 1.38 GB against 1.02 for one session).
  malloc_trim(0);
#endif
  // The interpreter baseline, same inputs; a run on the interpreter is its own baseline.
  Options interp = b.options;
  interp.max_tier = Tier::Interp;
  interp.profile_file.clear();  // the trace is the tiered run's
  interp.strict = false;
  TimedRun base = b.options.max_tier == Tier::Interp ? run : timed_run(b, interp, b.baseline_calls, 0, inputs);
  Stats steady = stats_from(latencies(run.calls), steady_start(run));
  steady.per_s = throughput(run, steady.first_call);
  Stats base_steady = stats_from(latencies(base.calls), base.calls.size() > 1 ? 1 : 0);
  base_steady.per_s = throughput(base, base_steady.first_call);
  auto even = break_even(run, latencies(base.calls), base_steady.median);
  std::vector<Check> checks = check_outputs(b, inputs, run.outputs, base.outputs);

  if (!b.quiet) print_timeline(run);
  print_summary(b, run, steady, base_steady, even);
  std::printf("tiers: up to %s allowed; ran on %s\n", tier_name(b.options.max_tier), joined(tiers_ran(run)).c_str());
  bool ok = std::all_of(checks.begin(), checks.end(), [](auto& c) { return c.result.equal; });
  std::printf("check: outputs %s the interpreter%s\n", ok ? "match" : "DIFFER from",
              b.expect_files.empty() ? "" : " and the --expect files");

  std::string json_path = b.json_path;
  if (json_path.empty() && !b.plot_path.empty())
    json_path = std::filesystem::path(b.plot_path).replace_extension(".json").string();
  for (const std::string& file : {json_path, b.plot_path})
    if (auto dir = std::filesystem::path(file).parent_path(); !file.empty() && !dir.empty())
      std::filesystem::create_directories(dir);
  if (!json_path.empty())
    write_text_file(json_path, result_json(b, inputs, run, steady, base, base_steady, even, checks));
  if (!b.plot_path.empty()) plot(json_path, b.plot_path);
  return ok ? 0 : 1;
}

}  // namespace terrace::cli
