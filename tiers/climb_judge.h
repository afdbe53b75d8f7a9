// Climbs judged by time (Options::judge_climbs). A region climbs the ladder by counting calls; a
// higher tier is not always faster (a small recurrent model runs slower on tier 2 than on tier 1:
// copies and launches outweigh its work, bench/RESULTS.md). So a session's
// calls are timed per input signature and the highest tier they ran on (calls that interpreted
// nothing: no validation, no region below its compiled versions); once a tier's first calls are
// timed, they are compared with the tier below's, and when they are clearly slower, the versions
// above that tier are taken out of service (TierManager::keep_below): the region stays below, its
// report says why, and the signature's next plan is made from the faster versions. Where no call
// ran on the tier below alone (regions climb one by one), the call plans time a few calls on it
// (a probe, tiers/call_plan.h).
#pragma once
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "tiers/tier_manager.h"

namespace terrace {

// The times of a signature's calls on one tier, kept after the first kWarm until kKept are in.
class CallTimes {
 public:
  static constexpr int64_t kWarm = 3;
  static constexpr size_t kKept = 15;
  // True once: when this time is the kKept-th kept.
  bool add(double ms);
  // The median of the times kept, or 0 while fewer than `at_least` are.
  double median(size_t at_least) const;
  // Starts again (the calls change kind: a tier took the plan whole).
  void reset();

 private:
  mutable std::mutex mu_;
  std::vector<double> ms_;
  int64_t seen_ = 0;
  std::atomic<bool> full_{false};
};

class ClimbJudge {
 public:
  // The timing of one signature's calls whose highest tier is one tier.
  struct Timing {
    std::string signature;
    Tier tier = Tier::Interp;
    CallTimes times;
    // A plan of these calls offered whole and not answered yet: not timed meanwhile (they run step
    // by step now, whole later).
    std::atomic<int> whole_pending{0};
    std::atomic<bool> whole{false};  // a whole plan serves them: only its calls count
    std::string judged;              // how judging came out ("kept: ...", "slower: ..."), "" before
  };

  enum class Verdict { Pending, Kept, Slower, NoBaseline };

  ClimbJudge(TierManager& tiers, bool on) : tiers_(tiers), on_(on) {}
  bool on() const { return on_; }

  // `signature`'s timing on `tier`, made if new (at most kKeptTimings, the oldest dropped).
  std::shared_ptr<Timing> timing(const std::string& signature, Tier tier);
  // A call of `t`'s signature and tier took `ms`; `whole`: a tier ran it as one plan; `versions`:
  // what served its regions (null entries skipped). Judges once `t`'s times are in: Pending
  // before and after.
  Verdict timed(Timing& t, double ms, bool whole, const std::vector<std::shared_ptr<Version>>& versions);
  // Compares `t`'s calls with `below`'s (by default the highest tier below `t`'s with times);
  // clearly slower, `versions` above that tier are kept below. NoBaseline: no tier below has
  // enough times.
  Verdict judge(Timing& t, const std::vector<std::shared_ptr<Version>>& versions,
                std::shared_ptr<Timing> below = nullptr);
  std::string judged(const Timing& t) const;
  void set_judged(Timing& t, std::string what);
  // A call on the tier below this much slower than `t`'s median ends a probe at once (the climb
  // stands): one slow call is the probe's cost where the higher tier is far faster.
  bool far_slower(const Timing& t, double ms) const;

 private:
  static constexpr size_t kKeptTimings = 64;

  TierManager& tiers_;
  const bool on_;
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, std::shared_ptr<Timing>> timings_;  // guarded by mu_
  std::vector<std::pair<std::string, int>> made_;                           // in order, guarded by mu_
};

}  // namespace terrace
