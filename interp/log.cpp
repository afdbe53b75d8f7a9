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

bool fault_enabled(const std::string& fault) {
  const char* v = std::getenv("TERRACE_FAULT");
  if (!v) return false;
  std::string s = std::string(",") + v + ",";
  return s.find("," + fault + ",") != std::string::npos;
}

}  // namespace terrace
