// TierManager: the state machine each region goes through (interpreting -> compiling -> compiled,
// with deopts per call and demotion on a failed validation) over the ladder of compiled tiers; its
// background jobs run on tiers/jobs.h.
#include "tiers/tier_manager.h"

#include <algorithm>
#include <chrono>
#include <compare>
#include <mutex>
#include <thread>

#include "interp/compare.h"
#include "interp/log.h"
#include "interp/omp_threads.h"
#include "tiers/jobs.h"
#include "tiers/repro.h"
#include "tiers/trace.h"

namespace terrace {

namespace {
constexpr size_t kMaxGuardFailuresKept = 16;
using VersionList = std::vector<std::shared_ptr<Version>>;
double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

// A version's identity: the rung of the ladder that compiled it, and the input signature
// (signature_of) it was compiled for. Counting, compiling, failures and dispatch share it.
struct VersionKey {
  size_t rung = 0;
  std::string signature;
  auto operator<=>(const VersionKey&) const = default;
};

struct TierManager::RegionState {
  const Region* region = nullptr;
  std::shared_ptr<const VersionList> versions = std::make_shared<VersionList>();  // atomic access
  mutable std::mutex mu;  // guards everything below
  int64_t calls = 0, deopts = 0;
  double total_ms = 0;
  // Calls served one rung below a key's (the interpreter for rung 0), counted for its promotion.
  std::map<VersionKey, int> served;
  std::set<VersionKey> compiling, failed;  // keys in flight / never to retry
  std::vector<std::string> guard_failures;
  std::string validation = "pending";
  std::string stopped;  // why the region no longer compiles, if it does not
  double compile_ms = 0;
  int64_t promoted_at_call = -1;
  // Continuous validation: compiled time served, interpreter time spent re-checking, and whether
  // a re-check is queued (one at a time per region).
  double served_ms = 0, recheck_ms = 0;
  double interp_ms = 0;  // the interpreter's latest time for the region (a re-check's cost)
  bool recheck_queued = false;
  int64_t rechecks = 0;
  // Per rung: why the region cannot run there ("" when it can; rung 0's partition made sure).
  std::vector<std::string> unable;
  std::string climb;  // why a region with a compiled version is not on the next rung up

  std::shared_ptr<const VersionList> load() const { return std::atomic_load(&versions); }
  void publish(std::shared_ptr<Version> v) {  // caller holds mu
    auto next = std::make_shared<VersionList>(*load());
    // Highest tier first: dispatch takes the first version whose guards pass.
    auto at = std::find_if(next->begin(), next->end(), [&](const auto& o) { return o->tier < v->tier; });
    next->insert(at, std::move(v));
    std::atomic_store(&versions, std::shared_ptr<const VersionList>(std::move(next)));
  }
};

struct TierManager::Core : std::enable_shared_from_this<Core> {
  Core(std::shared_ptr<const Graph> g, Plan p, const Options& o, std::vector<std::unique_ptr<Backend>> ladder)
      : graph_ptr(std::move(g)), graph_(*graph_ptr), plan_(std::move(p)), options_(o), ladder_(std::move(ladder)) {
    for (const Region& r : plan_.regions) {
      regions_.push_back(std::make_unique<RegionState>());
      RegionState& st = *regions_.back();
      st.region = &r;
      release_after_.push_back(released_after(graph_, r));
      st.unable.assign(ladder_.size(), "");
      for (size_t k = 1; k < ladder_.size(); ++k)
        for (int n : r.nodes)
          if (std::string why = ladder_[k]->can_compile(graph_, graph_.nodes[size_t(n)]); !why.empty()) {
            st.unable[k] = graph_.nodes[size_t(n)].describe() + ": " + why;
            break;
          }
      if (ladder_.size() > 1 && !st.unable[1].empty()) st.climb = "stays on " + rung_name(0) + ": " + st.unable[1];
      if (options_.validate == ValidateMode::Off) st.validation = "off";
      if (ladder_.empty()) st.stopped = "no compiled tier enabled";
    }
  }

  // "tier 1": how reports name a rung.
  std::string rung_name(size_t rung) const { return "tier " + std::to_string(int(ladder_[rung]->tier())); }

  void interpret_region(const Region& region, Frame& frame) const;
  // After the interpreter ran a compiled region for validation or a re-check: lets the OS take back
  // the pages of its file-backed initializers (Tensor::drop_resident_pages), which the compiled
  // version may not read (oneDNN's packed copies); one that reads them faults them back.
  void drop_constant_pages(const Region& region) const;
  Tier execute(int r, Frame& frame, int64_t call, CallTally& tally);
  Tier dispatch(RegionState& st, Frame& frame, int64_t call, CallTally& tally);
  // Counts a call the rung below `key.rung` served (the interpreter for rung 0) and queues the
  // region's compile on that rung at its promotion threshold. Caller holds st.mu.
  void maybe_promote(RegionState& st, const VersionKey& key, const std::vector<Tensor>& in, int64_t call);
  void compile_job(RegionState& st, VersionKey key, std::vector<Tensor> in, int64_t call);
  bool validate(RegionState& st, Version& v, Frame& frame, CallTally& tally, const std::vector<Tensor>& in,
                const std::vector<Tensor>& out);
  // Why `out` (the version's) differs from `expected` (the interpreter's), or nullopt.
  std::optional<std::string> mismatch(const Version& v, const Region& region, const std::vector<Tensor>& in,
                                       const std::vector<Tensor>& expected, const std::vector<Tensor>& out) const;
  // Continuous validation: runs the interpreter on a copy of a served call in the background.
  void maybe_recheck(RegionState& st, const std::shared_ptr<Version>& v, const std::vector<Tensor>& in,
                     const std::vector<Tensor>& out, double run_ms, int64_t call);
  void recheck_job(RegionState& st, std::shared_ptr<Version> v, std::vector<Tensor> in,
                   std::vector<Tensor> out, int64_t call);
  // Marks v demoted with the reason (st.mu held by the caller).
  void demote(RegionState& st, Version& v, const std::string& why);
  std::vector<RegionReport> report() const;

  std::shared_ptr<const Graph> graph_ptr;
  const Graph& graph_;
  const Plan plan_;
  const Options options_;
  // The compiled tiers, lowest first: a region climbs from the interpreter to rung 0, then from each
  // rung to the next once that rung's promotion threshold of calls was served below it.
  std::vector<std::unique_ptr<Backend>> ladder_;
  std::vector<std::unique_ptr<RegionState>> regions_;
  std::vector<std::vector<std::vector<int>>> release_after_;  // per region: released_after (partition.h)
  JobPool* jobs_ = nullptr;    // compiles; valid while any job may run (leaked when one is abandoned)
  JobPool* checks_ = nullptr;  // continuous validation's re-checks, at the lowest priority
};

TierManager::TierManager(std::shared_ptr<const Graph> graph, Plan plan, const Options& options,
                         std::vector<std::unique_ptr<Backend>> ladder)
    : core_(std::make_shared<Core>(std::move(graph), std::move(plan), options, std::move(ladder))),
      jobs_(new JobPool(options.compile_threads)), checks_(new JobPool(1, 19)) {
  core_->jobs_ = jobs_;
  core_->checks_ = checks_;
}

TierManager::~TierManager() {
  for (JobPool* jobs : {jobs_, checks_}) {
    if (jobs->stop(core_->options_.compile_wait_ms)) {
      delete jobs;
      continue;
    }
    log(LogLevel::Warn, "a background job still runs after ", core_->options_.compile_wait_ms,
        " ms; abandoned: it ends on its own thread and its result is dropped");
    jobs->abandon();  // and the pool is left alive for the detached thread
  }
}

Tier TierManager::execute(int r, Frame& frame, int64_t call, CallTally& tally) {
  return core_->execute(r, frame, call, tally);
}
std::vector<RegionReport> TierManager::report() const { return core_->report(); }

Tensor TierManager::to_device(const Tensor& t) {
  for (auto it = core_->ladder_.rbegin(); it != core_->ladder_.rend(); ++it)
    if ((*it)->device_resident()) return (*it)->to_device(t);
  fail(ErrorCode::NotImplemented, "no device to put tensor ", shape_str(t.shape()),
       " on: this session has no tier 2 or other tier with device memory (no GPU, or Options::max_tier below gpu)");
}

void TierManager::wait_idle() {
  jobs_->wait();
  checks_->wait();
}

// What a compile job keeps of a call's inputs: their dtypes and shapes, and the contents of small
// ones only (a backend may compile for the value of a small shape-like input, behind a value
// guard: CompiledRegion::value_inputs), not the caller's data.
static std::vector<Tensor> compile_inputs(const std::vector<Tensor>& in) {
  constexpr int64_t kKeptElements = 1 << 16;
  std::vector<Tensor> kept;
  for (const Tensor& t : in)
    kept.push_back(t.numel() > kKeptElements ? Tensor::empty(t.dtype(), t.shape())
                   : t.on_device()          ? t.to_host()
                                            : t.clone());
  return kept;
}

// Device tensors among a region's inputs, copied to the host for a consumer that is not a
// device-resident version (tier 1, the interpreter, validation), in `in` and in the frame, so that
// the next host consumer of the value finds it there; each copy counted for the call.
static void inputs_to_host(const Region& region, Frame& frame, std::vector<Tensor>& in, CallTally& tally) {
  for (size_t i = 0; i < in.size(); ++i) {
    if (!in[i].on_device()) continue;
    in[i] = in[i].to_host();
    frame.env[size_t(region.inputs[i])] = RValue(in[i]);
    ++tally.transfers;
  }
}

// Host copies of a region's outputs for a comparison (a device tensor is copied; a host one is
// itself).
static std::vector<Tensor> host_copies(const std::vector<Tensor>& out) {
  std::vector<Tensor> host;
  for (const Tensor& t : out) host.push_back(t.to_host());
  return host;
}

// Values made inside the region are released after their last reader there (released_after).
void TierManager::Core::interpret_region(const Region& region, Frame& frame) const {
  const std::vector<std::vector<int>>& release = release_after_[size_t(&region - plan_.regions.data())];
  for (size_t k = 0; k < region.nodes.size(); ++k) {
    run_node(frame, region.nodes[k]);
    for (int v : release[k]) frame.env[size_t(v)] = RValue();
  }
}

void TierManager::Core::drop_constant_pages(const Region& region) const {
  for (int v : region.inputs)
    if (auto it = graph_.initializers.find(v); it != graph_.initializers.end()) it->second.drop_resident_pages();
}

Tier TierManager::Core::execute(int r, Frame& frame, int64_t call, CallTally& tally) {
  RegionState& st = *regions_[size_t(r)];
  auto t0 = std::chrono::steady_clock::now();
  Tier tier = dispatch(st, frame, call, tally);
  double ms = ms_since(t0);
  std::lock_guard<std::mutex> lock(st.mu);
  ++st.calls;
  st.total_ms += ms;
  return tier;
}

Tier TierManager::Core::dispatch(RegionState& st, Frame& frame, int64_t call, CallTally& tally) {
  const Region& region = *st.region;
  const int r = region.id;
  std::vector<Tensor> in;
  in.reserve(region.inputs.size());
  bool all_tensors = true;
  for (int v : region.inputs) {
    const RValue& rv = frame.env[size_t(v)];
    all_tensors = all_tensors && rv.kind == ValueKind::Tensor && rv.tensor.defined();
    in.push_back(rv.tensor);
  }

  std::shared_ptr<Version> chosen;
  std::optional<GuardFailure> failure;
  auto versions = st.load();
  std::vector<Tensor> out;
  std::chrono::steady_clock::time_point run_t0;
  std::shared_ptr<Version> refused;  // a version whose run-time check rejected this call's inputs
  std::string refused_what;
  // Versions highest tier first: one that fails at run time is demoted and the call goes to the
  // next (a tier-2 version's failure to the region's tier-1 version), then to the interpreter.
  if (all_tensors)
    for (const auto& v : *versions) {
      if (v->demoted.load()) continue;
      if (auto f = v->guards.check(in)) {
        if (!failure) failure = f;
        continue;
      }
      const bool device = ladder_[v->rung]->device_resident();
      if (!device) inputs_to_host(region, frame, in, tally);
      run_t0 = std::chrono::steady_clock::now();
      try {
        out = v->code->run(in, tally);
        chosen = v;
        if (Trace* t = options_.trace.get(); t && device)
          t->counter("transfer", "host<->device transfers, region " + std::to_string(r), "tensors", double(v->code->transfers.load()));
        break;
      } catch (const std::exception& e) {
        // A run-time check of the compiled code (an index out of range) rejecting the inputs: the
        // interpreter decides below whether they are bad (its error goes to the caller, and the
        // version stays) or the check was wrong (the version is demoted).
        if (const auto* err = dynamic_cast<const Error*>(&e); err && err->code() == ErrorCode::InvalidArgument) {
          refused = v;
          refused_what = e.what();
          break;
        }
        // Compiled code or a library that fails otherwise (a terrace::Error, or anything a
        // library throws) is demoted; nothing escapes untyped.
        const std::string what = dynamic_cast<const Error*>(&e)
                                     ? std::string(e.what())
                                     : std::string(error_code_name(ErrorCode::RuntimeError)) + ": " + e.what();
        v->demoted = true;
        std::lock_guard<std::mutex> lock(st.mu);
        demote(st, *v, "compiled code raised " + what);
      }
    }

  if (refused) {
    inputs_to_host(region, frame, in, tally);
    ++tally.interpreted;
    interpret_region(region, frame);  // raises the interpreter's own error when the inputs are bad
    refused->demoted = true;          // it answered: the compiled check was wrong
    std::lock_guard<std::mutex> lock(st.mu);
    demote(st, *refused, "compiled code raised " + refused_what + " where the interpreter answers");
    return Tier::Interp;
  }

  if (chosen) {
    bool check = options_.validate == ValidateMode::Always ||
                 (options_.validate == ValidateMode::First && chosen->validations_left.fetch_sub(1) > 0);
    if (!check) maybe_recheck(st, chosen, in, out, ms_since(run_t0), call);
    const bool passed = check && validate(st, *chosen, frame, tally, in, out);
    if (check) drop_constant_pages(region);
    if (!check || passed) {
      for (size_t i = 0; i < region.outputs.size(); ++i)
        frame.env[size_t(region.outputs[i])] = RValue(std::move(out[i]));
      if (chosen->rung + 1 < ladder_.size()) {
        std::lock_guard<std::mutex> lock(st.mu);
        maybe_promote(st, {chosen->rung + 1, chosen->signature}, in, call);
      }
      return chosen->tier;
    }
    return Tier::Interp;  // validation failed: the frame holds the interpreter's results
  }

  inputs_to_host(region, frame, in, tally);
  const auto interp_t0 = std::chrono::steady_clock::now();
  ++tally.interpreted;
  interpret_region(region, frame);
  const double interp_ms = ms_since(interp_t0);
  std::string sig = all_tensors ? signature_of(in) : std::string();
  std::lock_guard<std::mutex> lock(st.mu);
  st.interp_ms = interp_ms;
  if (failure) {
    ++st.deopts;
    st.guard_failures.insert(st.guard_failures.begin(), failure->describe());
    if (st.guard_failures.size() > kMaxGuardFailuresKept) st.guard_failures.pop_back();
    log_event(LogTopic::Deopts, LogLevel::Debug, "region ", r, ": deopt, guard failed: ", failure->describe());
    if (Trace* t = options_.trace.get()) t->instant("deopt", "deopt region " + std::to_string(r), {{"reason", failure->describe()}});
  }
  if (all_tensors && !ladder_.empty()) maybe_promote(st, {0, sig}, in, call);
  return Tier::Interp;
}

void TierManager::Core::maybe_promote(RegionState& st, const VersionKey& key, const std::vector<Tensor>& in,
                                      int64_t call) {
  const bool first = key.rung == 0;  // from the interpreter: a failure stops the region's compiles
  if (first ? !st.stopped.empty() : !st.unable[key.rung].empty()) return;
  const int count = ++st.served[key];
  if (count < ladder_[key.rung]->promotion_threshold(options_) || st.compiling.count(key) || st.failed.count(key))
    return;
  for (const auto& v : *st.load())
    if (v->rung == key.rung && v->signature == key.signature) return;  // published (a demoted one is in `failed`)
  if (first && int(st.load()->size() + st.compiling.size()) >= options_.max_specializations) {
    st.stopped = "specialization limit (" + std::to_string(options_.max_specializations) + ") reached";
    log(LogLevel::Info, "region ", st.region->id, ": stops compiling: ", st.stopped);
    return;
  }
  st.compiling.insert(key);
  if (first && (!st.load()->empty() || !st.failed.empty()))
    log_event(LogTopic::Recompiles, LogLevel::Debug, "region ", st.region->id, " (", st.region->ops(), "): recompiling for ",
              key.signature, " (", st.load()->size(), " version(s) already; last guard failure: ",
              st.guard_failures.empty() ? std::string("none") : st.guard_failures.front(), ")");
  std::vector<Tensor> shapes = compile_inputs(in);
  RegionState* sp = &st;
  // Built for the caller's OpenMP team (Options::interp_threads, or its own setting), not the job
  // thread's default: tier 1 runs parallel work on one thread or on the whole team, never on a
  // team of another size (jit/dnnl_ops.cpp's threads_for).
  const int team = omp_get_max_threads();
  std::string why = jobs_->enqueue([self = shared_from_this(), sp, key, shapes, call, team] {
    ScopedOmpThreads threads(team);
    self->compile_job(*sp, key, shapes, call);
  });
  if (why.empty()) return;
  st.compiling.erase(key);  // the region stays where it is, and says why
  why = std::string(error_code_name(ErrorCode::RuntimeError)) + ": " + why;
  if (!first) {
    st.failed.insert(key);
    st.climb = "stays on " + rung_name(key.rung - 1) + ": " + why;
    return;
  }
  st.stopped = why;
  if (st.validation == "pending" && st.load()->empty()) st.validation = "off";
  log(LogLevel::Warn, "region ", st.region->id, " (", st.region->ops(), "): stays on the interpreter: ", st.stopped);
}

// A version that fails or is demoted above rung 0 leaves the lower rungs' versions of its
// signature serving; one that fails on rung 0 stops the region's compiles.
void TierManager::Core::compile_job(RegionState& st, VersionKey key, std::vector<Tensor> in, int64_t call) {
  Backend& backend = *ladder_[key.rung];
  const std::string tier = tier_name(backend.tier());
  auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<CompiledRegion> code;
  std::string error;
  const std::string what = "compile (" + tier + ") region";
  TraceSpan span(options_.trace.get(), "compile", what.c_str(), st.region->id);
  span.arg("signature", key.signature);
  try {
    if (fault_enabled("slow-compile:" + tier))  // holds the compile back, for tests of no-waiting
      std::this_thread::sleep_for(std::chrono::seconds(2));
    if (fault_enabled("hang-compile:" + tier))  // a compile that does not come back, for tests of abandoning
      std::this_thread::sleep_for(std::chrono::hours(1));
    // The host out of memory mid-compile (a device-resident tier's oom fault is the device's, at
    // run time: jit/cuda_memory.h).
    if (!backend.device_resident() && fault_enabled("oom:" + tier)) throw std::bad_alloc();
    code = backend.compile(graph_, *st.region, in);
  } catch (const std::bad_alloc&) {
    error = std::string(error_code_name(ErrorCode::OutOfMemory)) + ": the host ran out of memory while compiling";
  } catch (const std::exception& e) {
    error = e.what();
  }
  double ms = ms_since(t0);
  span.arg("result", code ? "compiled" : "failed: " + error);
  std::lock_guard<std::mutex> lock(st.mu);
  st.compiling.erase(key);
  st.compile_ms += ms;
  if (!code) {
    st.failed.insert(key);  // never retried: a failed compile must not loop
    log(LogLevel::Warn, "region ", st.region->id, " (", st.region->ops(), "): ", rung_name(key.rung),
        " compile failed for ", key.signature, ": ", error);
    if (key.rung > 0) {
      st.climb = "stays on " + rung_name(key.rung - 1) + ": compile failed: " + error;
      return;
    }
    if (st.validation == "pending" && st.load()->empty()) st.validation = "off";
    st.stopped = "compile failed: " + error;
    return;
  }
  auto v = std::make_shared<Version>();
  v->tier = backend.tier();
  v->rung = key.rung;
  v->signature = key.signature;
  v->guards = GuardSet::exact(in, code->value_inputs);
  v->code = std::move(code);
  v->compile_ms = ms;
  v->promoted_at_call = call;
  v->validations_left = options_.validate == ValidateMode::First ? options_.validate_calls : 0;
  if (st.promoted_at_call < 0) st.promoted_at_call = call;
  if (options_.validate != ValidateMode::Off) st.validation = "pending";
  st.publish(std::move(v));
  if (key.rung > 0) st.climb = "";
  log_event(LogTopic::Promotions, LogLevel::Info, "region ", st.region->id, " (", st.region->ops(), "): promoted to ",
            tier, " for ", key.signature, " after call ", call, ", compiled in ", ms, " ms");
}

std::optional<std::string> TierManager::Core::mismatch(const Version& v, const Region& region, const std::vector<Tensor>& in,
                                                 const std::vector<Tensor>& expected,
                                                 const std::vector<Tensor>& out) const {
  std::vector<Tensor> allowance;  // computed only when the plain tolerance fails: it costs a run
  for (size_t i = 0; i < region.outputs.size(); ++i) {
    const Tolerance tol = Tolerance::for_dtype(expected[i].dtype());
    Comparison c = compare_tensors(expected[i], out[i], tol);
    if (!c.equal) {
      if (allowance.empty()) allowance = ladder_[v.rung]->error_allowance(graph_, region, in);
      if (allowance.at(i).defined()) c = compare_tensors(expected[i], out[i], tol, allowance[i]);
    }
    if (!c.equal) return "output '" + graph_.values[size_t(region.outputs[i])].name + "': " + c.message;
  }
  return std::nullopt;
}

void TierManager::Core::demote(RegionState& st, Version& v, const std::string& why) {
  v.demoted = true;
  if (v.code) v.code->forget_cached();
  st.failed.insert({v.rung, v.signature});
  st.validation = "failed: " + why;
  if (v.rung > 0)
    st.climb = "back on " + rung_name(v.rung - 1) + ": the " + tier_name(v.tier) + " version was demoted: " + why;
  log_event(LogTopic::Validation, LogLevel::Warn, "region ", st.region->id, " (", st.region->ops(), "): demoted: ", why);
  if (Trace* t = options_.trace.get()) t->instant("deopt", "demoted region " + std::to_string(st.region->id), {{"reason", why}});
}

bool TierManager::Core::validate(RegionState& st, Version& v, Frame& frame, CallTally& tally,
                                 const std::vector<Tensor>& device_in,
                           const std::vector<Tensor>& device_out) {
  TraceSpan span(options_.trace.get(), "validation", "validate region", st.region->id);
  const Region& region = *st.region;
  std::vector<Tensor> in = device_in;
  inputs_to_host(region, frame, in, tally);
  const std::vector<Tensor> out = host_copies(device_out);  // tier 2's results, copied back
  ++tally.interpreted;
  interpret_region(region, frame);
  std::vector<Tensor> expected;
  for (int v : region.outputs) expected.push_back(frame.env[size_t(v)].tensor);
  if (std::optional<std::string> why = mismatch(v, region, in, expected, out)) {
    v.demoted = true;  // before the dump: no later call takes this version
    std::string dump = dump_repro(graph_, region, in, expected, ladder_[v.rung]->error_allowance(graph_, region, in),
                                  v.code.get(), *why);
    std::lock_guard<std::mutex> lock(st.mu);
    demote(st, v, *why + (dump.empty() ? "" : " (repro in " + dump + ")"));
    span.arg("result", "failed: " + *why);
    return false;
  }
  span.arg("result", "passed");
  log_event(LogTopic::Validation, LogLevel::Debug, "region ", region.id, " (", region.ops(), "): ", tier_name(v.tier),
            " version for ", v.signature, " agrees with the interpreter (shadow validation)");
  std::lock_guard<std::mutex> lock(st.mu);
  if (st.validation == "pending" && v.validations_left.load() <= 0) st.validation = "passed";
  return true;
}

// A call is re-checked when the interpreter time spent re-checking this region, with this
// re-check's expected cost (the interpreter's last time for it), stays within
// Options::recheck_budget of the compiled time the region has served. The cost is counted before
// the first re-check too: all regions of a model re-checked at once, right after promotion,
// slowed ResNet-50's calls by up to 1.9x for several calls (p90 41 -> 72 ms on 2 cores).
// Inputs and outputs are copied: the caller may reuse or change its buffers once run() returns.
void TierManager::Core::maybe_recheck(RegionState& st, const std::shared_ptr<Version>& v, const std::vector<Tensor>& in,
                                const std::vector<Tensor>& out, double run_ms, int64_t call) {
  if (options_.validate != ValidateMode::First || options_.recheck_budget <= 0) return;
  {
    std::lock_guard<std::mutex> lock(st.mu);
    st.served_ms += run_ms;
    if (st.recheck_queued || st.recheck_ms + st.interp_ms > options_.recheck_budget * st.served_ms) return;
    st.recheck_queued = true;
  }
  // An initializer cannot change once run() returns: the job shares it. A copy would read all of
  // it and bring a file-backed one's pages back (a token table read a few rows a call: hundreds of
  // MB resident at each re-check).
  std::vector<Tensor> in_copy, out_copy;
  for (size_t i = 0; i < in.size(); ++i) {
    const Tensor& t = in[i];
    const bool initializer = graph_.initializers.count(st.region->inputs[i]) > 0;
    in_copy.push_back(t.on_device() ? t.to_host() : initializer ? t : t.clone());
  }
  for (const Tensor& t : out) out_copy.push_back(t.on_device() ? t.to_host() : t.clone());
  RegionState* sp = &st;
  std::string why = checks_->enqueue(
      [self = shared_from_this(), sp, v, in_copy = std::move(in_copy), out_copy = std::move(out_copy), call] {
        self->recheck_job(*sp, v, in_copy, out_copy, call);
      });
  if (!why.empty()) {  // no re-check this time; a later call tries again
    std::lock_guard<std::mutex> lock(st.mu);
    st.recheck_queued = false;
  }
}

void TierManager::Core::recheck_job(RegionState& st, std::shared_ptr<Version> v, std::vector<Tensor> in,
                              std::vector<Tensor> out, int64_t call) {
  const auto t0 = std::chrono::steady_clock::now();
  const Region& region = *st.region;
  TraceSpan span(options_.trace.get(), "recheck", "re-check region", region.id);
  std::optional<std::string> why;
  std::vector<Tensor> expected;
  try {
    ScopedOmpThreads one(1);  // in the background, on a nice-19 thread: leave the cores to the calls
    Frame frame;
    frame.graph = &graph_;
    frame.env.resize(graph_.values.size());
    for (size_t i = 0; i < region.inputs.size(); ++i) frame.env[size_t(region.inputs[i])] = RValue(in[i]);
    interpret_region(region, frame);
    for (int o : region.outputs) expected.push_back(frame.env[size_t(o)].tensor);
    why = mismatch(*v, region, in, expected, out);
    drop_constant_pages(region);
  } catch (const std::exception& e) {  // compiled code answered where the interpreter raises
    why = std::string("the interpreter raised ") + e.what();
  }
  if (why) {
    v->demoted = true;
    std::string dump = expected.size() == region.outputs.size()
                           ? dump_repro(graph_, region, in, expected, ladder_[v->rung]->error_allowance(graph_, region, in),
                                        v->code.get(), *why)
                           : "";
    *why = "re-check of call " + std::to_string(call) + ": " + *why + (dump.empty() ? "" : " (repro in " + dump + ")");
  }
  std::lock_guard<std::mutex> lock(st.mu);
  st.recheck_ms += ms_since(t0);
  st.interp_ms = ms_since(t0);
  st.recheck_queued = false;
  ++st.rechecks;
  span.arg("result", why ? "failed: " + *why : std::string("passed"));
  if (why) demote(st, *v, *why);
  else
    log_event(LogTopic::Validation, LogLevel::Debug, "region ", region.id, " (", region.ops(), "): re-check of call ",
              call, " agrees with the interpreter");
}

std::vector<RegionReport> TierManager::Core::report() const {
  std::vector<RegionReport> out;
  for (const auto& sp : regions_) {
    const RegionState& st = *sp;
    std::lock_guard<std::mutex> lock(st.mu);
    RegionReport r;
    r.id = st.region->id;
    r.ops = st.region->ops();
    r.calls = st.calls;
    r.total_ms = st.total_ms;
    r.compile_ms = st.compile_ms;
    r.promoted_at_call = st.promoted_at_call;
    r.deopts = st.deopts;
    r.guard_failures = st.guard_failures;
    r.validation = st.validation;
    r.rechecks = st.rechecks;
    for (const auto& v : *st.load()) {
      r.transfers += v->code->transfers.load();
      if (!v->demoted) {
        r.tier = std::max(r.tier, v->tier);
        ++r.versions;
      }
    }
    r.climb = st.climb;
    if (r.tier == Tier::Interp && st.validation == "pending" && st.compiling.empty()) r.validation = "off";
    r.state = !st.compiling.empty() ? "compiling"
              : !st.stopped.empty() ? "stopped: " + st.stopped
              : r.versions ? "compiled" : "interpreting";
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace terrace
