// Session: input checks, the plan (regions and graph breaks), execution step by step through the
// tier manager, per-call records and reports.
#include "tiers/session.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <unordered_map>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "interp/cancel.h"
#include "interp/interpreter.h"
#include "interp/json.h"
#include "interp/log.h"
#include "interp/omp_threads.h"
#include "interp/onnx_import.h"
#include "tiers/body_plans.h"
#include "tiers/call_plan.h"
#include "tiers/graph_breaks.h"
#include "tiers/input_check.h"
#include "tiers/ladder.h"
#include "tiers/passes/pipeline.h"
#include "tiers/thread_tuner.h"
#include "tiers/tier_manager.h"
#include "tiers/trace.h"

namespace terrace {

struct Session::Impl {
  std::shared_ptr<const Graph> graph;
  Options options;
  Plan plan;
  std::vector<int> last_use;  // per value: the last step that reads it
  std::vector<int> step_of_node;
  std::unique_ptr<TierManager> tiers;
  std::unique_ptr<CallPlans> plans;  // after `tiers`: a taken plan goes before its tier's backend
  std::unique_ptr<BodyPlans> bodies;  // control-flow bodies' own plans (tiers/body_plans.h)
  mutable std::mutex mu;
  std::vector<CallRecord> calls;
  std::atomic<int64_t> last_trim_ns{0};  // steady_clock time of the last release_free_heap
  std::unique_ptr<ThreadTuner> tuner;    // null: every call runs options.interp_threads
  int full_team = 0;                     // the team tier 1 builds for
  std::string fixed_why;                 // why the team is fixed, without a tuner
};

namespace {
// Gives the free pages of malloc's heaps back to the OS after a call in which the interpreter ran
// (a graph break, a cold region, a validation, a deopt), at most every 250 ms. The interpreter's
// intermediates (1-10 MB each on BERT) are freed at their last use but their pages stay resident:
// glibc's dynamic mmap threshold, raised by the first such buffer freed, puts the next ones in the
// main heap, which trims only a free top over twice that threshold, so that a warmed-up model kept
// ~100 MB of free heap resident beside its compiled weights. A trim walks the free lists, a small
// share of a call with a graph break (figures: bench/RESULTS.md). Calls that run only compiled
// code never trim.
void release_free_heap(std::atomic<int64_t>& last_ns) {
#if defined(__GLIBC__)
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch()).count();
  int64_t last = last_ns.load();
  if (now - last < 250'000'000 || !last_ns.compare_exchange_strong(last, now)) return;
  ::malloc_trim(0);
#else
  (void)last_ns;
#endif
}
// A tuner for the session's team unless the caller fixed it (Options::interp_threads, --threads,
// OMP_NUM_THREADS, adapt_threads off) or there is one core; else `why` says which.
std::unique_ptr<ThreadTuner> make_tuner(const Options& options, int full, std::string& why) {
  if (std::getenv("OMP_NUM_THREADS")) why = "fixed by OMP_NUM_THREADS";
  else if (options.interp_threads > 0) why = "fixed by Options::interp_threads (--threads)";
  else if (!options.adapt_threads) why = "fixed: adapt_threads off (TERRACE_ADAPT_THREADS)";
  else if (full <= 1) why = "fixed: one core";
  if (!why.empty()) return nullptr;
  ThreadTuner::Config config;
  config.full = full;
  return std::make_unique<ThreadTuner>(config);
}
}  // namespace

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Session::~Session() {
  impl_->plans.reset();  // a taken plan holds its tier's device memory
  if (!impl_->options.trace) return;
  impl_->bodies.reset();  // their jobs run on the threads of `tiers`, which stops them
  impl_->tiers.reset();   // its compiles end (or are abandoned) before the trace is written
  try {
    impl_->options.trace->write();
  } catch (const std::exception& e) {
    log(LogLevel::Warn, e.what());
  }
}

void Session::write_profile() const {
  if (impl_->options.trace) impl_->options.trace->write();
}

std::unique_ptr<Session> Session::from_graph(std::shared_ptr<const Graph> graph, Options options) {
  options = options.resolved();  // Options::mode
  if (!options.profile_file.empty() && !options.trace) options.trace = Trace::for_file(options.profile_file);
  auto impl = std::make_unique<Impl>();
  // The graph optimizer (tiers/passes/), with the rewrites the ladder's tiers compile: the plan, the
  // tiers and graph() see the optimized graph. Constant folding runs the interpreter: on the
  // session's threads, as run() does.
  std::vector<std::unique_ptr<Backend>> ladder = make_ladder(options);
  {
    ScopedOmpThreads threads(options.interp_threads);
    impl->graph = optimize_graph(std::move(graph), options.optimize, pass_config_for(ladder, options));
  }
  impl->options = options;
  impl->full_team = options.interp_threads > 0 ? options.interp_threads : omp_get_max_threads();
  impl->tuner = make_tuner(options, impl->full_team, impl->fixed_why);
  const Graph& g = *impl->graph;
  impl->plan = partition_for(g, ladder, options);
  impl->step_of_node = step_of_node(g, impl->plan);
  impl->last_use = last_use_positions(g, impl->step_of_node);
  check_graph_breaks(g, impl->plan, options);  // the graph_breaks log topic; Options::strict
  impl->tiers = std::make_unique<TierManager>(impl->graph, impl->plan, options, std::move(ladder));
  impl->plans = std::make_unique<CallPlans>(g, impl->plan, impl->last_use, *impl->tiers, options);
  impl->bodies = std::make_unique<BodyPlans>(impl->graph, options, *impl->tiers, int(impl->plan.regions.size()));
  return std::unique_ptr<Session>(new Session(std::move(impl)));
}

std::unique_ptr<Session> Session::load(const std::string& path, Options options) {
  return from_graph(load_onnx_file(path).graph, options);
}

std::unique_ptr<Session> Session::load_bytes(std::string_view bytes, Options options) {
  return from_graph(load_onnx_bytes(bytes).graph, options);
}

const Graph& Session::graph() const { return *impl_->graph; }
const Options& Session::options() const { return impl_->options; }
const Plan& Session::plan() const { return impl_->plan; }
void Session::wait_for_compiles() {
  impl_->tiers->wait_idle();
  impl_->bodies->wait_idle();
}

std::vector<CallRecord> Session::calls() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->calls;
}

CallRecord Session::last_call() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->calls.empty() ? CallRecord{-1, 0, {}} : impl_->calls.back();
}


NamedTensors Session::run(const NamedTensors& inputs) { return run(inputs, RunOptions()); }

Tensor Session::to_device(const Tensor& t) { return impl_->tiers->to_device(t); }

// Before the interpreter runs `node` (a graph break): its inputs on the host. A node with
// subgraphs may read any value of the frame by name, so then every device value comes back. Each
// is copied once: the host copy takes the value's place for later host readers, and the device
// tensor is kept in `on_device` for later GPU regions, which read it without a second copy.
static void node_inputs_to_host(Frame& frame, const Node& node, std::unordered_map<int, RValue>& on_device,
                                CallTally& tally) {
  auto fetch = [&](int v) {
    RValue& rv = frame.env[size_t(v)];
    if (rv.kind != ValueKind::Tensor || !rv.tensor.on_device()) return;
    on_device[v] = rv;
    rv = RValue(rv.tensor.to_host());
    ++tally.transfers;
  };
  if (!node.subgraphs().empty()) {
    for (size_t v = 0; v < frame.env.size(); ++v) fetch(int(v));
    return;
  }
  for (int v : node.inputs)
    if (v >= 0) fetch(v);
}

// What one call did, for its CallRecord.
struct Session::CallState {
  int64_t index = 0;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  CallTally tally;
  bool tiers_used[kMaxTiers] = {};
  std::unordered_map<int, RValue> device_copies;  // see node_inputs_to_host
  int team = 0;        // the OpenMP team the call runs with
  uint64_t epoch = 0;  // the tier manager's epoch when it started (ThreadTuner::record)
};

// Runs the session's steps from `from` on, each region through dispatch; records them in `rec`.
void Session::walk(Frame& frame, size_t from, CallState& c, PlanRecording* rec) {
  Impl& im = *impl_;
  const Graph& g = *im.graph;
  Trace* const trace = im.options.trace.get();  // Options::profile_file
  for (size_t s = from; s < im.plan.steps.size(); ++s) {
    const Step& step = im.plan.steps[s];
    check_cancelled();
    if (step.region < 0) {
      TraceSpan span(trace, "node", "interp node", step.node);
      node_inputs_to_host(frame, g.nodes[size_t(step.node)], c.device_copies, c.tally);
      run_node(frame, step.node);
      c.tiers_used[0] = true;
      release_dead_inputs(frame, step.node, int(s), im.last_use);
    } else {
      TraceSpan span(trace, "region", "region", step.region);
      // Inputs a graph break fetched to the host: the region reads their device tensors (none
      // without tier 2: then nothing is looked up).
      std::vector<int> swapped;
      if (!c.device_copies.empty())
        for (int v : im.plan.regions[size_t(step.region)].inputs) {
          auto it = c.device_copies.find(v);
          if (it == c.device_copies.end() || frame.env[size_t(v)].kind != ValueKind::Tensor) continue;
          std::swap(frame.env[size_t(v)], it->second);
          swapped.push_back(v);
        }
      const RegionRun ran = im.tiers->execute(step.region, frame, c.index);
      for (int v : swapped) std::swap(frame.env[size_t(v)], c.device_copies[v]);
      if (rec) im.plans->record(*rec, s, ran, frame);
      c.tiers_used[int(ran.tier)] = true;
      c.tally.transfers += ran.tally.transfers;
      c.tally.interpreted += ran.tally.interpreted;
      span.arg("tier", tier_name(ran.tier));
      for (int n : im.plan.regions[size_t(step.region)].nodes)
        release_dead_inputs(frame, n, int(s), im.last_use);
    }
    if (!c.device_copies.empty())  // a released value's device tensor goes with it
      std::erase_if(c.device_copies,
                    [&](const auto& e) { return frame.env[size_t(e.first)].kind != ValueKind::Tensor; });
  }
}

NamedTensors Session::run(const NamedTensors& inputs, const RunOptions& run_options) {
  Impl& im = *impl_;
  CancelScope cancel(run_options.terminate_flag(), run_options.deadline);
  const Graph& g = *im.graph;
  // Options::interp_threads for this run() on the calling thread (0: its own setting), or the
  // tuner's choice; tier 1 still builds for the whole team (ScopedBuildTeam).
  ScopedOmpThreads threads(im.tuner ? im.tuner->team_for_call() : im.options.interp_threads);
  ScopedBuildTeam build_team(im.tuner ? im.full_team : 0);
  std::vector<RValue> bound = bind_inputs(g, inputs);
  CallState c;
  c.team = omp_get_max_threads();
  ScopedOmpDynamic capped(im.tuner && c.team < im.full_team);
  c.epoch = im.tiers->epoch();
  {
    std::lock_guard<std::mutex> lock(im.mu);
    c.index = int64_t(im.calls.size());
    im.calls.push_back({c.index, 0, {}});
  }
  c.t0 = std::chrono::steady_clock::now();
  // The graph inputs as tensors: a call with a sequence or optional input has no plan.
  std::vector<Tensor> in;
  for (const RValue& rv : bound)
    if (rv.kind == ValueKind::Tensor && rv.tensor.defined()) in.push_back(rv.tensor);
  const bool plannable = in.size() == bound.size();
  std::shared_ptr<CallPlan> plan = plannable ? im.plans->find(in) : nullptr;
  if (plan)
    if (std::optional<std::vector<Tensor>> out = run_whole(*plan, in, run_options.outputs_on_device, c)) {
      NamedTensors result;
      for (size_t i = 0; i < g.outputs.size(); ++i)
        result.emplace_back(g.values[size_t(g.outputs[i])].name, std::move((*out)[i]));
      im.plans->timed(*plan, record_call(c), true);
      return result;
    }
  Frame frame = make_frame(g, std::move(bound), nullptr);
  if (!im.bodies->empty()) frame.bodies = im.bodies.get();
  size_t from = 0;
  if (plan) {
    from = im.plans->run(*plan, frame, c.device_copies, c.tally, im.options.trace.get(), c.tiers_used);
    if (from < im.plan.steps.size()) im.plans->left(*plan);
  }
  // Only a call walked from its first step is recorded for a plan.
  PlanRecording rec;
  rec.epoch = im.tiers->epoch();
  const bool recording = plannable && from == 0;
  walk(frame, from, c, recording ? &rec : nullptr);
  std::vector<RValue> out = frame_outputs(frame);
  if (c.tiers_used[int(Tier::Interp)] || c.tally.interpreted > 0) release_free_heap(im.last_trim_ns);
  NamedTensors result;
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    const std::string& name = g.values[size_t(g.outputs[i])].name;
    TERRACE_CHECK(out[i].kind == ValueKind::Tensor, NotImplemented, "output '", name,
                  "' is a sequence or optional; Session::run returns tensors only");
    Tensor t = std::move(out[i].tensor);
    if (t.on_device() && !run_options.outputs_on_device) {
      t = t.to_host();
      ++c.tally.transfers;
    }
    result.emplace_back(name, std::move(t));
  }
  const double ms = record_call(c);
  if (plan && from == im.plan.steps.size()) im.plans->timed(*plan, ms, false);
  if (recording && c.tally.interpreted == 0) im.plans->walked(in, rec, c.tiers_used, ms);
  if (recording) {
    std::vector<Tensor> outs;
    for (const auto& [name, t] : result) outs.push_back(t);
    im.plans->finish(rec, in, outs, ms);
  }
  return result;
}

// The plan's whole-plan version, if a tier took it: its outputs, or nullopt for a call to run step
// by step (none taken, a run-time check fired, or it failed: then it is dropped, and says why).
std::optional<std::vector<Tensor>> Session::run_whole(CallPlan& plan, const std::vector<Tensor>& in, bool on_device,
                                                      CallState& c) {
  const std::shared_ptr<TakenPlan> taken = plan.taken();
  if (!taken) return std::nullopt;
  std::optional<std::vector<Tensor>> out;
  try {
    out = taken->run(in, on_device, c.tally);
  } catch (const std::exception& e) {
    plan.set_taken(nullptr);
    plan.set_whole(std::string("dropped: ") + e.what());
    log_event(LogTopic::Promotions, LogLevel::Warn, "call plan for ", plan.signature.str(), " ", plan.whole());
    return std::nullopt;
  }
  if (!out) return std::nullopt;
  plan.whole_calls.fetch_add(1);
  std::copy(std::begin(plan.tiers_used), std::end(plan.tiers_used), std::begin(c.tiers_used));
  return out;
}

double Session::record_call(const CallState& c) {
  Impl& im = *impl_;
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - c.t0).count();
  if (im.tuner) im.tuner->record(c.team, ms, c.epoch);
  std::lock_guard<std::mutex> lock(im.mu);
  CallRecord& rec = im.calls[size_t(c.index)];
  rec.ms = ms;
  rec.threads = c.team;
  rec.transfers = c.tally.transfers;
  for (int t = 0; t < kMaxTiers; ++t)
    if (c.tiers_used[t]) rec.tiers.push_back(tier_name(Tier(t)));
  if (Trace* trace = im.options.trace.get()) {
    std::string tiers;
    for (const std::string& t : rec.tiers) tiers += (tiers.empty() ? "" : "+") + t;
    trace->span("call", "call " + std::to_string(c.index), c.t0,
                {{"tiers", tiers}, {"transfers", std::to_string(rec.transfers)}});
    if (rec.transfers) trace->counter("transfer", "host<->device transfers per call", "tensors", double(rec.transfers));
  }
  return ms;
}

ThreadsReport Session::threads_report() const {
  ThreadsReport r;
  r.adaptive = impl_->tuner != nullptr;
  if (!r.adaptive) {
    r.team = impl_->full_team;
    r.why = impl_->fixed_why;
    return r;
  }
  r.team = impl_->tuner->team();
  r.why = impl_->tuner->why();
  if (r.why.empty()) r.why = "measuring: the whole team until the first decision";
  for (const ThreadTuner::Decision& d : impl_->tuner->decisions()) r.decisions.push_back({d.call, d.team, d.why});
  return r;
}

std::vector<PlanReport> Session::plan_reports() const { return impl_->plans->report(); }

std::vector<RegionReport> Session::region_reports() const {
  impl_->plans->credit_all();
  std::vector<RegionReport> out = impl_->tiers->report();
  for (RegionReport& r : impl_->bodies->report()) out.push_back(std::move(r));
  return out;
}

std::string Session::report_json() const {
  JsonWriter j;
  j.begin_object();
  j.key("regions").begin_array();
  for (const RegionReport& r : region_reports()) {
    j.begin_object().field("id", r.id).field("ops", r.ops).field("tier", tier_name(r.tier))
        .field("state", r.state).field("calls", r.calls).field("total_ms", r.total_ms).field("compile_ms", r.compile_ms)
        .field("tune_ms", r.tune_ms).field("validate_ms", r.validate_ms).field("recheck_ms", r.recheck_ms)
        .field("promoted_at_call", r.promoted_at_call).field("deopts", r.deopts)
        .field("guard_failures", r.guard_failures).field("validation", r.validation)
        .field("transfers", r.transfers).field("device_ms", r.device_ms).field("climb", r.climb)
        .field("rechecks", r.rechecks).field("version_count", r.versions).field("symbolic", r.symbolic);
    if (!r.subgraph.empty()) j.field("subgraph", r.subgraph).field("guard", r.guard);
    j.key("versions").begin_array();
    for (const RegionReport::VersionInfo& v : r.version_list)
      j.begin_object().field("backend", std::string(tier_name(v.tier))).field("kind", v.kind).field("signature", v.signature)
          .field("guards", v.guards).field("calls", v.calls).field("in_use", !v.demoted).end_object();
    j.end_array().end_object();
  }
  j.end_array();
  j.key("plans").begin_array();
  for (const PlanReport& p : plan_reports()) {
    j.begin_object().field("signature", p.signature).field("regions", p.regions).field("graph_breaks", p.graph_breaks)
        .field("copies", p.copies).field("calls", p.calls).field("whole_calls", p.whole_calls).field("whole", p.whole)
        .field("left", p.left).field("judged", p.judged);
    j.key("memory").begin_array();
    for (const PlanReport::Memory& m : p.memory)
      j.begin_object().field("device", m.device).field("values", m.values).field("bytes", int64_t(m.bytes))
          .field("blocks", int64_t(m.blocks)).end_object();
    j.end_array().end_object();
  }
  j.end_array();
  j.field("warnings", impl_->graph->warnings);
  j.key("graph_breaks").begin_array();
  for (const Step& s : impl_->plan.steps)
    if (s.region < 0)
      j.begin_object().field("node", impl_->graph->nodes[size_t(s.node)].describe())
          .field("reason", s.reason).end_object();
  j.end_array();
  j.key("calls").begin_array();
  for (const CallRecord& c : calls())
    j.begin_object().field("index", c.index).field("ms", c.ms).field("tiers", c.tiers)
        .field("transfers", c.transfers).field("threads", c.threads).end_object();
  j.end_array();
  const ThreadsReport t = threads_report();
  j.key("threads").begin_object().field("team", t.team).field("adaptive", t.adaptive).field("why", t.why);
  j.key("decisions").begin_array();
  for (const ThreadsReport::Decision& d : t.decisions)
    j.begin_object().field("call", d.call).field("team", d.team).field("why", d.why).end_object();
  j.end_array().end_object();
  j.end_object();
  return j.str();
}

std::string Session::report() const {
  std::ostringstream os;
  for (const std::string& w : impl_->graph->warnings) os << "warning: " << w << "\n";
  for (const RegionReport& r : region_reports()) {
    os << "region " << r.id << " [" << r.ops << "]: " << tier_name(r.tier) << ", " << r.state
       << ", " << r.calls << " calls, " << r.deopts << " deopts, compile " << r.compile_ms << " ms";
    if (r.tune_ms > 0) os << " (tuning " << r.tune_ms << " ms of it)";
    os << ", validation " << r.validation;
    if (r.rechecks) os << " (" << r.rechecks << " later calls re-checked)";
    if (r.transfers) os << ", " << r.transfers << " host<->device transfers";
    os << "\n";
    if (!r.climb.empty()) os << "    climb: " << r.climb << "\n";
    if (!r.subgraph.empty()) os << "    in " << r.subgraph << ", behind " << r.guard << "\n";
    for (auto& gf : r.guard_failures) os << "    guard failed: " << gf << "\n";
  }
  const ThreadsReport t = threads_report();
  os << "threads: " << t.team << (t.adaptive ? " (adaptive): " : " (fixed): ") << t.why << "\n";
  for (const PlanReport& p : plan_reports()) {
    os << "call plan " << p.signature << ": " << p.regions << " regions, " << p.graph_breaks << " graph breaks, "
       << p.copies << " copies to the host; " << p.calls << " calls";
    if (p.whole_calls) os << " (" << p.whole_calls << " whole)";
    if (p.left) os << ", " << p.left << " left it at a step";
    if (!p.whole.empty()) os << "; " << p.whole;
    if (!p.judged.empty()) os << "; climb " << p.judged;
    for (const PlanReport::Memory& m : p.memory)
      os << "; " << m.values << " values in a " << m.bytes << "-byte " << m.device << " block (" << m.blocks
         << " made)";
    os << "\n";
  }
  return os.str();
}

}  // namespace terrace
