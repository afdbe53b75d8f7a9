// Options defaults and environment overrides.
#include "tiers/options.h"

#include <cstdlib>
#include <string>

#include "interp/error.h"

namespace terrace {

const char* tier_name(Tier t) {
  switch (t) {
    case Tier::Interp: return "interp";
    case Tier::Cpu: return "cpu";
    case Tier::Gpu: return "gpu";
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
  read_level("TERRACE_OPTIMIZE", {"none", "basic", "extended"},
             {OptimizeLevel::None, OptimizeLevel::Basic, OptimizeLevel::Extended}, o.optimize);
  return o;
}

}  // namespace terrace
