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

Options Options::from_env() {
  Options o;
  if (const char* t = std::getenv("TERRACE_MAX_TIER")) {
    std::string s = t;
    if (s == "interp" || s == "0") o.max_tier = Tier::Interp;
    else if (s == "cpu" || s == "1") o.max_tier = Tier::Cpu;
    else if (s == "gpu" || s == "2") o.max_tier = Tier::Gpu;
    else fail(ErrorCode::InvalidArgument, "TERRACE_MAX_TIER='", s, "': expected interp, cpu or gpu");
  }
  if (const char* d = std::getenv("TERRACE_CACHE_DIR")) o.cache_dir = d;
  if (const char* r = std::getenv("TERRACE_RECHECK")) {
    char* end = nullptr;
    const double budget = std::strtod(r, &end);
    TERRACE_CHECK(*r && end && *end == '\0' && budget >= 0 && budget <= 1, InvalidArgument, "TERRACE_RECHECK='", r,
                  "': expected a fraction of run time between 0 and 1 (default 0.01)");
    o.recheck_budget = budget;
  }
  if (const char* l = std::getenv("TERRACE_OPTIMIZE")) {
    std::string s = l;
    if (s == "none" || s == "0") o.optimize = OptimizeLevel::None;
    else if (s == "basic" || s == "1") o.optimize = OptimizeLevel::Basic;
    else if (s == "extended" || s == "2") o.optimize = OptimizeLevel::Extended;
    else fail(ErrorCode::InvalidArgument, "TERRACE_OPTIMIZE='", s, "': expected none, basic or extended");
  }
  return o;
}

}  // namespace terrace
