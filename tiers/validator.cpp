// Validation (tiers/tier_manager_core.h): a new version's shadow-validated calls, the sampled
// re-checks of later calls in the background, and demotion when a version disagrees with the
// interpreter (within the tolerance and its backend's error allowance).
#include <chrono>
#include <mutex>

#include "interp/compare.h"
#include "interp/log.h"
#include "interp/omp_threads.h"
#include "tiers/jobs.h"
#include "tiers/repro.h"
#include "tiers/tier_manager_core.h"
#include "tiers/trace.h"

namespace terrace {

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
  epoch_.fetch_add(1);
  if (v.code) v.code->forget_cached();
  if (v.symbolic) {  // the region keeps static versions; its example signature may still get one
    st.symbolic = RegionState::Symbolic::Refused;
    st.symbolic_why = "the symbolic version was demoted: " + why;
  } else {
    st.failed.insert({v.rung, v.signature});
  }
  st.validation = RegionState::Validation::Failed;
  st.failure = why;
  if (v.rung > st.entry)
    st.climb = "back on " + below(st, v.rung) + ": the " + tier_name(v.tier) + " version was demoted: " + why;
  log_event(LogTopic::Validation, LogLevel::Warn, "region ", st.region->id, " (", st.region->ops(), "): demoted: ", why);
  if (Trace* t = options_.trace.get()) t->instant("deopt", "demoted region " + std::to_string(st.region->id), {{"reason", why}});
}

bool TierManager::Core::validate(RegionState& st, Version& v, Frame& frame, CallTally& tally,
                                 const std::vector<Tensor>& device_in,
                           const std::vector<Tensor>& device_out) {
  TraceSpan span(options_.trace.get(), "validation", "validate region", st.region->id);
  const auto t0 = std::chrono::steady_clock::now();
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
    st.profile.validate_ms += ms_since(t0);
    demote(st, v, *why + (dump.empty() ? "" : " (repro in " + dump + ")"));
    span.arg("result", "failed: " + *why);
    return false;
  }
  span.arg("result", "passed");
  log_event(LogTopic::Validation, LogLevel::Debug, "region ", region.id, " (", region.ops(), "): ", tier_name(v.tier),
            " version for ", v.signature.str(), " agrees with the interpreter (shadow validation)");
  std::lock_guard<std::mutex> lock(st.mu);
  st.profile.validate_ms += ms_since(t0);
  if (st.validation == RegionState::Validation::Pending && v.validations_left.load() <= 0)
    st.validation = RegionState::Validation::Passed;
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
    RegionProfile& p = st.profile;
    p.served_ms += run_ms;
    if (st.recheck_queued || p.recheck_ms + p.interp_ms > options_.recheck_budget * p.served_ms) return;
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
  st.profile.recheck_ms += ms_since(t0);
  st.profile.interp_ms = ms_since(t0);
  st.recheck_queued = false;
  ++st.rechecks;
  span.arg("result", why ? "failed: " + *why : std::string("passed"));
  if (why) demote(st, *v, *why);
  else
    log_event(LogTopic::Validation, LogLevel::Debug, "region ", region.id, " (", region.ops(), "): re-check of call ",
              call, " agrees with the interpreter");
}

}  // namespace terrace
