// ScopedOmpThreads: the calling thread's OpenMP thread count for a scope, put back afterwards
// (also when the scope is left by an exception). n <= 0 leaves the setting alone.
#pragma once
#include <omp.h>

namespace terrace {

class ScopedOmpThreads {
 public:
  explicit ScopedOmpThreads(int n) : saved_(n > 0 ? omp_get_max_threads() : 0) {
    if (n > 0 && n != saved_) omp_set_num_threads(n);
    else saved_ = 0;  // nothing to put back
  }
  ~ScopedOmpThreads() {
    if (saved_ > 0) omp_set_num_threads(saved_);
  }
  ScopedOmpThreads(const ScopedOmpThreads&) = delete;
  ScopedOmpThreads& operator=(const ScopedOmpThreads&) = delete;

 private:
  int saved_;
};

// Background threads (compiles, re-checks) run their OpenMP code on one thread. A team started
// from a second thread adds its workers to libgomp's count of the threads it manages; once that
// count exceeds the cores, libgomp cuts every team's spin-wait to 100 iterations (its "throttled"
// spin count), so the callers' workers fall asleep between back-to-back oneDNN primitives and each
// primitive pays a futex wake-up (MobileNetV2 took twice as long a call: bench/RESULTS.md). A
// background job thread calls mark_background_thread once at
// its start. Only what runs there is narrowed: the thread's OpenMP setting stays, since primitives
// built there are sized for the callers' thread count.
inline thread_local bool on_background_thread = false;
inline void mark_background_thread() { on_background_thread = true; }
// The OpenMP threads to build and run work done on this thread with: `wanted`, or 1 on a background
// thread. (A oneDNN primitive runs with the thread count it was built with.)
inline int threads_to_run(int wanted) { return on_background_thread ? 1 : wanted; }

}  // namespace terrace
