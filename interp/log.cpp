// Logging and fault-injection switches read from the environment.
#include "interp/log.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace terrace {

namespace {
LogLevel level_from_env() {
  const char* v = std::getenv("TERRACE_LOG");
  if (!v) return LogLevel::Warn;
  std::string s = v;
  if (s == "error") return LogLevel::Error;
  if (s == "info") return LogLevel::Info;
  if (s == "debug") return LogLevel::Debug;
  if (s == "trace") return LogLevel::Trace;
  return LogLevel::Warn;
}
const char* kNames[] = {"error", "warn", "info", "debug", "trace"};
}  // namespace

bool log_enabled(LogLevel level) {
  static const LogLevel threshold = level_from_env();
  return level <= threshold;
}

void log_line(LogLevel level, const std::string& line) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  std::fprintf(stderr, "[terrace %s] %s\n", kNames[int(level)], line.c_str());
}

bool fault_enabled(std::string_view fault) {
  const char* env = std::getenv("TERRACE_FAULT");
  std::string_view list = env ? env : "";
  while (!list.empty()) {
    size_t comma = list.find(',');
    std::string_view entry = list.substr(0, comma);
    while (!entry.empty() && entry.front() == ' ') entry.remove_prefix(1);
    while (!entry.empty() && entry.back() == ' ') entry.remove_suffix(1);
    if (entry == fault) return true;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return false;
}

}  // namespace terrace
