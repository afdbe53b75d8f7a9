// env_flag: the one reading of on/off environment settings.
#include "interp/env_flag.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>

#include "interp/error.h"

namespace terrace {

bool env_flag(const char* var, bool fallback) {
  const char* v = std::getenv(var);
  if (!v || !*v) return fallback;
  std::string s = v;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  if (s == "1" || s == "on" || s == "true" || s == "yes") return true;
  if (s == "0" || s == "off" || s == "false" || s == "no") return false;
  fail(ErrorCode::InvalidArgument, var, "='", v, "': expected 1, on, true or yes, or 0, off, false or no");
}

void check_env_flags() {
  for (const char* var : {"TERRACE_STRICT", "TERRACE_PACKED_GEMM", "TERRACE_WINOGRAD", "TERRACE_CUDNN_TUNE", "TERRACE_GEMM_TUNE",
                          "TERRACE_DEVICE_TIMING", "TERRACE_ADAPT_THREADS",
                          "TERRACE_COMPILE_BODIES", "TERRACE_JUDGE_CLIMBS"})
    env_flag(var, false);
}

}  // namespace terrace
