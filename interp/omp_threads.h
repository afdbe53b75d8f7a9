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

}  // namespace terrace
