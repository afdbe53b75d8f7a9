// Call plans (tiers/call_plan.h): recorded from a walked call, found by signature, run step by
// step or handed to a tier whole.
#include "tiers/call_plan.h"

#include <algorithm>
#include <limits>

#include "interp/cancel.h"
#include "interp/log.h"
#include "tiers/trace.h"

namespace terrace {

CallPlans::CallPlans(const Graph& graph, const Plan& plan, const std::vector<int>& last_use, TierManager& tiers,
                     const Options& options)
    : graph_(graph), plan_(plan), last_use_(last_use), tiers_(tiers), mode_(options.call_plans),
      judge_(tiers, options.judge_climbs && options.call_plans != CallPlanMode::Off), max_plans_(size_t(std::max(1, options.max_specializations))) {}

std::shared_ptr<CallPlan> CallPlans::find(const std::vector<Tensor>& inputs) {
  if (mode_ == CallPlanMode::Off) return nullptr;
  const uint64_t epoch = tiers_.epoch();
  std::shared_ptr<CallPlan> found;
  std::vector<std::shared_ptr<CallPlan>> stale;  // dropped after the lock: a taken plan's end waits for its device
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = plans_.begin(); it != plans_.end();) {
      if ((*it)->epoch == epoch) {
        if (!found && (*it)->signature.matches(inputs)) found = *it;
        ++it;
        continue;
      }
      credit(**it);
      stale.push_back(std::move(*it));
      it = plans_.erase(it);
    }
  }
  if (!found) return nullptr;
  if (std::shared_ptr<CallPlan> probe = std::atomic_load(&found->probe)) {
    probe->uncredited.fetch_add(1);
    probe->calls.fetch_add(1);
    return probe;
  }
  if (found->recheck_period > 0 && found->since_walk.fetch_add(1) + 1 >= found->recheck_period) {
    found->since_walk = 0;
    credit(*found);
    return nullptr;  // this call walks through dispatch, which samples it for re-checks
  }
  found->uncredited.fetch_add(1);
  found->calls.fetch_add(1);
  return found;
}

namespace {
// A plan step's region inputs, each from the frame or (device_inputs) from the device copy a
// ToHost step kept; false when one is not a defined tensor.
bool gather_inputs(const Region& region, const PlanStep& ps, Frame& frame,
                   std::unordered_map<int, RValue>& device_copies, std::vector<Tensor>& in) {
  in.clear();
  for (int v : region.inputs) {
    const RValue* rv = &frame.env[size_t(v)];
    if (!ps.device_inputs.empty() && std::binary_search(ps.device_inputs.begin(), ps.device_inputs.end(), v))
      if (auto it = device_copies.find(v); it != device_copies.end()) rv = &it->second;
    if (rv->kind != ValueKind::Tensor || !rv->tensor.defined()) return false;
    in.push_back(rv->tensor);
  }
  return true;
}
}  // namespace

std::vector<Tensor> CallPlans::placed_outputs(const CallPlan& plan, const PlanStep& ps, const Region& region,
                                              std::vector<std::shared_ptr<const MemoryBlock>>& leases) const {
  std::vector<Tensor> into(region.outputs.size());
  for (const PlanStep::Placed& pl : ps.placed) {
    std::shared_ptr<const MemoryBlock>& lease = leases[size_t(pl.pool)];
    const CallPlan::Pool& pool = plan.pools[size_t(pl.pool)];
    if (!lease) lease = pool.blocks->lease([&](size_t bytes) { return tiers_.memory_block(pool.rung, bytes); });
    // The tensor holds the lease: the block goes back to the pool when the last one goes.
    std::shared_ptr<void> keep(lease, const_cast<MemoryBlock*>(lease.get()));
    into[size_t(pl.output)] = lease->view(pl.offset, pl.dtype, pl.shape, std::move(keep));
  }
  return into;
}

size_t CallPlans::run(const CallPlan& plan, Frame& frame, std::unordered_map<int, RValue>& device_copies,
                      CallTally& tally, Trace* trace, bool* tiers_used) const {
  std::vector<Tensor> in;
  // This call's block per pool, leased at its first placed value; each tensor over it holds it.
  std::vector<std::shared_ptr<const MemoryBlock>> leases(plan.pools.size());
  auto forget_released = [&] {  // a released value's device copy goes with it
    if (!device_copies.empty())
      std::erase_if(device_copies, [&](const auto& e) { return frame.env[size_t(e.first)].kind != ValueKind::Tensor; });
  };
  for (const PlanStep& ps : plan.steps) {
    check_cancelled();
    if (ps.kind == PlanStep::Kind::ToHost) {
      RValue& rv = frame.env[size_t(ps.index)];
      if (rv.kind != ValueKind::Tensor || !rv.tensor.on_device()) continue;
      device_copies[ps.index] = rv;
      rv = RValue(rv.tensor.to_host());
      ++tally.transfers;
      continue;
    }
    if (ps.kind == PlanStep::Kind::Node) {
      TraceSpan span(trace, "node", "interp node", ps.index);
      run_node(frame, ps.index);
      tiers_used[int(Tier::Interp)] = true;
      release_dead_inputs(frame, ps.index, ps.step, last_use_);
      forget_released();
      continue;
    }
    TraceSpan span(trace, "region", "region", ps.index);
    const Region& region = plan_.regions[size_t(ps.index)];
    const Version& v = *ps.version;
    if (trace) span.arg("tier", tier_name(v.tier));
    // A symbolic version's guards, not its example signature, say which shapes it takes.
    if (v.demoted.load() || !gather_inputs(region, ps, frame, device_copies, in) ||
        (v.symbolic ? v.guards.check(in).has_value() : !v.signature.matches(in) || v.guards.check_values(in)))
      return size_t(ps.step);
    std::vector<Tensor> out;
    try {
      if (ps.placed.empty()) out = v.code->run(in, tally);
      else out = v.code->run_into(in, placed_outputs(plan, ps, region, leases), tally);
    } catch (const std::exception&) {
      return size_t(ps.step);  // dispatch runs the step again and decides (an error or a demotion)
    }
    for (size_t i = 0; i < region.outputs.size(); ++i) frame.env[size_t(region.outputs[i])] = RValue(std::move(out[i]));
    tiers_used[int(v.tier)] = true;
    for (int n : region.nodes) release_dead_inputs(frame, n, ps.step, last_use_);
    forget_released();
  }
  return plan_.steps.size();
}

void CallPlans::record(PlanRecording& rec, size_t step, const RegionRun& ran, const Frame& frame) const {
  if (rec.versions.empty()) {
    rec.versions.resize(plan_.steps.size());
    rec.ms.resize(plan_.steps.size());
    rec.outputs.resize(plan_.steps.size());
  }
  if (!ran.settled) {
    rec.complete = false;
    return;
  }
  rec.versions[step] = ran.settled;
  rec.ms[step] = ran.ms;
  for (int v : plan_.regions[size_t(plan_.steps[step].region)].outputs) {
    const RValue& rv = frame.env[size_t(v)];
    const bool tensor = rv.kind == ValueKind::Tensor && rv.tensor.defined();
    rec.outputs[step].emplace_back(tensor ? rv.tensor.dtype() : DType::String, tensor ? rv.tensor.shape() : Shape{});
  }
}

// Steps in the session's order, with a copy to the host wherever a host step (a graph break, a
// host tier's version) reads a value only a device version made, the device copy kept for later
// device steps: decided here once, as the walk decides it call by call.
std::shared_ptr<CallPlan> CallPlans::make(const PlanRecording& rec, const Signature& signature,
                                          double call_ms) const {
  enum Where : uint8_t { Host, Device, Both };
  std::vector<uint8_t> where(graph_.values.size(), Host);
  // A graph input may come on the device (a bound input) or not, under one signature: its copy to
  // the host is planned, and does nothing for a host tensor.
  for (int v : graph_.inputs) where[size_t(v)] = Device;
  auto p = std::make_shared<CallPlan>();
  p->signature = signature;
  p->epoch = rec.epoch;
  p->call_ms = call_ms;
  auto to_host = [&](int v, int step) {
    if (v < 0 || where[size_t(v)] != Device || last_use_[size_t(v)] < step) return;
    p->steps.push_back({PlanStep::Kind::ToHost, v, step, nullptr, {}, 0});
    where[size_t(v)] = Both;
  };
  for (size_t s = 0; s < plan_.steps.size(); ++s) {
    const Step& step = plan_.steps[s];
    if (step.region < 0) {
      const Node& node = graph_.nodes[size_t(step.node)];
      for (int v : node.inputs) to_host(v, int(s));
      for (int v : graph_.captured_by(node)) to_host(v, int(s));
      p->steps.push_back({PlanStep::Kind::Node, step.node, int(s), nullptr, {}, 0});
      p->tiers_used[int(Tier::Interp)] = true;
      continue;
    }
    const Region& region = plan_.regions[size_t(step.region)];
    PlanStep ps{PlanStep::Kind::Region, step.region, int(s), rec.versions[s], {}, rec.ms[s]};
    const bool device = ps.version->device;
    for (int v : region.inputs) {
      if (!device) to_host(v, int(s));
      else if (where[size_t(v)] == Both) ps.device_inputs.push_back(v);
    }
    std::sort(ps.device_inputs.begin(), ps.device_inputs.end());
    for (int v : region.outputs) where[size_t(v)] = device ? Device : Host;
    p->tiers_used[int(ps.version->tier)] = true;
    p->regions.push_back(step.region);
    p->steps.push_back(std::move(ps));
  }
  p->recheck_period = tiers_.recheck_period(p->regions, call_ms);
  Tier top = Tier::Interp;
  for (const PlanStep& ps : p->steps)
    if (ps.version) {
      top = std::max(top, ps.version->tier);
      p->versions.push_back(ps.version);
    }
  p->recording = rec;
  p->timing = judge_.timing(p->signature.str(), top);
  place(*p, rec);
  return p;
}

void CallPlans::place(CallPlan& p, const PlanRecording& rec) const {
  const size_t nv = graph_.values.size();
  std::vector<int> root(nv, -1);  // per value: the placeable output whose buffer it is
  std::vector<bool> pinned(nv);   // per root: never placed
  std::vector<int> end(nv, -1);   // per root: the last session step its buffer is read at
  auto pin_read = [&](int v) {
    if (v >= 0 && root[size_t(v)] >= 0) pinned[size_t(root[size_t(v)])] = true;
  };
  struct Candidate {
    size_t step;  // in p.steps
    int output, value;
  };
  std::vector<Candidate> candidates;
  for (size_t k = 0; k < p.steps.size(); ++k) {
    const PlanStep& ps = p.steps[k];
    if (ps.kind == PlanStep::Kind::Node) {  // the interpreter's outputs may view what it reads
      const Node& node = graph_.nodes[size_t(ps.index)];
      for (int v : node.inputs) pin_read(v);
      for (int v : graph_.captured_by(node)) pin_read(v);
    }
    if (ps.kind != PlanStep::Kind::Region) continue;
    const Region& region = plan_.regions[size_t(ps.index)];
    const std::vector<int>& storage = ps.version->code->output_storage;
    if (storage.size() != region.outputs.size()) {  // unknown: an output may view any input
      for (int v : region.inputs) pin_read(v);
      continue;
    }
    for (size_t i = 0; i < region.outputs.size(); ++i) {
      const int v = region.outputs[i];
      const auto& [dtype, shape] = rec.outputs[size_t(ps.step)][i];
      if (storage[i] >= 0) {  // a view of an input: that buffer lives as long as the view
        const int r = root[size_t(region.inputs[size_t(storage[i])])];
        root[size_t(v)] = r;
        if (r >= 0) end[size_t(r)] = std::max(end[size_t(r)], last_use_[size_t(v)]);
      } else if (storage[i] == kOwnOutput && dtype != DType::String) {
        root[size_t(v)] = v;
        end[size_t(v)] = std::max(ps.step, last_use_[size_t(v)]);
        candidates.push_back({k, int(i), v});
      }
    }
  }
  for (int v : graph_.outputs) pin_read(v);
  std::vector<std::vector<size_t>> by_pool;  // candidates' indices, per pool
  for (size_t c = 0; c < candidates.size(); ++c) {
    const int v = candidates[c].value;
    if (pinned[size_t(v)] || end[size_t(v)] == std::numeric_limits<int>::max()) continue;
    const Version& version = *p.steps[candidates[c].step].version;
    const size_t rung = version.rung;
    size_t pool = 0;
    while (pool < p.pools.size() && p.pools[pool].rung != rung) ++pool;
    if (pool == p.pools.size()) {
      p.pools.push_back({rung, version.tier, nullptr, 0});
      by_pool.emplace_back();
    }
    by_pool[pool].push_back(c);
  }
  for (size_t pool = 0; pool < p.pools.size(); ++pool) {
    std::vector<size_t> bytes, offset;
    std::vector<int> first, last;
    for (size_t c : by_pool[pool]) {
      const Candidate& cd = candidates[c];
      const auto& [dtype, shape] = rec.outputs[size_t(p.steps[cd.step].step)][size_t(cd.output)];
      bytes.push_back(size_t(shape_numel(shape)) * dtype_size(dtype));
      first.push_back(p.steps[cd.step].step);
      last.push_back(end[size_t(cd.value)]);
    }
    p.pools[pool].blocks = std::make_shared<BlockPool>(pack_by_liveness(bytes, first, last, kPlacementAlign, offset));
    p.pools[pool].values = int(by_pool[pool].size());
    for (size_t i = 0; i < by_pool[pool].size(); ++i) {
      const Candidate& cd = candidates[by_pool[pool][i]];
      const auto& [dtype, shape] = rec.outputs[size_t(p.steps[cd.step].step)][size_t(cd.output)];
      p.steps[cd.step].placed.push_back({cd.output, int(pool), offset[i], dtype, shape});
    }
  }
}

void CallPlans::finish(const PlanRecording& rec, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                       double call_ms) {
  if (mode_ == CallPlanMode::Off || !rec.complete || rec.versions.empty() || rec.epoch != tiers_.epoch()) return;
  if (std::none_of(rec.versions.begin(), rec.versions.end(), [](const auto& v) { return v != nullptr; })) return;
  std::shared_ptr<CallPlan> p = make(rec, Signature(inputs), call_ms);
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& q : plans_)
      if (q->epoch == p->epoch && q->signature == p->signature) return;  // made by another call meanwhile
    plans_.insert(plans_.begin(), p);
    if (plans_.size() > max_plans_) plans_.pop_back();
  }
  log_event(LogTopic::Promotions, LogLevel::Info, "call plan for ", p->signature.str(), ": ", p->regions.size(),
            " regions, ", p->steps.size() - p->regions.size(), " other steps; a call walks through dispatch every ",
            p->recheck_period, " calls for re-checks");
  if (mode_ == CallPlanMode::Whole) offer_whole(p, inputs, outputs);
}

void CallPlans::offer_whole(const std::shared_ptr<CallPlan>& plan, const std::vector<Tensor>& inputs,
                            const std::vector<Tensor>& outputs) {
  WholePlan whole;
  whole.inputs = graph_.inputs;
  whole.outputs = graph_.outputs;
  whole.values = graph_.values.size();
  size_t rung = 0;
  for (const PlanStep& ps : plan->steps)
    if (ps.version) {
      rung = ps.version->rung;
      break;
    }
  std::vector<bool> constant_seen(graph_.values.size());
  const std::vector<int>& graph_inputs = graph_.inputs;
  for (const PlanStep& ps : plan->steps) {
    // A graph input's copy to the host is the taker's: TakenPlan::run takes inputs on either side.
    if (ps.kind == PlanStep::Kind::ToHost &&
        std::find(graph_inputs.begin(), graph_inputs.end(), ps.index) != graph_inputs.end())
      continue;
    // Only a plan of one tier's versions, whose value guards (if any) read constants: the tier runs
    // it with no check between its steps.
    if (ps.kind != PlanStep::Kind::Region || ps.version->rung != rung) return;
    const Region& region = plan_.regions[size_t(ps.index)];
    for (int i : ps.version->code->value_inputs)
      if (!graph_.initializers.count(region.inputs[size_t(i)])) return;
    for (int v : region.inputs)
      if (auto it = graph_.initializers.find(v); it != graph_.initializers.end() && !constant_seen[size_t(v)]) {
        constant_seen[size_t(v)] = true;
        whole.constants.emplace_back(v, it->second);
      }
    whole.steps.push_back({ps.version->code, region.inputs, region.outputs});
  }
  std::vector<Tensor> out;
  for (const Tensor& t : inputs) whole.example_inputs.push_back(t.on_device() ? t.to_host() : t.clone());
  for (const Tensor& t : outputs) out.push_back(t.on_device() ? t.to_host() : t.clone());
  std::weak_ptr<CallPlan> weak = plan;
  const std::string sig = plan->signature.str();
  std::shared_ptr<ClimbJudge::Timing> timing = plan->timing;
  timing->whole_pending.fetch_add(1);
  tiers_.take_whole(rung, std::move(whole), std::move(out),
                    [weak, sig, timing](std::shared_ptr<TakenPlan> taken, const std::string& why) {
                      timing->whole_pending.fetch_sub(1);
                      const std::string what = taken ? "taken: " + taken->describe() : "not taken: " + why;
                      log_event(LogTopic::Promotions, LogLevel::Info, "call plan for ", sig, " ", what);
                      if (auto p = weak.lock()) {
                        p->set_whole(what);
                        if (taken) p->set_taken(std::move(taken));
                      }
                    });
}

void CallPlans::credit(CallPlan& plan) {
  const int64_t calls = plan.uncredited.exchange(0);
  if (calls == 0) return;
  for (const PlanStep& ps : plan.steps)
    if (ps.kind == PlanStep::Kind::Region) {
      tiers_.credit(ps.index, calls, ps.ms);
      ps.version->calls.fetch_add(calls);
    }
}

void CallPlans::timed(CallPlan& plan, double ms, bool whole) {
  if (!plan.probing.expired()) return probe_timed(plan, ms);
  if (judge_.timed(*plan.timing, ms, whole, plan.versions) == ClimbJudge::Verdict::NoBaseline) start_probe(plan);
}

void CallPlans::start_probe(CallPlan& plan) {
  PlanRecording rec = plan.recording;
  for (size_t s = 0; s < rec.versions.size(); ++s) {
    std::shared_ptr<Version>& v = rec.versions[s];
    if (!v || v->tier != plan.timing->tier) continue;
    v = tiers_.version_below(v);
    if (!v) {
      judge_.set_judged(*plan.timing, "kept: a region has no version below " + std::string(tier_name(plan.timing->tier)) +
                                          " to time against");
      return;
    }
  }
  std::shared_ptr<CallPlan> probe = make(rec, plan.signature, plan.call_ms);
  probe->probing = plan.weak_from_this();
  probe->probe_timing = std::make_shared<ClimbJudge::Timing>();
  probe->probe_timing->signature = probe->timing->signature;
  probe->probe_timing->tier = probe->timing->tier;
  log_event(LogTopic::Promotions, LogLevel::Info, "call plan for ", plan.signature.str(), ": no calls timed below ",
            tier_name(plan.timing->tier), "; timing ", tier_name(probe->timing->tier), " on the next calls");
  std::atomic_store(&plan.probe, std::move(probe));
}

void CallPlans::probe_timed(CallPlan& probe, double ms) {
  std::shared_ptr<CallPlan> plan = probe.probing.lock();
  if (!plan || probe.probe_done.load()) return;
  const std::string below = tier_name(probe.probe_timing->tier);
  if (judge_.far_slower(*plan->timing, ms)) {
    char figure[32];
    std::snprintf(figure, sizeof figure, "%.3g ms", ms);
    return end_probe(*plan, "kept: a call on " + below + " took " + figure + ", more than twice this plan's");
  }
  if (!probe.probe_timing->times.add(ms)) {
    // Calls left uncounted (another thread's, a whole-plan answer awaited): a bound on the probe.
    if (probe.calls.load() > CallTimes::kWarm + int64_t(CallTimes::kKept) + 16)
      end_probe(*plan, "kept: too few calls timed on " + below);
    return;
  }
  if (probe.probe_done.exchange(true)) return;
  judge_.judge(*plan->timing, plan->versions, probe.probe_timing);
  end_probe(*plan, "");
}

void CallPlans::end_probe(CallPlan& plan, const std::string& why) {
  std::shared_ptr<CallPlan> ended = std::atomic_exchange(&plan.probe, std::shared_ptr<CallPlan>());
  if (!ended) return;
  ended->probe_done = true;
  if (!why.empty()) judge_.set_judged(*plan.timing, why);
  credit(*ended);
}

void CallPlans::left(CallPlan& plan) {
  plan.left.fetch_add(1);
  if (std::shared_ptr<CallPlan> top = plan.probing.lock())
    end_probe(*top, "kept: a call left the probe of " + std::string(tier_name(plan.probe_timing->tier)) + " at a step");
}

void CallPlans::walked(const std::vector<Tensor>& inputs, const PlanRecording& rec, const bool* tiers_used,
                       double ms) {
  if (!judge_.on()) return;
  int tiers = 0;
  Tier top = Tier::Interp;
  for (int t = int(Tier::Interp) + 1; t < kMaxTiers; ++t)
    if (tiers_used[t]) {
      ++tiers;
      top = Tier(t);
    }
  const bool settled = rec.complete && !rec.versions.empty();  // every region's version settled
  if (tiers == 0 || (tiers > 1 && !settled)) return;
  const Signature sig(inputs);
  if (judge_.timed(*judge_.timing(sig.str(), top), ms, false, rec.versions) != ClimbJudge::Verdict::NoBaseline) return;
  std::shared_ptr<CallPlan> plan;  // the signature's plan, probed as if it had served the calls
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& p : plans_)
      if (p->epoch == tiers_.epoch() && p->signature == sig && p->timing->tier == top) {
        plan = p;
        break;
      }
  }
  if (plan) start_probe(*plan);
}

void CallPlans::credit_all() {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& p : plans_) credit(*p);
}

std::vector<PlanReport> CallPlans::report() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<PlanReport> out;
  for (const auto& p : plans_) {
    PlanReport r;
    r.signature = p->signature.str();
    for (const PlanStep& ps : p->steps) {
      r.regions += ps.kind == PlanStep::Kind::Region;
      r.graph_breaks += ps.kind == PlanStep::Kind::Node;
      r.copies += ps.kind == PlanStep::Kind::ToHost;
    }
    r.calls = p->calls.load();
    r.left = p->left.load();
    r.whole_calls = p->whole_calls.load();
    r.whole = p->whole();
    r.judged = judge_.judged(*p->timing);
    for (const CallPlan::Pool& pool : p->pools)
      r.memory.push_back({tier_name(pool.tier), pool.values, pool.blocks->bytes(), pool.blocks->blocks()});
    out.push_back(std::move(r));
  }
  return out;
}

size_t CallPlans::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return plans_.size();
}

}  // namespace terrace
