// ScopedOmpThreads: the calling thread's OpenMP thread count for a scope, put back afterwards
// (also when the scope is left by an exception). n <= 0 leaves the setting alone.
#pragma once
#include <omp.h>

#include <algorithm>

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

// A call on fewer threads than its primitives were built for (ThreadTuner's one-thread calls): a
// oneDNN primitive starts the team it was built for (`num_threads(nthr)`), whatever the caller's
// setting, unless dynamic teams are on, which libgomp caps at that setting; oneDNN then hands its
// work function the team it got. Put back afterwards.
class ScopedOmpDynamic {
 public:
  explicit ScopedOmpDynamic(bool on) : saved_(omp_get_dynamic()), set_(on && !saved_) {
    if (set_) omp_set_dynamic(1);
  }
  ~ScopedOmpDynamic() {
    if (set_) omp_set_dynamic(saved_);
  }
  ScopedOmpDynamic(const ScopedOmpDynamic&) = delete;
  ScopedOmpDynamic& operator=(const ScopedOmpDynamic&) = delete;

 private:
  int saved_;
  bool set_;
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
// The OpenMP threads to run work built for `wanted` threads with on this thread: 1 on a background
// thread, else `wanted` cut down to the calling thread's OpenMP setting (the team ThreadTuner chose
// for this call). Running a primitive built for the whole team on fewer threads is what background
// validations do too.
inline int threads_to_run(int wanted) {
  return on_background_thread ? 1 : (wanted > 1 ? std::min(wanted, omp_get_max_threads()) : wanted);
}

// The team tier 1 builds a call's parallel work for, where it differs from the call's own: a
// Session whose ThreadTuner runs some calls on fewer threads still builds for its whole team, so
// that a region promoted during such a call is not built for one thread for good.
inline thread_local int build_team = 0;
inline int team_to_build() { return build_team > 0 ? build_team : omp_get_max_threads(); }
class ScopedBuildTeam {
 public:
  explicit ScopedBuildTeam(int n) : saved_(build_team) { build_team = n; }
  ~ScopedBuildTeam() { build_team = saved_; }
  ScopedBuildTeam(const ScopedBuildTeam&) = delete;
  ScopedBuildTeam& operator=(const ScopedBuildTeam&) = delete;

 private:
  int saved_;
};

}  // namespace terrace
