// Climbs judged by time: see climb_judge.h.
#include "tiers/climb_judge.h"

#include <algorithm>
#include <cstdio>

#include "interp/log.h"

namespace terrace {

namespace {
// A climb is undone only when its calls are clearly slower: by this ratio and by this much time (a
// closer race, or microseconds of jitter on a tiny model, keeps it).
constexpr double kSlowerRatio = 1.2, kSlowerMs = 0.02;
constexpr size_t kBelowAtLeast = 5;  // calls timed on the tier below, for a comparison

std::string ms_text(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g ms", ms);
  return buf;
}
}  // namespace

bool CallTimes::add(double ms) {
  if (full_.load(std::memory_order_relaxed)) return false;
  std::lock_guard<std::mutex> lock(mu_);
  if (++seen_ <= kWarm || ms_.size() >= kKept) return false;
  ms_.push_back(ms);
  if (ms_.size() < kKept) return false;
  full_ = true;
  return true;
}

double CallTimes::median(size_t at_least) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (ms_.empty() || ms_.size() < at_least) return 0;
  std::vector<double> v = ms_;
  std::nth_element(v.begin(), v.begin() + ptrdiff_t(v.size() / 2), v.end());
  return v[v.size() / 2];
}

void CallTimes::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  ms_.clear();
  seen_ = 0;
  full_ = false;
}

std::shared_ptr<ClimbJudge::Timing> ClimbJudge::timing(const std::string& signature, Tier tier) {
  std::lock_guard<std::mutex> lock(mu_);
  std::shared_ptr<Timing>& t = timings_[{signature, int(tier)}];
  if (!t) {
    t = std::make_shared<Timing>();
    t->signature = signature;
    t->tier = tier;
    made_.emplace_back(signature, int(tier));
    if (made_.size() > kKeptTimings) {
      timings_.erase(made_.front());
      made_.erase(made_.begin());
    }
  }
  return t;
}

ClimbJudge::Verdict ClimbJudge::timed(Timing& t, double ms, bool whole,
                                      const std::vector<std::shared_ptr<Version>>& versions) {
  if (!on_ || t.whole_pending.load() > 0) return Verdict::Pending;
  if (whole) {
    if (!t.whole.exchange(true)) t.times.reset();  // from here on, the whole plan's calls
  } else if (t.whole.load()) {
    return Verdict::Pending;
  }
  return t.times.add(ms) ? judge(t, versions) : Verdict::Pending;
}

std::string ClimbJudge::judged(const Timing& t) const {
  std::lock_guard<std::mutex> lock(mu_);
  return t.judged;
}

void ClimbJudge::set_judged(Timing& t, std::string what) {
  std::lock_guard<std::mutex> lock(mu_);
  t.judged = std::move(what);
}

bool ClimbJudge::far_slower(const Timing& t, double ms) const {
  const double top = t.times.median(CallTimes::kKept);
  return top > 0 && ms > 2 * top && ms - top > kSlowerMs;
}

ClimbJudge::Verdict ClimbJudge::judge(Timing& t, const std::vector<std::shared_ptr<Version>>& versions,
                                      std::shared_ptr<Timing> below) {
  double before = below ? below->times.median(kBelowAtLeast) : 0;
  if (!below) {
    std::lock_guard<std::mutex> lock(mu_);
    for (int tier = int(t.tier) - 1; tier > int(Tier::Interp) && before <= 0; --tier)
      if (auto it = timings_.find({t.signature, tier}); it != timings_.end()) {
        below = it->second;
        before = below->times.median(kBelowAtLeast);
      }
  }
  if (before <= 0) return Verdict::NoBaseline;
  const double after = t.times.median(CallTimes::kKept);
  const std::string on = tier_name(t.tier), under = tier_name(below->tier);
  const std::string figures = ms_text(after) + " a call on " + on + " against " + ms_text(before) + " on " + under +
                              " (medians of up to " + std::to_string(CallTimes::kKept) + " timed calls)";
  const bool slower = after > before * kSlowerRatio && after - before > kSlowerMs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    t.judged = (slower ? "slower: " : "kept: ") + figures;
  }
  log_event(LogTopic::Promotions, LogLevel::Info, "climb of ", t.signature, " to ", on, (slower ? " undone: " : " kept: "),
            figures);
  if (!slower) return Verdict::Kept;
  const std::string why = on + " ran the calls of " + t.signature + " slower than " + under + ": " + figures;
  for (const std::shared_ptr<Version>& v : versions)
    if (v && v->tier > below->tier) tiers_.keep_below(v, why);
  return Verdict::Slower;
}

}  // namespace terrace
