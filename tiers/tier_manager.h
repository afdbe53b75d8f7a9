// TierManager: per-region profiling and guarded dispatch (dispatch.cpp), promotion up the ladder
// with background compiles (tier_manager.cpp, jobs.h), shadow validation, re-checks and demotion
// (validator.cpp).
#pragma once
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "guards/guard.h"
#include "interp/interpreter.h"
#include "tiers/backend.h"
#include "tiers/options.h"
#include "tiers/partition.h"

namespace terrace {

class JobPool;  // tiers/jobs.h

// A published compiled version of a region: immutable but for its counters.
struct Version {
  Tier tier = Tier::Cpu;
  size_t rung = 0;        // its tier's place in the session's ladder of compiled tiers
  Signature signature;  // the input signature it was compiled for
  GuardSet guards;
  std::shared_ptr<CompiledRegion> code;
  double compile_ms = 0;
  int64_t promoted_at_call = 0;
  std::atomic<int> validations_left{0};
  std::atomic<bool> demoted{false};
  bool device = false;  // its tier's Backend::device_resident
  std::atomic<int64_t> calls{0};  // calls it served (through dispatch or a call plan)
  // A symbolic version (tiers/symbolic_lowering.h): its guards (not its signature, one example's)
  // say which calls it takes; its size is read at `sym_at` (input, dim).
  bool symbolic = false;
  std::pair<int, int> sym_at{-1, -1};
  std::string shapes;  // "float32[1,d,768],float32[768] with d = input 0 dim 1 in [2, 256]"
  // True for the first call at size `d`: a symbolic version's first call at each size is validated.
  bool first_call_at(int64_t d) {
    std::lock_guard<std::mutex> lock(sizes_mu);
    return sizes_seen.insert(d).second;
  }

 private:
  std::mutex sizes_mu;
  std::set<int64_t> sizes_seen;
};

// What the report says about a region (a snapshot).
struct RegionReport {
  int id = 0;
  std::string ops;
  Tier tier = Tier::Interp;  // best published, non-demoted tier
  int64_t calls = 0;
  double total_ms = 0;  // time spent in the region over all calls, on any tier
  double compile_ms = 0;  // every compile of the region, on any tier, failed ones too
  double tune_ms = 0;     // of compile_ms, timing candidates (jit/tuning.h)
  double validate_ms = 0;  // calls' time spent shadow-validating its new versions
  double recheck_ms = 0;   // background time re-checking later calls
  int64_t promoted_at_call = -1;
  int64_t deopts = 0;
  std::vector<std::string> guard_failures;  // most recent first, capped
  std::string validation = "off";           // "passed", "failed: ...", "pending", "off"
  int64_t rechecks = 0;                     // later calls re-checked in the background
  std::string state;                        // "interpreting", "compiling", "compiled", "stopped: ..."
  int versions = 0;  // published and not demoted
  // Every version published, demoted ones too: static (one exact signature) for now.
  struct VersionInfo {
    Tier tier = Tier::Cpu;
    std::string kind = "static";
    std::string signature, guards;
    int64_t calls = 0;
    bool demoted = false;
  };
  std::vector<VersionInfo> version_list;
  int64_t transfers = 0;  // tensors copied between host and device by the region's versions (tier 2)
  double device_ms = 0;   // the mean device time of its timed calls (CompiledRegion::device_ns), 0: none
  std::string climb;      // why a region with a compiled version is not on the next tier up ("" when it is, or none)
  // Its symbolic version: "" (none considered yet), "compiling", "published", or "refused: why".
  std::string symbolic;
  // A region inside a control-flow body (tiers/body_plans.h): which body ("then_branch of If 'x'"),
  // and the guard its versions run behind: the condition's value for an If's branch ("If 'x':
  // condition true"), "Loop 'y': every iteration"; "" for the graph's own regions.
  std::string subgraph, guard;
};

// What one region's execution did (TierManager::execute).
struct RegionRun {
  Tier tier = Tier::Interp;  // the tier whose results the frame holds
  CallTally tally;           // its copies between host and device, and interpreter runs
  double ms = 0;             // the region's time in this call
  // The version that served the call, when its results were neither validated nor counted toward
  // a climb still to come: a call plan (tiers/call_plan.h) may run it again directly.
  std::shared_ptr<Version> settled;
};

class TierManager {
 public:
  // Keeps `graph` and a copy of `plan`: a compile the destructor abandons may outlive this object.
  // `ladder`: the compiled tiers, lowest first (empty: the interpreter only). A region is compiled
  // on the first once the interpreter ran it promotion_threshold() times for one input signature,
  // and on each next one once the one below served it that rung's threshold of calls; the highest
  // working version is preferred.
  TierManager(std::shared_ptr<const Graph> graph, Plan plan, const Options& options,
              std::vector<std::unique_ptr<Backend>> ladder);
  // A tier manager for a control-flow body (tiers/body_plans.h) whose background jobs run on
  // `host`'s threads: a session's compiles stay on Options::compile_threads however many bodies
  // it has. `host` outlives it and stops those threads; a job queued for this one holds what it
  // reads (its Core), so it may run after this object is gone.
  TierManager(std::shared_ptr<const Graph> graph, Plan plan, const Options& options,
              std::vector<std::unique_ptr<Backend>> ladder, TierManager& host);
  // Drops the background jobs still queued, waits up to Options::compile_wait_ms for a running one
  // and abandons it past that (it finishes on its own thread; its result is dropped).
  ~TierManager();

  // Runs region `r` for call `call` on the frame: a compiled version whose guards pass, or the
  // interpreter.
  RegionRun execute(int r, Frame& frame, int64_t call);

  std::vector<RegionReport> report() const;

  // Bumped by every publish and demotion: a call plan made at another epoch may name a version
  // no longer the best one, and is dropped.
  uint64_t epoch() const;
  // Calls a call plan served without dispatch, counted into region `r`'s profile (calls, time,
  // and the served time that continuous validation's budget reads) at `ms` a call.
  void credit(int r, int64_t calls, double ms);
  // Takes `v`, a published version, out of service: the calls it served ran slower than the tier
  // below ran them (`why`, tiers/climb_judge.h). Its region's signature stays on the rung below,
  // never compiled above again; validation stands (the answers were right). Bumps the epoch.
  void keep_below(const std::shared_ptr<Version>& v, const std::string& why);
  // The version of `v`'s region and signature on the highest rung below `v`'s that is in service,
  // or null.
  std::shared_ptr<Version> version_below(const std::shared_ptr<Version>& v) const;
  // How many calls a call plan over `regions` (each at its recorded time) may serve between two
  // calls walked through dispatch, so that continuous validation samples those regions as often as
  // its budget allows (Options::recheck_budget); 0: no re-checks, never walk for them.
  int64_t recheck_period(const std::vector<int>& regions, double call_ms) const;
  // Offers `plan` (every step a version of rung `rung`) to that tier to take whole, on the compile
  // thread; a taken plan must reproduce `outputs` for the plan's example inputs (a call walked
  // before, host copies) before `done` gets it, else `done` gets null and why.
  using TakeDone = std::function<void(std::shared_ptr<TakenPlan>, const std::string& why)>;
  void take_whole(size_t rung, WholePlan plan, std::vector<Tensor> outputs, TakeDone done);
  // A block of `bytes` of the memory rung `rung`'s versions read and write (a call plan's values).
  std::unique_ptr<MemoryBlock> memory_block(size_t rung, size_t bytes);
  // A device copy of `t` on tier 2's device (Session::to_device).
  Tensor to_device(const Tensor& t);
  // Blocks until no background job is queued or running (tests and benchmarks; run() never
  // calls it).
  void wait_idle();

 private:
  struct RegionState;
  struct Core;  // regions, policy and jobs' work; shared with the jobs, so a job may outlive this
  std::shared_ptr<Core> core_;
  JobPool* jobs_;    // compiles; owned, left alive (leaked) when a running job is abandoned
  JobPool* checks_;  // continuous validation's re-checks, on a lowest-priority thread; the same
  bool owns_jobs_ = true;  // false: the pools are a host's (the body constructor)
};

}  // namespace terrace
