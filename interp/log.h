// Levelled logging to stderr, set by TERRACE_LOG (error, warn, info, debug, trace, or 0-4; default
// warn). A value that is none of these is said once on stderr and means warn.
//   warn:  compile failures, demotions, model warnings, an unwritable cache
//   info:  promotions, regions that stop compiling
//   debug: deopts (guard failures), cache evictions
//   trace: every disk-cache hit, miss and store, and the CLI's per-call inputs and outputs
#pragma once
#include <string>
#include <string_view>

#include "interp/error.h"

namespace terrace {

enum class LogLevel { Error = 0, Warn, Info, Debug, Trace };

// The level TERRACE_LOG sets (read once per process).
LogLevel log_level();
// Empty when TERRACE_LOG is unset or a level; otherwise the message saying what is wrong with it
// (the CLI prints it before any work).
std::string log_level_problem();
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
