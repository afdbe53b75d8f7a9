// Options defaults and environment overrides.
#include "tiers/options.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include <omp.h>

#include "interp/env_flag.h"
#include "interp/error.h"
#include "interp/log.h"

namespace terrace {

const char* tier_name(Tier t) {
  switch (t) {
    case Tier::Interp: return "interp";
    case Tier::Cpu: return "cpu";
    case Tier::Gpu: return "gpu";
  }
  static const char* const kPlugIns[kMaxTiers] = {"?", "?", "?", "tier3", "tier4", "tier5", "tier6", "tier7"};
  return int(t) >= 0 && int(t) < kMaxTiers ? kPlugIns[int(t)] : "?";
}

const char* mode_name(Mode m) {
  switch (m) {
    case Mode::Default: return "default";
    case Mode::ReduceOverhead: return "reduce-overhead";
    case Mode::MaxAutotune: return "max-autotune";
  }
  return "?";
}

namespace {
// The value of environment variable `var` as one of three levels, named or numbered 0-2.
template <typename Level>
void read_level(const char* var, const char* const (&names)[3], const Level (&levels)[3], Level& out) {
  const char* v = std::getenv(var);
  if (!v) return;
  const std::string s = v;
  for (int i = 0; i < 3; ++i)
    if (s == names[i] || s == std::to_string(i)) {
      out = levels[i];
      return;
    }
  fail(ErrorCode::InvalidArgument, var, "='", s, "': expected ", names[0], ", ", names[1], " or ", names[2]);
}
}  // namespace

Options Options::from_env() {
  Options o;
  read_level("TERRACE_MAX_TIER", {"interp", "cpu", "gpu"}, {Tier::Interp, Tier::Cpu, Tier::Gpu}, o.max_tier);
  if (const char* d = std::getenv("TERRACE_CACHE_DIR")) o.cache_dir = d;
  if (const char* r = std::getenv("TERRACE_RECHECK")) {
    char* end = nullptr;
    const double budget = std::strtod(r, &end);
    TERRACE_CHECK(*r && end && *end == '\0' && budget >= 0 && budget <= 1, InvalidArgument, "TERRACE_RECHECK='", r,
                  "': expected a fraction of run time between 0 and 1 (default 0.01)");
    o.recheck_budget = budget;
  }
  if (const char* r = std::getenv("TERRACE_SYMBOLIC_AFTER")) {
    char* end = nullptr;
    const long n = std::strtol(r, &end, 10);
    TERRACE_CHECK(*r && end && *end == '\0' && n >= 0 && n <= 1000, InvalidArgument, "TERRACE_SYMBOLIC_AFTER='", r,
                  "': expected a count of signatures, 0 (static versions only) to 1000 (default 3)");
    o.symbolic_after = int(n);
  }
  read_level("TERRACE_OPTIMIZE", {"none", "basic", "extended"},
             {OptimizeLevel::None, OptimizeLevel::Basic, OptimizeLevel::Extended}, o.optimize);
  read_level("TERRACE_MODE", {"default", "reduce-overhead", "max-autotune"},
             {Mode::Default, Mode::ReduceOverhead, Mode::MaxAutotune}, o.mode);
  read_level("TERRACE_CALL_PLANS", {"off", "steps", "whole"}, {CallPlanMode::Off, CallPlanMode::Steps, CallPlanMode::Whole},
             o.call_plans);
  o.strict = env_flag("TERRACE_STRICT", false);
  o.adapt_threads = env_flag("TERRACE_ADAPT_THREADS", true);
  o.compile_bodies = env_flag("TERRACE_COMPILE_BODIES", true);
  o.judge_climbs = env_flag("TERRACE_JUDGE_CLIMBS", true);
  if (const char* p = std::getenv("TERRACE_PROFILE")) o.profile_file = p;
  return o;
}

namespace {
// A thread count past the machine's hardware threads is cut down to them, said once per kind:
// 100,000 OpenMP threads crash inside libgomp, and more than the cores only oversubscribe them.
int clamp_threads(int n, const char* what) {
  const int hw = int(std::max(1u, std::thread::hardware_concurrency()));
  if (n <= hw) return n;
  static std::mutex mu;
  static std::set<std::string> said;
  std::lock_guard<std::mutex> lock(mu);
  if (said.insert(what).second)
    log(LogLevel::Warn, what, " asks for ", n, " threads, more than this machine's ", hw, "; using ", hw);
  return hw;
}
}  // namespace

Options Options::resolved() const {
  check_env_flags();
  Options o = *this;
  TERRACE_CHECK(interp_threads >= 0 && compile_threads >= 1, InvalidArgument, "Options: ", interp_threads,
                " interpreter and ", compile_threads, " compile threads (0 or more, and 1 or more)");
  if (interp_threads > 0) o.interp_threads = clamp_threads(interp_threads, "Options::interp_threads");
  else if (const int omp = omp_get_max_threads(), n = clamp_threads(omp, "OMP_NUM_THREADS"); n < omp)
    o.interp_threads = n;  // the caller's OpenMP setting (OMP_NUM_THREADS), cut down
  o.compile_threads = clamp_threads(compile_threads, "Options::compile_threads");
  switch (mode) {
    case Mode::Default: break;
    case Mode::ReduceOverhead:
      o.hot_threshold = 1;
      o.climb_threshold = std::min(o.climb_threshold, 2);
      o.validate_calls = std::min(o.validate_calls, 1);
      break;
    case Mode::MaxAutotune: break;  // tier 2 times cuBLASLt's candidates (tiers/ladder.cpp)
  }
  return o;
}

}  // namespace terrace
