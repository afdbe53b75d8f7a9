// terrace bench's core (bench.h): the timed runs, their statistics, the checks and the JSON.
#include "tools/bench.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <thread>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "tiers/tier_manager.h"
#include "tools/fp64_reference.h"
#include "tools/json_out.h"
#include "tools/tensor_files.h"

namespace terrace::cli {

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}


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
    r.tune_ms = f.tune_ms;
    r.validate_ms = f.validate_ms;
    r.promoted_at_call = f.promoted_at_call;
    if (r.ready_at_call < 0 && f.versions > 0) r.ready_at_call = call + 1;
  }
}


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
// `duration_s` seconds, when above 0) from spec.concurrency threads; then, while fewer than
// `steady_calls` of them are steady (or a compile is in flight), more, for at most 5 minutes.
// Versions published over the session's regions so far.
int published_versions(const Session& session) {
  int n = 0;
  for (const RegionReport& r : session.region_reports()) n += r.versions;
  return n;
}

// The mismatches of `got` against a set's expected outputs.
void check_set(const BenchSpec::InputSet& set, const NamedTensors& got, std::vector<std::string>& out) {
  for (const auto& [name, want] : set.expected)
    for (const auto& [n, t] : got)
      if (n == name)
        if (Comparison c = compare_tensors(want, t, Tolerance::for_dtype(want.dtype())); !c.equal)
          out.push_back(set.name + " output '" + name + "': " + c.message);
}

TimedRun timed_run(const BenchSpec& spec, Options options, int64_t calls, int64_t steady_calls,
                   NamedTensors& inputs, double duration_s = 0, bool cycle_sets = false) {
  TimedRun run;
  if (options.validate == ValidateMode::First) run.validate_calls = options.validate_calls;
  auto t0 = std::chrono::steady_clock::now();
  auto session = spec.model.session(options);
  run.load_ms = ms_since(t0);
  if (inputs.empty()) inputs = spec.inputs(session->graph());
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
  NamedTensors bound;  // --device-io: the inputs on tier 2's device
  RunOptions io;
  const bool device_io = spec.device_io && options.max_tier == Tier::Gpu;  // not the interpreter baseline
  if (device_io) {
    for (const auto& [name, t] : inputs) bound.push_back({name, session->to_device(t)});
    io.outputs_on_device = true;
  }
  // --input-sets: call k runs set k mod n; its round is k / n.
  const size_t n_sets = cycle_sets ? spec.input_sets.size() : 0;
  std::atomic<int64_t> next_set{0};
  std::mutex sets_mu;
  if (n_sets) run.rounds.resize(size_t(spec.rounds));
  auto call = [&] {
    if (!n_sets) return device_io ? session->run(bound, io) : session->run(inputs);
    const int64_t k = next_set.fetch_add(1);
    const BenchSpec::InputSet& set = spec.input_sets[size_t(k) % n_sets];
    NamedTensors out = session->run(set.inputs);
    std::vector<std::string> wrong;
    check_set(set, out, wrong);
    std::lock_guard<std::mutex> lock(sets_mu);
    RoundStats& round = run.rounds[std::min(size_t(k) / n_sets, run.rounds.size() - 1)];
    round.mismatches.insert(round.mismatches.end(), wrong.begin(), wrong.end());
    return out;
  };
  int versions_before = 0;
  auto done = [&](NamedTensors& out) {
    run.outputs = std::move(out);
    run.done_at_ms.push_back(ms_since(start));
    if (options.max_tier != Tier::Interp) update_regions(run.regions, *session, c);
    if (n_sets && size_t(c + 1) % n_sets == 0 && size_t(c + 1) / n_sets <= run.rounds.size()) {
      const int now = published_versions(*session);  // the round's last call has ended
      run.rounds[size_t(c + 1) / n_sets - 1].compiles = now - versions_before;
      versions_before = now;
    }
    char last[48];
    std::snprintf(last, sizeof last, "last call %.3f ms", session->last_call().ms);
    progress.update(++c, last);
  };
  // At least one call however short the duration: the report reads the first.
  auto in_time = [&](int64_t started) { return started == 0 || ms_since(start) < duration_s * 1e3; };
  if (duration_s > 0) call_concurrently(spec.concurrency, in_time, call, done);
  else call_concurrently(spec.concurrency, [&](int64_t started) { return started < calls; }, call, done);
  auto extra = std::chrono::steady_clock::now();
  call_concurrently(spec.concurrency, [&](int64_t) { return steady_calls > 0 && warming(c) && ms_since(extra) < 300e3; },
                    call, done);
  session->wait_for_compiles();  // compile times of jobs still in flight belong in the report
  for (auto& [name, t] : run.outputs) t = t.to_host();  // --device-io: checked on the host
  run.report_json = session->report_json();
  const ThreadsReport threads = session->threads_report();
  run.threads = std::to_string(threads.team) + (threads.adaptive ? " (adaptive): " : " (fixed): ") + threads.why;
  update_regions(run.regions, *session, c - 1);  // ready_at_call == c: after the run
  run.calls = session->calls();
  run.peak_mb = peak_rss_mb();
  return run;
}


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

SteadyTime time_to_steady(const TimedRun& run) {
  SteadyTime t;
  const int64_t n = int64_t(run.calls.size());
  const int64_t first = steady_from(run);
  t.reached = first < n && last_ready(run) >= 0;
  t.call = std::min(first, n);
  if (t.call > 0 && size_t(t.call) <= run.done_at_ms.size()) t.ms = run.done_at_ms[size_t(t.call - 1)];
  for (int64_t k = 0; k < t.call; ++k) t.calls_ms += run.calls[size_t(k)].ms;
  for (const RegionTimeline& r : run.regions) {
    t.compile_ms += r.compile_ms - r.tune_ms;
    t.tune_ms += r.tune_ms;
    t.validate_ms += r.validate_ms;
  }
  return t;
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
      c.line = "check " + name + ": beyond " + c.against + "'s tolerance (" + c.result.message +
               "), within the float64 model's: " + detail;
      return c;
    } else if (!detail.empty()) {
      c.result.message += "; " + detail;
    }
  }
  if (!c.result.equal)
    c.line = "check " + name + ": DIFFERS from " + c.against + ": " + c.result.message;
  return c;
}

// The last call's outputs against the interpreter baseline's and the --expect files.
std::vector<Check> check_outputs(const BenchSpec& spec, const NamedTensors& inputs, const NamedTensors& got,
                                 const NamedTensors& interp) {
  std::vector<Check> checks;
  std::optional<NamedTensors> exact;  // the float64 model's outputs, computed when first needed
  std::string why;
  auto exact_of = [&](const std::string& name) -> const Tensor* {
    if (!exact) {
      exact.emplace();
      if (auto widened = widen_to_float64(*spec.model.graph(), &why))
        *exact = float64_outputs(*widened, inputs, &why);
    }
    for (auto& [n, t] : *exact)
      if (n == name) return &t;
    return nullptr;
  };
  for (auto& [name, t] : interp)
    checks.push_back(check_output(got, name, t, "interp", [&, name = name] { return exact_of(name); }));
  for (auto& [name, file] : spec.expect_files) checks.push_back(check_output(got, name, load_tensor_file(file), file));
  return checks;
}

Json stats_json(const Stats& s) {
  // median_ms is p50_ms under the name tools/plot_bench.py and bench/compare.py read.
  return {{"first_call", s.first_call}, {"count", s.count}, {"median_ms", s.median}, {"p50_ms", s.median},
          {"p90_ms", s.p90},           {"p99_ms", s.p99},  {"min_ms", s.min},        {"max_ms", s.max},
          {"mean_ms", s.mean},         {"calls_per_s", s.per_s}};
}

}  // namespace

bool BenchResult::passed() const {
  return std::all_of(checks.begin(), checks.end(), [](auto& c) { return c.result.equal; }) &&
         std::all_of(run.rounds.begin(), run.rounds.end(), [](auto& r) { return r.mismatches.empty(); });
}

BenchResult run_bench(const BenchSpec& spec_in) {
  BenchSpec spec = spec_in;
  if (spec.baseline_calls < 0) spec.baseline_calls = std::min<int64_t>(spec.calls, 20);
  BenchResult r;
  NamedTensors& inputs = r.inputs;
  const bool sets = !spec.input_sets.empty();
  if (sets) {
    inputs = spec.input_sets.back().inputs;  // the baseline's, and the last call's
    spec.calls = spec.rounds * int64_t(spec.input_sets.size());
    spec.steady_calls = 0;
    spec.duration_s = 0;
  }
  r.run = timed_run(spec, spec.options, spec.calls, spec.steady_calls, inputs, spec.duration_s, sets);
  for (size_t k = 0; k < r.run.rounds.size(); ++k) {
    std::vector<double> ms;
    for (const CallRecord& c : r.run.calls)
      if (size_t(c.index) / spec.input_sets.size() == k) ms.push_back(c.ms);
    std::sort(ms.begin(), ms.end());
    r.run.rounds[k].calls = int64_t(ms.size());
    r.run.rounds[k].median_ms = ms.empty() ? 0 : ms[ms.size() / 2];
  }
#if defined(__GLIBC__)
  // The tiered session is gone: its freed heap goes back to the system before the baseline's
  // session loads, so that the process's peak RSS (process_peak_rss_mb) is one session's, not
  // two sessions' worth of glibc's retained heap (BERT: 1.38 GB against 1.02 for one session).
  malloc_trim(0);
#endif
  // The interpreter baseline, same inputs; a run on the interpreter is its own baseline.
  Options interp = spec.options;
  interp.max_tier = Tier::Interp;
  interp.profile_file.clear();  // the trace is the tiered run's
  interp.strict = false;
  r.base = spec.options.max_tier == Tier::Interp ? r.run : timed_run(spec, interp, spec.baseline_calls, 0, inputs);
  r.steady = stats_from(latencies(r.run.calls), steady_start(r.run));
  r.steady.per_s = throughput(r.run, r.steady.first_call);
  r.base_steady = stats_from(latencies(r.base.calls), r.base.calls.size() > 1 ? 1 : 0);
  r.base_steady.per_s = throughput(r.base, r.base_steady.first_call);
  r.break_even = break_even(r.run, latencies(r.base.calls), r.base_steady.median);
  r.to_steady = time_to_steady(r.run);
  r.checks = check_outputs(spec, inputs, r.run.outputs, r.base.outputs);
  return r;
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

std::string bench_json(const BenchSpec& spec, const BenchResult& r) {
  const NamedTensors& inputs = r.inputs;
  const TimedRun &run = r.run, &base = r.base;
  const Stats &steady = r.steady, &base_steady = r.base_steady;
  const std::optional<int64_t>& even = r.break_even;
  const std::vector<Check>& checks = r.checks;
  Json j;
  j["model"] = spec.model.name();
  j["tier"] = tier_name(spec.options.max_tier);
  j["tiers_ran"] = tiers_ran(run);
  j["inputs"] = Json::array();
  for (auto& [name, t] : inputs)
    j["inputs"].push_back({{"name", name}, {"dtype", dtype_name(t.dtype())}, {"shape", t.shape()}});
  j["concurrency"] = spec.concurrency;
  j["device_io"] = spec.device_io;
  j["duration_s"] = spec.duration_s > 0 ? Json(spec.duration_s) : Json(nullptr);
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
                            {"compile_ms", r.compile_ms}, {"tune_ms", r.tune_ms}, {"validate_ms", r.validate_ms},
                            {"promoted_at_call", r.promoted_at_call},
                            {"ready_at_call", r.ready_at_call}});
  j["steady"] = stats_json(steady);
  Json calls_ms = Json::array();
  for (auto& c : base.calls) calls_ms.push_back(c.ms);
  j["baseline"] = {{"tier", "interp"}, {"load_ms", base.load_ms}, {"calls_ms", calls_ms}, {"steady", stats_json(base_steady)}};
  j["speedup"] = base_steady.median / steady.median;
  j["break_even_call"] = even ? Json(*even) : Json("never");
  const SteadyTime& ts = r.to_steady;
  j["time_to_steady"] = {{"reached", ts.reached},         {"call", ts.call},
                         {"ms", ts.ms},                   {"compile_ms", ts.compile_ms},
                         {"tune_ms", ts.tune_ms},         {"validate_ms", ts.validate_ms},
                         {"calls_ms", ts.calls_ms}};
  j["checks"] = Json::array();
  for (const Check& c : checks)
    j["checks"].push_back({{"output", c.output}, {"against", c.against}, {"equal", c.result.equal},
                           {"max_abs_err", c.result.max_abs_err}, {"max_rel_err", c.result.max_rel_err},
                           {"message", c.result.message}});
  if (!run.rounds.empty()) {
    j["rounds"] = Json::array();
    for (size_t k = 0; k < run.rounds.size(); ++k) {
      const RoundStats& rs = run.rounds[k];
      Json mismatches(std::vector<std::string>(rs.mismatches.begin(),
                                               rs.mismatches.begin() + std::min<ptrdiff_t>(10, ptrdiff_t(rs.mismatches.size()))));
      j["rounds"].push_back({{"round", int64_t(k + 1)}, {"calls", rs.calls}, {"compiles", rs.compiles},
                             {"median_ms", rs.median_ms}, {"all_match", rs.mismatches.empty()},
                             {"mismatches", mismatches}});
    }
  }
  j["report"] = Json::parse(run.report_json);
  return json_text(j);
}

}  // namespace terrace::cli
