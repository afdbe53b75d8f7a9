// ThreadTuner: times calls at the full team and at one thread, and keeps the faster.
#include "tiers/thread_tuner.h"

#include <algorithm>
#include <numeric>
#include <sstream>

#include "interp/log.h"

namespace terrace {

namespace {
double median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(mid), v.end());
  return v[mid];
}
constexpr size_t kDecisionsKept = 64;  // a long session probes for ever: only the latest are kept
}  // namespace

ThreadTuner::ThreadTuner(Config config) : config_(config), team_(config.full) {}

int ThreadTuner::team_for_call() {
  std::lock_guard<std::mutex> lock(mu_);
  if (phase_ == Phase::Probe && probes_issued_ < config_.probe_calls) {
    ++probes_issued_;
    return other();
  }
  return team_;
}

int ThreadTuner::team() const {
  std::lock_guard<std::mutex> lock(mu_);
  return team_;
}

std::vector<ThreadTuner::Decision> ThreadTuner::decisions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return decisions_;
}

std::string ThreadTuner::why() const {
  std::lock_guard<std::mutex> lock(mu_);
  return decisions_.empty() ? std::string() : decisions_.back().why;
}

double ThreadTuner::incumbent_median() const { return median(window_); }

bool ThreadTuner::record(int team, double ms, uint64_t epoch) {
  std::lock_guard<std::mutex> lock(mu_);
  ++calls_;
  if (!epoch_seen_ || epoch != epoch_) {
    // Compiled code changed (or this is the first call): earlier times say nothing of the new code,
    // and this call ran partly on the old, so it is not counted either.
    epoch_seen_ = true;
    epoch_ = epoch;
    window_.clear();
    probe_.clear();
    probes_issued_ = 0;
    phase_ = Phase::Settle;
    return false;
  }
  if (team == team_) {
    window_.push_back(ms);
    if (int(window_.size()) > config_.window) window_.erase(window_.begin());
    since_ms_ += ms;
    ++since_calls_;
  } else if (phase_ == Phase::Probe && team == other()) {
    probe_.push_back(ms);
  } else {
    return false;  // a probe call that finished after its probe ended
  }
  switch (phase_) {
    case Phase::Settle:
      if (int(window_.size()) >= config_.settle_calls)
        start_probe(decisions_.empty() ? "first decision" : "compiled code changed");
      return false;
    case Phase::Probe:
      if (team == team_) return false;
      if (probe_.size() == 1 && ms > config_.abort_ratio * incumbent_median()) return finish_probe(true);
      return int(probe_.size()) >= config_.probe_calls && finish_probe(false);
    case Phase::Steady: {
      std::string reason;
      if (probe_due(reason)) start_probe(reason);
      return false;
    }
  }
  return false;
}

bool ThreadTuner::probe_due(std::string& reason) const {
  if (since_calls_ >= config_.window && incumbent_median() > config_.drift * decided_ms_) {
    std::ostringstream os;
    os << "latency drifted from " << decided_ms_ << " to " << incumbent_median() << " ms";
    reason = os.str();
    return true;
  }
  // Probes cost what the other team costs, which under load is many calls' worth: spaced so
  // that they take at most probe_budget of the time.
  if (since_calls_ >= config_.min_gap_calls && since_ms_ * config_.probe_budget >= last_probe_cost_ms_) {
    reason = "periodic";
    return true;
  }
  return false;
}

void ThreadTuner::start_probe(const std::string& reason) {
  phase_ = Phase::Probe;
  probe_.clear();
  probes_issued_ = 0;
  probe_reason_ = reason;
}

bool ThreadTuner::finish_probe(bool aborted) {
  const int was = team_, alt = other();
  const double alt_ms = median(probe_), team_ms = incumbent_median();
  last_probe_cost_ms_ = std::accumulate(probe_.begin(), probe_.end(), 0.0);
  const bool change = !aborted && alt_ms < team_ms * (1 - config_.margin);
  std::ostringstream why;
  why << probe_reason_ << ": " << alt << (alt == 1 ? " thread " : " threads ") << alt_ms << " ms (median of "
      << probe_.size() << (aborted ? ", probe ended early" : "") << ") against " << was
      << (was == 1 ? " thread " : " threads ") << team_ms << " ms (median of " << window_.size() << "); "
      << (change ? "chose " : "kept ") << (change ? alt : was);
  if (change) {
    team_ = alt;
    window_ = probe_;
  }
  decided_ms_ = change ? alt_ms : team_ms;
  probe_.clear();
  probes_issued_ = 0;
  since_ms_ = 0;
  since_calls_ = 0;
  phase_ = Phase::Steady;
  if (decisions_.size() >= kDecisionsKept) decisions_.erase(decisions_.begin());
  decisions_.push_back({calls_, team_, why.str()});
  log_event(LogTopic::Threads, change ? LogLevel::Info : LogLevel::Debug, "threads: ", why.str());
  return change;
}

}  // namespace terrace
