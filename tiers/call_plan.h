// Call plans: what a call with one input signature does, decided once. A session walks its steps
// (graph breaks and regions) through the tier manager's dispatch, which profiles, counts toward
// promotion, validates and picks a version per region per call. Once a walked call found every
// region served by a version that is validated and at the top of its climb, nothing dispatch
// decides changes for that signature until a version is published or demoted (TierManager::epoch):
// the call's steps become a plan (each region's version, each graph break, each host/device copy
// as its own step) that later calls with the signature run straight through, checking only each
// version's guards. A tier may take a whole plan (Backend::take_plan; tier 2: one CUDA graph).
// Plans keep continuous validation: a call walks through dispatch every
// TierManager::recheck_period calls, after the plan's calls are credited to the regions' profiles.
// Calls are timed for judging climbs (tiers/climb_judge.h). Where the judge finds no calls timed on
// the tier below, the plan is probed: its next calls (at most CallTimes::kWarm + kKept) run a copy
// whose versions are the tier below's, are timed, and the climb is judged; a probe call more than
// twice as slow as the plan's calls ends the probe at once, the climb kept.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "guards/guard.h"
#include "interp/interpreter.h"
#include "tiers/climb_judge.h"
#include "tiers/plan_memory.h"
#include "tiers/tier_manager.h"

namespace terrace {

class Trace;  // tiers/trace.h

struct PlanStep {
  enum class Kind { Node, Region, ToHost };
  // A region output written into the call's block of CallPlan::pools[pool] (its memory plan).
  struct Placed {
    int output = 0;  // Region::outputs index
    int pool = 0;
    size_t offset = 0;
    DType dtype = DType::Float32;
    Shape shape;
  };
  Kind kind = Kind::Node;
  int index = -1;  // the node (Node), the region (Region) or the value copied (ToHost)
  int step = -1;   // the session's step (Plan::steps) it belongs to: where a walk resumes
  std::shared_ptr<Version> version;  // Region
  std::vector<int> device_inputs;    // Region: inputs read from the device copy a ToHost kept
  double ms = 0;                     // Region: its time in the recorded call
  std::vector<Placed> placed;        // Region: its outputs the memory plan places
};

// What a walked call did, step by step: a plan once every region step was settled.
struct PlanRecording {
  std::vector<std::shared_ptr<Version>> versions;  // indexed as Plan::steps; null for a graph break
  std::vector<double> ms;
  std::vector<std::vector<std::pair<DType, Shape>>> outputs;  // indexed as Plan::steps: its region's outputs
  uint64_t epoch = 0;  // TierManager::epoch when the call began
  bool complete = true;
};

class CallPlan : public std::enable_shared_from_this<CallPlan> {
 public:
  Signature signature;  // the graph inputs'
  uint64_t epoch = 0;   // TierManager::epoch when made
  std::vector<PlanStep> steps;
  std::vector<int> regions;  // the regions its steps run, in order
  // The memory plan: per device (the rung whose versions place values there), a pool of blocks a
  // call leases one of; the values between regions placed in it by liveness.
  struct Pool {
    size_t rung = 0;
    Tier tier = Tier::Cpu;  // the rung's
    std::shared_ptr<BlockPool> blocks;
    int values = 0;  // placed in each block
  };
  std::vector<Pool> pools;
  double call_ms = 0;        // the recorded call's time
  bool tiers_used[kMaxTiers] = {};  // the tiers its steps run on (the interpreter: a graph break)
  int64_t recheck_period = 0;
  // Its calls' timing, by its signature and the highest tier its steps run on; and its versions
  // (what judging a climb takes out of service).
  std::shared_ptr<ClimbJudge::Timing> timing;
  std::vector<std::shared_ptr<Version>> versions;
  PlanRecording recording;  // what it was made from (a probe is made from a copy)
  // While set (atomic access), the signature's calls run this plan's probe instead of it.
  std::shared_ptr<CallPlan> probe;
  std::weak_ptr<CallPlan> probing;  // on a probe: the plan whose climb it times the tier below for
  std::atomic<bool> probe_done{false};  // on a probe: its verdict given
  // On a probe: its own timing (the tier below's calls on this signature may be waiting for a
  // whole plan's answer, or be another plan's).
  std::shared_ptr<ClimbJudge::Timing> probe_timing;
  std::atomic<int64_t> uncredited{0};  // calls served since the regions' profiles were last credited
  std::atomic<int64_t> since_walk{0};  // calls served since a call last walked through dispatch
  std::atomic<int64_t> calls{0};       // calls served, step by step or whole
  std::atomic<int64_t> whole_calls{0};  // calls its taker served whole
  std::atomic<int64_t> left{0};  // calls that left it at a step (a guard failed, a version raised)

  // What became of the offer to take it whole: the taken plan's description, or why not.
  std::string whole() const {
    std::lock_guard<std::mutex> lock(mu_);
    return whole_;
  }
  void set_whole(std::string what) {
    std::lock_guard<std::mutex> lock(mu_);
    whole_ = std::move(what);
  }

  std::shared_ptr<TakenPlan> taken() const { return std::atomic_load(&taken_); }
  void set_taken(std::shared_ptr<TakenPlan> t) { std::atomic_store(&taken_, std::move(t)); }

 private:
  std::shared_ptr<TakenPlan> taken_;
  mutable std::mutex mu_;
  std::string whole_;
};

// What the report says of a call plan.
struct PlanReport {
  std::string signature;
  int regions = 0, graph_breaks = 0, copies = 0;  // its steps, by kind
  int64_t calls = 0, whole_calls = 0, left = 0;
  std::string whole;  // "taken: <what>", "not taken: <why>", or "" (not offered, or pending)
  std::string judged;  // its tier's climb, timed against the tier below (ClimbJudge), or ""
  struct Memory {
    std::string device;  // the tier whose memory: "cpu", "gpu"
    int values = 0;      // placed in a block
    size_t bytes = 0;    // a block's size
    size_t blocks = 0;   // made so far (one per call in flight at once)
  };
  std::vector<Memory> memory;  // the plan's memory plan, per device
};


// A session's call plans: made from walked calls, found for later ones, run.
class CallPlans {
 public:
  CallPlans(const Graph& graph, const Plan& plan, const std::vector<int>& last_use, TierManager& tiers,
            const Options& options);

  // The current plan for these graph inputs (tensors, in graph order), unless this call should walk
  // (none made, a version published or demoted since, or a continuous-validation walk due).
  std::shared_ptr<CallPlan> find(const std::vector<Tensor>& inputs);

  // Runs `plan`'s steps on `frame`. Returns the session step to walk on from: Plan::steps' size
  // when the plan ran to its end, else the step of the first version whose guards fail or whose
  // code raises (dispatch takes it from there, with the frame as the plan left it).
  // `device_copies`: as Session::run's walk keeps them; `tiers_used[t]` set for each tier a step ran on.
  size_t run(const CallPlan& plan, Frame& frame, std::unordered_map<int, RValue>& device_copies,
             CallTally& tally, Trace* trace, bool* tiers_used) const;

  // Adds a region step dispatch ran to a walked call's recording (`frame`: after it ran).
  void record(PlanRecording& rec, size_t step, const RegionRun& ran, const Frame& frame) const;
  // Makes the plan of a complete recording of a call with these inputs and outputs (host copies
  // are kept for a tier that may take it whole, to check itself against).
  void finish(const PlanRecording& rec, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
              double call_ms);

  // A call `plan` served straight through took `ms` (`whole`: its tier ran it as one).
  void timed(CallPlan& plan, double ms, bool whole);
  // A call of `plan` left it at a step: a probe ends there.
  void left(CallPlan& plan);
  // A walked call with these inputs, recorded in `rec`, took `ms`, on the tiers `tiers_used`
  // says, interpreting no region. Timed by its highest tier when its regions ran on one tier, or
  // every one on a settled version (not mid-climb, where copies between tiers would count).
  void walked(const std::vector<Tensor>& inputs, const PlanRecording& rec, const bool* tiers_used, double ms);

  // Credits every plan's served calls to its regions' profiles (before a report).
  void credit_all();
  std::vector<PlanReport> report() const;
  size_t size() const;

 private:
  std::shared_ptr<CallPlan> make(const PlanRecording& rec, const Signature& signature, double call_ms) const;
  // Starts timing the tier below `plan`'s top tier on its signature's next calls, or says why not.
  void start_probe(CallPlan& plan);
  // A call of `probe` took `ms`.
  void probe_timed(CallPlan& probe, double ms);
  // Ends `plan`'s probe, if any, `why` what judging says when the probe gave no verdict.
  void end_probe(CallPlan& plan, const std::string& why);
  // Lays out the plan's memory: the region outputs it may place (whose storage no graph break,
  // graph output or view outliving them can reach), packed by liveness per device.
  void place(CallPlan& plan, const PlanRecording& rec) const;
  // Where step `ps`'s placed outputs go in this call: views of the call's blocks (`leases`, per
  // pool, leased here when first needed).
  std::vector<Tensor> placed_outputs(const CallPlan& plan, const PlanStep& ps, const Region& region,
                                     std::vector<std::shared_ptr<const MemoryBlock>>& leases) const;
  void credit(CallPlan& plan);
  // Offers `plan` to its tier to take whole, when one tier's versions run every step.
  void offer_whole(const std::shared_ptr<CallPlan>& plan, const std::vector<Tensor>& inputs,
                   const std::vector<Tensor>& outputs);

  const Graph& graph_;
  const Plan& plan_;
  const std::vector<int>& last_use_;
  TierManager& tiers_;
  const CallPlanMode mode_;
  mutable ClimbJudge judge_;  // synchronised within
  const size_t max_plans_;
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<CallPlan>> plans_;  // guarded by mu_; most recent first
};

}  // namespace terrace
