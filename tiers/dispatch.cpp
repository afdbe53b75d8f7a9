// Dispatch (tiers/tier_manager_core.h): a region's call goes to the highest version whose
// signature and guards match, else to the interpreter; each call is profiled (time, deopts, calls
// served per signature), which is what promotion reads.
#include <chrono>
#include <mutex>

#include "interp/log.h"
#include "tiers/tier_manager_core.h"
#include "tiers/trace.h"

namespace terrace {

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

RegionRun TierManager::Core::execute(int r, Frame& frame, int64_t call) {
  RegionState& st = *regions_[size_t(r)];
  auto t0 = std::chrono::steady_clock::now();
  RegionRun run;
  run.tier = dispatch(st, frame, call, run);
  run.ms = ms_since(t0);
  std::lock_guard<std::mutex> lock(st.mu);
  ++st.profile.calls;
  st.profile.total_ms += run.ms;
  return run;
}

Tier TierManager::Core::dispatch(RegionState& st, Frame& frame, int64_t call, RegionRun& run) {
  CallTally& tally = run.tally;
  const Region& region = *st.region;
  std::vector<Tensor> in;
  in.reserve(region.inputs.size());
  bool all_tensors = true;
  for (int v : region.inputs) {
    const RValue& rv = frame.env[size_t(v)];
    all_tensors = all_tensors && rv.kind == ValueKind::Tensor && rv.tensor.defined();
    in.push_back(rv.tensor);
  }
  Attempt a;
  if (all_tensors) a = try_versions(st, frame, in, tally);
  if (a.refused) {
    inputs_to_host(region, frame, in, tally);
    ++tally.interpreted;
    interpret_region(region, frame);  // raises the interpreter's own error when the inputs are bad
    a.refused->demoted = true;        // it answered: the compiled check was wrong
    std::lock_guard<std::mutex> lock(st.mu);
    demote(st, *a.refused, "compiled code raised " + a.why + " where the interpreter answers");
    return Tier::Interp;
  }
  if (a.served) return finish_served(st, frame, in, a, run, call);
  // Counted by signature for promotion; none for a sequence or optional input: no version takes one.
  std::optional<Signature> sig;
  if (all_tensors) sig.emplace(in);
  interpret_call(st, frame, in, sig, a.failure, tally, call);
  return Tier::Interp;
}

// Versions are highest tier first: one that fails at run time is demoted and the call goes to the
// next (a tier-2 version's failure to the region's tier-1 version), then to the interpreter.
TierManager::Core::Attempt TierManager::Core::try_versions(RegionState& st, Frame& frame, std::vector<Tensor>& in,
                                                           CallTally& tally) {
  const Region& region = *st.region;
  Attempt a;
  // Held for the loop: a compile may publish a new list meanwhile (the range-for would not keep a
  // temporary alive).
  const std::shared_ptr<const VersionList> versions = st.load();
  for (const auto& v : *versions) {
    if (v->demoted.load()) continue;
    // The signature compares dtypes and shapes at once; the guards add the value guards, and name
    // the first failure for the report (only the first is kept).
    if (v->symbolic) {  // its guards, not one signature, say which shapes it takes
      if (auto f = v->guards.check(in)) {
        if (!a.failure) a.failure = f;
        continue;
      }
    } else if (!v->signature.matches(in)) {
      if (!a.failure) a.failure = v->guards.check(in);
      continue;
    }
    if (auto f = v->guards.check_values(in)) {
      if (!a.failure) a.failure = f;
      continue;
    }
    const bool device = ladder_[v->rung]->device_resident();
    if (!device) inputs_to_host(region, frame, in, tally);
    const auto t0 = std::chrono::steady_clock::now();
    try {
      a.out = v->code->run(in, tally);
      a.run_ms = ms_since(t0);
      a.served = v;
      v->calls.fetch_add(1);
      if (Trace* t = options_.trace.get(); t && device)
        t->counter("transfer", "host<->device transfers, region " + std::to_string(region.id), "tensors",
                   double(v->code->transfers.load()));
      return a;
    } catch (const std::exception& e) {
      // A run-time check of the compiled code (an index out of range) rejecting the inputs: the
      // interpreter decides whether they are bad (its error goes to the caller, and the version
      // stays) or the check was wrong (the version is demoted).
      const auto* err = dynamic_cast<const Error*>(&e);
      if (err && err->code() == ErrorCode::InvalidArgument) {
        a.refused = v;
        a.why = e.what();
        return a;
      }
      // Compiled code or a library that fails otherwise (a terrace::Error, or anything a library
      // throws) is demoted; nothing escapes untyped.
      const std::string what =
          err ? std::string(e.what()) : std::string(error_code_name(ErrorCode::RuntimeError)) + ": " + e.what();
      v->demoted = true;
      std::lock_guard<std::mutex> lock(st.mu);
      demote(st, *v, "compiled code raised " + what);
    }
  }
  return a;
}

Tier TierManager::Core::finish_served(RegionState& st, Frame& frame, const std::vector<Tensor>& in, Attempt& a,
                                      RegionRun& run, int64_t call) {
  const Region& region = *st.region;
  CallTally& tally = run.tally;
  Version& v = *a.served;
  // A symbolic version's first call at each size is validated too: its code was proven for the
  // sizes it was lowered at, and the interpreter confirms each size it meets.
  const bool new_size = v.symbolic && v.first_call_at(in[size_t(v.sym_at.first)].dim(v.sym_at.second));
  const bool check = options_.validate == ValidateMode::Always ||
                     (options_.validate == ValidateMode::First && v.validations_left.fetch_sub(1) > 0) ||
                     (options_.validate != ValidateMode::Off && new_size);
  if (!check) maybe_recheck(st, a.served, in, a.out, a.run_ms, call);
  const bool passed = check && validate(st, v, frame, tally, in, a.out);
  if (check) drop_constant_pages(region);
  if (check && !passed) return Tier::Interp;  // the frame holds the interpreter's results
  for (size_t i = 0; i < region.outputs.size(); ++i) frame.env[size_t(region.outputs[i])] = RValue(std::move(a.out[i]));
  std::lock_guard<std::mutex> lock(st.mu);
  if (v.symbolic) {  // no climb (tier 2 compiles static versions); a call plan once the size's count is in
    if (note_symbolic_call(st, in, call) >= kHotCalls && !check) run.settled = a.served;
    return v.tier;
  }
  if (v.rung + 1 < ladder_.size()) maybe_promote(st, {v.rung + 1, v.signature}, in, call);
  if (!check && at_top(st, v)) run.settled = a.served;
  return v.tier;
}

bool TierManager::Core::at_top(const RegionState& st, const Version& v) const {
  const size_t next = v.rung + 1;
  if (v.symbolic || next >= ladder_.size() || !st.unable[next].empty()) return true;
  const VersionKey key{next, v.signature};
  if (st.failed.count(key)) return true;
  // The count toward the next rung stops at its threshold only once a compile is queued: a key
  // short of it, or compiling, still climbs.
  return false;
}

void TierManager::Core::interpret_call(RegionState& st, Frame& frame, std::vector<Tensor>& in,
                                       const std::optional<Signature>& sig, const std::optional<GuardFailure>& failure,
                                       CallTally& tally, int64_t call) {
  const Region& region = *st.region;
  inputs_to_host(region, frame, in, tally);
  const auto t0 = std::chrono::steady_clock::now();
  ++tally.interpreted;
  interpret_region(region, frame);
  const double ms = ms_since(t0);
  std::lock_guard<std::mutex> lock(st.mu);
  RegionProfile& p = st.profile;
  p.interp_ms = ms;
  if (failure) {
    ++p.deopts;
    p.guard_failures.insert(p.guard_failures.begin(), failure->describe());
    if (p.guard_failures.size() > kMaxGuardFailuresKept) p.guard_failures.pop_back();
    log_event(LogTopic::Deopts, LogLevel::Debug, "region ", region.id, ": deopt, guard failed: ", failure->describe());
    if (Trace* t = options_.trace.get())
      t->instant("deopt", "deopt region " + std::to_string(region.id), {{"reason", failure->describe()}});
  }
  if (sig && st.entry < ladder_.size()) {
    consider_symbolic(st, *sig, in, call);
    maybe_promote(st, {st.entry, *sig}, in, call);
  }
}

}  // namespace terrace
