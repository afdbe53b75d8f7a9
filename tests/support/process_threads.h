// The threads of this process, for tests that check that work starts no thread (an OpenMP team,
// a job thread) where it must not.
#pragma once
#include <cstddef>
#include <filesystem>

namespace terrace::testing {

// The entries of /proc/self/task: one per thread of this process.
inline size_t process_threads() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

}  // namespace terrace::testing
