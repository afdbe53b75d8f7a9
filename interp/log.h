// Levelled logging to stderr, set by TERRACE_LOG (error, warn, info, debug, trace; default warn).
#pragma once
#include <string>
#include <string_view>

#include "interp/error.h"

namespace terrace {

enum class LogLevel { Error = 0, Warn, Info, Debug, Trace };

bool log_enabled(LogLevel level);
void log_line(LogLevel level, const std::string& line);

template <typename... Args>
void log(LogLevel level, const Args&... args) {
  if (log_enabled(level)) log_line(level, detail::concat(args...));
}

// True when TERRACE_FAULT (a comma-separated list, e.g. "miscompile:cpu,compile-fail:cpu") names
// `fault`. Fault injection for tests; inert unless the variable is set. Read on every call, so
// tests may set and unset the variable at run time.
bool fault_enabled(std::string_view fault);

}  // namespace terrace
