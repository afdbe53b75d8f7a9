// Logging and fault-injection switches read from the environment.
#include "interp/log.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace terrace {

namespace {
const char* kNames[] = {"error", "warn", "info", "debug", "trace"};

struct EnvLevel {
  LogLevel level = LogLevel::Warn;
  std::string problem;  // non-empty: TERRACE_LOG held something that is not a level
};

EnvLevel level_from_env() {
  EnvLevel e;
  const char* v = std::getenv("TERRACE_LOG");
  if (!v) return e;
  std::string s = v;
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (s.empty()) return e;
  for (int i = 0; i < 5; ++i)
    if (s == kNames[i] || s == std::to_string(i)) {
      e.level = LogLevel(i);
      return e;
    }
  if (s == "warning") {
    e.level = LogLevel::Warn;
    return e;
  }
  e.problem = std::string("TERRACE_LOG='") + v +
              "' is not a log level (expected error, warn, info, debug or trace); logging at warn";
  return e;
}

// Read once; an unknown value is said once, on stderr, the first time the level is asked for.
const EnvLevel& env_level() {
  static const EnvLevel e = [] {
    EnvLevel l = level_from_env();
    if (!l.problem.empty()) std::fprintf(stderr, "[terrace warn] %s\n", l.problem.c_str());
    return l;
  }();
  return e;
}
}  // namespace

LogLevel log_level() { return env_level().level; }

std::string log_level_problem() { return level_from_env().problem; }

bool log_enabled(LogLevel level) { return level <= env_level().level; }

void log_line(LogLevel level, const std::string& line) {
  static std::mutex* mu = new std::mutex;  // never destroyed: abandoned compiles may log at exit
  std::lock_guard<std::mutex> lock(*mu);
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
