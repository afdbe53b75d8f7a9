// Levelled logging to stderr, set by TERRACE_LOG (error, warn, info, debug, trace, or 0-4; default
// warn). A value that is none of these is said once on stderr and means warn.
// TERRACE_LOG is a comma-separated list: at most one level and any of the topics (as TORCH_LOGS)
//   graph_breaks  each node left to the interpreter at load, with the reason
//   recompiles    each compile of a region that already has a version (a new signature), and why
//   deopts        each call a compiled version's guards turned away, with the failed guard
//   promotions    each version published (region, tier, signature, compile time)
//   validation    each shadow validation and re-check that passed or failed, and each demotion
// A topic's lines are printed whatever the level, each one reason, prefixed "[terrace TOPIC]".
// "TERRACE_LOG=info,deopts": info's lines and the deopts.
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

enum class LogTopic { GraphBreaks = 0, Recompiles, Deopts, Promotions, Validation, Threads };
const char* log_topic_name(LogTopic topic);  // "graph_breaks", ...
bool log_topic_enabled(LogTopic topic);
void log_topic_line(LogTopic topic, const std::string& line);

// One event of `topic`: printed as "[terrace TOPIC] ..." when TERRACE_LOG names the topic, else as
// a line of `level` when the level is enabled (so that turning a topic on does not print it twice).
template <typename... Args>
void log_event(LogTopic topic, LogLevel level, const Args&... args) {
  if (log_topic_enabled(topic)) log_topic_line(topic, detail::concat(args...));
  else if (log_enabled(level)) log_line(level, detail::concat(args...));
}

// True when TERRACE_FAULT (a comma-separated list, e.g. "miscompile:cpu,compile-fail:cpu") names
// `fault`. Fault injection for tests; inert unless the variable is set. Read on every call, so
// tests may set and unset the variable at run time.
bool fault_enabled(std::string_view fault);

}  // namespace terrace
