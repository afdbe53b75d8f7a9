// TierManager: the ladder each region climbs (interpreting -> compiling -> compiled on each rung):
// promotion from the calls dispatch counted, background compiles, reports. Dispatch and profiling:
// dispatch.cpp; validation and demotion: validator.cpp; background jobs: tiers/jobs.h.
#include "tiers/tier_manager.h"

#include <algorithm>
#include <chrono>
#include <compare>
#include <mutex>
#include <thread>

#include "interp/compare.h"
#include "interp/log.h"
#include "interp/omp_threads.h"
#include "jit/tuning.h"
#include "tiers/jobs.h"
#include "tiers/tier_manager_core.h"
#include "tiers/trace.h"

namespace terrace {


TierManager::TierManager(std::shared_ptr<const Graph> graph, Plan plan, const Options& options,
                         std::vector<std::unique_ptr<Backend>> ladder)
    : core_(std::make_shared<Core>(std::move(graph), std::move(plan), options, std::move(ladder))),
      jobs_(new JobPool(options.compile_threads)), checks_(new JobPool(1, 19)) {
  core_->jobs_ = jobs_;
  core_->checks_ = checks_;
}

TierManager::TierManager(std::shared_ptr<const Graph> graph, Plan plan, const Options& options,
                         std::vector<std::unique_ptr<Backend>> ladder, TierManager& host)
    : core_(std::make_shared<Core>(std::move(graph), std::move(plan), options, std::move(ladder))),
      jobs_(host.jobs_), checks_(host.checks_), owns_jobs_(false) {
  core_->jobs_ = jobs_;
  core_->checks_ = checks_;
}

TierManager::~TierManager() {
  if (!owns_jobs_) return;
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

RegionRun TierManager::execute(int r, Frame& frame, int64_t call) { return core_->execute(r, frame, call); }
std::vector<RegionReport> TierManager::report() const { return core_->report(); }
uint64_t TierManager::epoch() const { return core_->epoch_.load(); }

TierManager::RegionState* TierManager::Core::holder(const std::shared_ptr<Version>& v) const {
  for (const auto& st : regions_) {
    const std::shared_ptr<const VersionList> vs = st->load();
    if (std::find(vs->begin(), vs->end(), v) != vs->end()) return st.get();
  }
  return nullptr;
}

std::shared_ptr<Version> TierManager::version_below(const std::shared_ptr<Version>& v) const {
  const RegionState* st = core_->holder(v);
  if (!st) return nullptr;
  for (const std::shared_ptr<Version>& o : *st->load())  // highest rung first
    if (o->rung < v->rung && !o->demoted && o->signature == v->signature) return o;
  return nullptr;
}

void TierManager::keep_below(const std::shared_ptr<Version>& v, const std::string& why) {
  Core& c = *core_;
  RegionState* found = c.holder(v);
  if (!found) return;
  RegionState& st = *found;
  std::lock_guard<std::mutex> lock(st.mu);
  if (v->demoted.exchange(true)) return;
  c.epoch_.fetch_add(1);
  if (v->code) v->code->forget_cached();
  st.failed.insert({v->rung, v->signature});
  st.climb = "back on " + c.below(st, v->rung) + ": " + why;
  log_event(LogTopic::Promotions, LogLevel::Info, "region ", st.region->id, " (", st.region->ops(), "): ", st.climb);
}

void TierManager::credit(int r, int64_t calls, double ms) {
  if (calls <= 0) return;
  RegionState& st = *core_->regions_[size_t(r)];
  std::lock_guard<std::mutex> lock(st.mu);
  st.profile.calls += calls;
  st.profile.total_ms += double(calls) * ms;
  st.profile.served_ms += double(calls) * ms;
}

int64_t TierManager::recheck_period(const std::vector<int>& regions, double call_ms) const {
  const Options& o = core_->options_;
  if (o.validate != ValidateMode::First || o.recheck_budget <= 0) return 0;
  double interp_ms = 0;  // one re-check of every region: the interpreter's time for each
  for (int r : regions) {
    const RegionState& st = *core_->regions_[size_t(r)];
    std::lock_guard<std::mutex> lock(st.mu);
    interp_ms += st.profile.interp_ms;
  }
  const double calls = interp_ms / (o.recheck_budget * std::max(call_ms, 1e-3));
  return std::clamp<int64_t>(int64_t(calls), 1, int64_t(1) << 20);
}

Tensor TierManager::to_device(const Tensor& t) {
  for (auto it = core_->ladder_.rbegin(); it != core_->ladder_.rend(); ++it)
    if ((*it)->device_resident()) return (*it)->to_device(t);
  fail(ErrorCode::NotImplemented, "no device to put tensor ", shape_str(t.shape()),
       " on: this session has no tier 2 or other tier with device memory (no GPU, or Options::max_tier below gpu)");
}

std::unique_ptr<MemoryBlock> TierManager::memory_block(size_t rung, size_t bytes) {
  return core_->ladder_[rung]->memory_block(bytes);
}

void TierManager::wait_idle() {
  jobs_->wait();
  checks_->wait();
}

// Why the taken plan's outputs for `in` are not `expected` ("" when they agree). The taken plan
// runs the very kernels the step-by-step plan ran, in the same order: only a library's
// nondeterministic reduction order may move a result, by rounding, hence the tolerance far
// tighter than validation's against the interpreter.
static std::string taken_mismatch(TakenPlan& taken, const std::vector<Tensor>& in, const std::vector<Tensor>& expected) {
  CallTally tally;
  std::optional<std::vector<Tensor>> out = taken.run(in, false, tally);
  if (!out) return "a run-time check fired on the inputs of the call it was made from";
  if (out->size() != expected.size()) return "it returned " + std::to_string(out->size()) + " outputs";
  for (size_t i = 0; i < expected.size(); ++i) {
    const Comparison c = compare_tensors(expected[i], (*out)[i], Tolerance{1e-5, 1e-6});
    if (!c.equal) return "output " + std::to_string(i) + " differs from the step-by-step plan's: " + c.message;
  }
  return "";
}

void TierManager::take_whole(size_t rung, WholePlan plan, std::vector<Tensor> outputs, TakeDone done) {
  auto job = [core = core_, rung, plan = std::move(plan), outputs = std::move(outputs), done] {
    std::string why;
    std::shared_ptr<TakenPlan> taken;
    try {
      taken = core->ladder_[rung]->take_plan(plan, why);
      if (taken) why = taken_mismatch(*taken, plan.example_inputs, outputs);
    } catch (const std::exception& e) {
      why = e.what();
    }
    if (!why.empty()) taken.reset();
    done(std::move(taken), why);
  };
  if (std::string why = jobs_->enqueue(std::move(job)); !why.empty()) done(nullptr, why);
}

// What a compile job keeps of a call's inputs: their dtypes and shapes, and the contents of small
// ones only (a backend may compile for the value of a small shape-like input, behind a value
// guard: CompiledRegion::value_inputs), not the caller's data.
std::vector<Tensor> compile_inputs(const std::vector<Tensor>& in) {
  constexpr int64_t kKeptElements = 1 << 16;
  std::vector<Tensor> kept;
  for (const Tensor& t : in)
    kept.push_back(t.numel() > kKeptElements ? Tensor::empty(t.dtype(), t.shape())
                   : t.on_device()          ? t.to_host()
                                            : t.clone());
  return kept;
}

void TierManager::Core::maybe_promote(RegionState& st, const VersionKey& key, const std::vector<Tensor>& in,
                                      int64_t call) {
  const bool first = key.rung == st.entry;  // from the interpreter: a failure stops the region's compiles
  if (first ? st.compiles == RegionState::Compiles::Stopped : !st.unable[key.rung].empty()) return;
  const int count = ++st.profile.served[key];
  // From the interpreter, hotness is all a compile waits for, whichever rung the region enters
  // at: tier 2's Attention waited for climb_threshold interpreted calls (BERT on the H200: calls
  // 2-19 at 300-600 ms where tier 1 alone takes 10).
  const int threshold = first ? options_.hot_threshold : ladder_[key.rung]->promotion_threshold(options_);
  if (count < threshold || st.compiling.count(key) || st.failed.count(key)) return;
  for (const auto& v : *st.load())  // st.mu held: no publish meanwhile
    if (v->rung == key.rung && v->signature == key.signature && !v->symbolic) return;  // published (a demoted one is in `failed`)
  // Beside a symbolic version (compiling or serving), only a hot size gets an exact one.
  using Sym = RegionState::Symbolic;
  if (first && (st.symbolic == Sym::Compiling || st.symbolic == Sym::Published) && !hot(st, key.signature) &&
      symbolic_takes(st, in))
    return;
  const int pending = int(st.compiling.size()) + (st.symbolic == Sym::Compiling ? 1 : 0);
  if (first && int(st.load()->size()) + pending >= options_.max_specializations) {
    st.stop("specialization limit (" + std::to_string(options_.max_specializations) + ") reached");
    log(LogLevel::Info, "region ", st.region->id, ": stops compiling: ", st.stopped);
    return;
  }
  std::string why = enqueue_compile(st, key, in, call);
  if (why.empty()) return;
  why = std::string(error_code_name(ErrorCode::RuntimeError)) + ": " + why;
  if (!first) {
    st.failed.insert(key);
    st.climb = "stays on " + below(st, key.rung) + ": " + why;
    return;
  }
  st.stop(why);
  if (st.validation == RegionState::Validation::Pending && st.load()->empty()) st.validation = RegionState::Validation::Off;
  log(LogLevel::Warn, "region ", st.region->id, " (", st.region->ops(), "): stays on the interpreter: ", st.stopped);
}

std::string TierManager::Core::enqueue_compile(RegionState& st, const VersionKey& key, const std::vector<Tensor>& in,
                                               int64_t call) {
  const bool first = key.rung == st.entry;
  st.compiling.insert(key);
  if (first && (!st.load()->empty() || !st.failed.empty()))
    log_event(LogTopic::Recompiles, LogLevel::Debug, "region ", st.region->id, " (", st.region->ops(), "): recompiling for ",
              key.signature.str(), " (", st.load()->size(), " version(s) already; last guard failure: ",
              st.profile.guard_failures.empty() ? std::string("none") : st.profile.guard_failures.front(), ")");
  std::vector<Tensor> shapes = compile_inputs(in);
  RegionState* sp = &st;
  // Built for the caller's OpenMP team (Options::interp_threads, or its own setting; the session's
  // whole team where this call runs on fewer: team_to_build), not the job thread's default: tier 1
  // runs parallel work on one thread or on the whole team (jit/cpu/dnnl_ops.cpp's threads_for).
  const int team = team_to_build();
  std::string why = jobs_->enqueue([self = shared_from_this(), sp, key, shapes, call, team] {
    ScopedOmpThreads threads(team);
    self->compile_job(*sp, key, shapes, call);
  });
  if (!why.empty()) st.compiling.erase(key);  // the region stays where it is, and says why
  return why;
}

// A version that fails or is demoted above the region's entry rung leaves the lower rungs'
// versions of its signature serving; one that fails on the entry rung stops the region's compiles.
void TierManager::Core::compile_job(RegionState& st, VersionKey key, std::vector<Tensor> in, int64_t call) {
  Backend& backend = *ladder_[key.rung];
  const std::string tier = tier_name(backend.tier());
  auto t0 = std::chrono::steady_clock::now();
  const double tuned_before = jit::tuning_ms_on_this_thread();
  std::unique_ptr<CompiledRegion> code;
  std::string error;
  const std::string what = "compile (" + tier + ") region";
  TraceSpan span(options_.trace.get(), "compile", what.c_str(), st.region->id);
  span.arg("signature", key.signature.str());
  try {
    if (fault_enabled("slow-compile:" + tier))  // holds the compile back, for tests of no-waiting
      std::this_thread::sleep_for(std::chrono::seconds(2));
    if (fault_enabled("hang-compile:" + tier))  // a compile that does not come back, for tests of abandoning
      std::this_thread::sleep_for(std::chrono::hours(1));
    // The host out of memory mid-compile (a device-resident tier's oom fault is the device's, at
    // run time: jit/cuda/cuda_memory.h).
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
  st.tune_ms += jit::tuning_ms_on_this_thread() - tuned_before;
  if (!code) {
    st.failed.insert(key);  // never retried: a failed compile must not loop
    log(LogLevel::Warn, "region ", st.region->id, " (", st.region->ops(), "): ", rung_name(key.rung),
        " compile failed for ", key.signature.str(), ": ", error);
    if (key.rung > st.entry) {
      st.climb = "stays on " + below(st, key.rung) + ": compile failed: " + error;
      return;
    }
    if (st.validation == RegionState::Validation::Pending && st.load()->empty()) st.validation = RegionState::Validation::Off;
    st.stop("compile failed: " + error);
    return;
  }
  auto v = std::make_shared<Version>();
  v->signature = key.signature;
  v->guards = GuardSet::exact(in, code->value_inputs);
  publish_version(st, std::move(v), key.rung, std::move(code), ms, call);
  if (key.rung > st.entry) st.climb = "";
  log_event(LogTopic::Promotions, LogLevel::Info, "region ", st.region->id, " (", st.region->ops(), "): promoted to ",
            tier, " for ", key.signature.str(), " after call ", call, ", compiled in ", ms, " ms");
}

void TierManager::Core::publish_version(RegionState& st, std::shared_ptr<Version> v, size_t rung,
                                        std::unique_ptr<CompiledRegion> code, double ms, int64_t call) {
  const Backend& backend = *ladder_[rung];
  v->tier = backend.tier();
  v->rung = rung;
  v->code = std::move(code);
  v->compile_ms = ms;
  v->device = backend.device_resident();
  v->promoted_at_call = call;
  v->validations_left = options_.validate == ValidateMode::First ? options_.validate_calls : 0;
  if (st.promoted_at_call < 0) st.promoted_at_call = call;
  if (options_.validate != ValidateMode::Off) st.validation = RegionState::Validation::Pending;
  st.publish(std::move(v));
  epoch_.fetch_add(1);
}

std::vector<RegionReport> TierManager::Core::report() const {
  std::vector<RegionReport> out;
  for (const auto& sp : regions_) {
    const RegionState& st = *sp;
    std::lock_guard<std::mutex> lock(st.mu);
    RegionReport r;
    r.id = st.region->id;
    r.ops = st.region->ops();
    r.calls = st.profile.calls;
    r.total_ms = st.profile.total_ms;
    r.compile_ms = st.compile_ms;
    r.tune_ms = st.tune_ms;
    r.validate_ms = st.profile.validate_ms;
    r.recheck_ms = st.profile.recheck_ms;
    r.promoted_at_call = st.promoted_at_call;
    r.deopts = st.profile.deopts;
    r.guard_failures = st.profile.guard_failures;
    using V = RegionState::Validation;
    r.validation = st.validation == V::Off       ? "off"
                   : st.validation == V::Pending ? "pending"
                   : st.validation == V::Passed  ? "passed"
                                                 : "failed: " + st.failure;
    r.rechecks = st.rechecks;
    for (const auto& v : *st.load()) {
      r.transfers += v->code->transfers.load();
      if (const int64_t n = v->code->device_calls.load())
        r.device_ms = std::max(r.device_ms, double(v->code->device_ns.load()) / 1e6 / double(n));
      if (!v->demoted) {
        r.tier = std::max(r.tier, v->tier);
        ++r.versions;
      }
      r.version_list.push_back({v->tier, v->symbolic ? "symbolic" : "static",
                                v->symbolic ? v->shapes : v->signature.str(), v->guards.describe(), v->calls.load(),
                                v->demoted.load()});
    }
    r.climb = st.climb;
    using Sym = RegionState::Symbolic;
    r.symbolic = st.symbolic == Sym::Open        ? ""
                 : st.symbolic == Sym::Compiling ? "compiling"
                 : st.symbolic == Sym::Published ? "published"
                                                 : "refused: " + st.symbolic_why;
    if (r.tier == Tier::Interp && st.validation == V::Pending && st.compiling.empty()) r.validation = "off";
    r.state = !st.compiling.empty() ? "compiling"
              : st.compiles == RegionState::Compiles::Stopped ? "stopped: " + st.stopped
              : r.versions ? "compiled" : "interpreting";
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace terrace
