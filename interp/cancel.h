// Cooperative cancellation of a run: Session::run installs the caller's terminate flag and
// deadline on the thread it runs on (a CancelScope); the executor checks them before every step
// and the interpreter before every node, subgraph bodies (Loop, Scan, If) included, so a run
// stops within one node's time of being cancelled.
#pragma once
#include <atomic>
#include <chrono>

namespace terrace {

class CancelScope {
 public:
  // `flag` may be null (no terminate flag); `deadline` may be time_point::max() (none).
  CancelScope(const std::atomic<bool>* flag, std::chrono::steady_clock::time_point deadline);
  ~CancelScope();
  CancelScope(const CancelScope&) = delete;
  CancelScope& operator=(const CancelScope&) = delete;

 private:
  const CancelScope* outer_;
  friend void check_cancelled();
  const std::atomic<bool>* flag_;
  std::chrono::steady_clock::time_point deadline_;
};

// Throws Error(Cancelled) when the calling thread's run has been terminated or is past its deadline.
void check_cancelled();

}  // namespace terrace
