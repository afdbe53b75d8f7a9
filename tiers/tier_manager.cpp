// TierManager: the state machine each region goes through (interpreting -> compiling -> compiled,
// with deopts per call) over the ladder of compiled tiers: profiling, promotion, compiles, guarded
// dispatch, reports. Validation and demotion: validator.cpp; background jobs: tiers/jobs.h.
#include "tiers/tier_manager.h"

#include <algorithm>
#include <chrono>
#include <compare>
#include <mutex>
#include <thread>

#include "interp/log.h"
#include "interp/omp_threads.h"
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
  if (st.validation == RegionState::Validation::Pending && st.load()->empty()) st.validation = RegionState::Validation::Off;
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
    if (st.validation == RegionState::Validation::Pending && st.load()->empty()) st.validation = RegionState::Validation::Off;
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
  if (options_.validate != ValidateMode::Off) st.validation = RegionState::Validation::Pending;
  st.publish(std::move(v));
  if (key.rung > 0) st.climb = "";
  log_event(LogTopic::Promotions, LogLevel::Info, "region ", st.region->id, " (", st.region->ops(), "): promoted to ",
            tier, " for ", key.signature, " after call ", call, ", compiled in ", ms, " ms");
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
    using V = RegionState::Validation;
    r.validation = st.validation == V::Off       ? "off"
                   : st.validation == V::Pending ? "pending"
                   : st.validation == V::Passed  ? "passed"
                                                 : "failed: " + st.failure;
    r.rechecks = st.rechecks;
    for (const auto& v : *st.load()) {
      r.transfers += v->code->transfers.load();
      if (!v->demoted) {
        r.tier = std::max(r.tier, v->tier);
        ++r.versions;
      }
    }
    r.climb = st.climb;
    if (r.tier == Tier::Interp && st.validation == V::Pending && st.compiling.empty()) r.validation = "off";
    r.state = !st.compiling.empty() ? "compiling"
              : !st.stopped.empty() ? "stopped: " + st.stopped
              : r.versions ? "compiled" : "interpreting";
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace terrace
