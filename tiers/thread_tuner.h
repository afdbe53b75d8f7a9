// ThreadTuner: the OpenMP team a session's calls run with when its thread count is left to it.
#pragma once
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace terrace {

// Every OpenMP region ends in a join that waits for each thread of the team; on a machine whose
// cores other processes hold, one descheduled worker holds up every region for a scheduler slice,
// so that the whole team can be many times slower than one thread. Which is faster depends on the
// load, which changes: the tuner times calls at the session's full team, now and then probes one
// thread, keeps the faster by a margin, and probes again periodically and when latency drifts.
// It measures nothing itself: record() is given each call's time, so that a test can give it any.
class ThreadTuner {
 public:
  struct Config {
    int full = 2;               // the session's whole team; the tuner chooses it or 1
    int settle_calls = 8;       // calls at one compile epoch before the first decision
    int probe_calls = 3;        // calls at the other team per probe; their median is compared
    int window = 16;            // the incumbent's latest calls, whose median it is judged by
    double margin = 0.10;       // the other team must be this much faster to be chosen
    double abort_ratio = 2.0;   // a probe call this much slower than the incumbent ends the probe
    double drift = 1.5;         // the incumbent's median this much above its decided time: probe
    double probe_budget = 0.02; // probes cost at most this fraction of the incumbent's time
    int min_gap_calls = 32;     // calls between probes at least
  };
  // A decision: the team chosen and why, in words (the log's line and the report's).
  struct Decision {
    int64_t call = 0;  // the number of calls recorded when it was made
    int team = 0;
    std::string why;
  };

  explicit ThreadTuner(Config config);
  // The team for the next call (a probe's or the incumbent's). Thread-safe.
  int team_for_call();
  // A call that ran on `team` took `ms`; `epoch` changes when compiled code changes (promotions,
  // deopts): times of another epoch are not compared. Returns true when the decision changed.
  bool record(int team, double ms, uint64_t epoch);
  int team() const;
  std::vector<Decision> decisions() const;
  std::string why() const;  // the latest decision's reason ("" before the first)

 private:
  enum class Phase { Settle, Probe, Steady };
  void start_probe(const std::string& reason);
  bool finish_probe(bool aborted);
  bool probe_due(std::string& reason) const;
  double incumbent_median() const;
  int other() const { return team_ == 1 ? config_.full : 1; }

  Config config_;
  mutable std::mutex mu_;
  Phase phase_ = Phase::Settle;
  int team_;                       // the incumbent
  uint64_t epoch_ = 0;
  bool epoch_seen_ = false;
  std::vector<double> window_;     // the incumbent's latest times, oldest first
  std::vector<double> probe_;      // the current probe's times at other()
  int probes_issued_ = 0;
  std::string probe_reason_;
  double decided_ms_ = 0;          // the incumbent's median when it was last decided
  double last_probe_cost_ms_ = 0;
  double since_ms_ = 0;            // incumbent time since the last decision
  int64_t since_calls_ = 0;
  int64_t calls_ = 0;
  std::vector<Decision> decisions_;
};

}  // namespace terrace
