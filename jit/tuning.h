// Choices made by timing candidates while compiling (tier 2's cuDNN algorithms, tier 1's weight
// order): what the timing costs, and where the choices are kept.
//
// The cost: timing code adds its wall time to this thread's tuning clock; a compile job reads the
// clock before and after a compile, so the region's report splits compile time into compiling
// and tuning (terrace bench's time to steady state).
//
// The choices: tuning records live in the code cache (jit/code_cache.h), under keys that start
// "tuning|" and name the device, the driver and library versions and the problem, so a later
// process starts with the earlier choice instead of timing again. A record is a hint: the caller
// checks the choice is still on offer, and an unreadable or stale record is a miss.
#pragma once
#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace terrace::jit {

class CodeCache;

// Wall time spent tuning on this thread since it started.
double tuning_ms_on_this_thread();

// Adds the time from its construction to its destruction to this thread's tuning clock.
class TuningTimer {
 public:
  TuningTimer() : start_(std::chrono::steady_clock::now()) {}
  ~TuningTimer();
  TuningTimer(const TuningTimer&) = delete;
  TuningTimer& operator=(const TuningTimer&) = delete;

 private:
  std::chrono::steady_clock::time_point start_;
};

// The choice recorded for `key` in `cache` (nullptr or a disabled cache: none).
std::optional<std::string> find_tuned(const CodeCache* cache, std::string_view key);
// Records `choice` for `key` (best effort, as CodeCache::store).
void keep_tuned(const CodeCache* cache, std::string_view key, std::string_view choice);

}  // namespace terrace::jit
