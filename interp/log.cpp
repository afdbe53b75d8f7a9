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
const char* kTopics[] = {"graph_breaks", "recompiles", "deopts", "promotions", "validation", "threads"};
constexpr int kTopicCount = 6;

struct EnvLevel {
  LogLevel level = LogLevel::Warn;
  bool topics[kTopicCount] = {};
  std::string problem;  // non-empty: TERRACE_LOG held something that is not a level or a topic
};

// One item of TERRACE_LOG: a level (into `level`) or a topic (into `e.topics`); false if neither.
bool read_item(const std::string& s, EnvLevel& e, bool& level_given) {
  for (int i = 0; i < 5; ++i)
    if (s == kNames[i] || s == std::to_string(i)) {
      e.level = LogLevel(i);
      level_given = true;
      return true;
    }
  if (s == "warning") {
    e.level = LogLevel::Warn;
    level_given = true;
    return true;
  }
  std::string u = s;  // graph-breaks as well as graph_breaks
  for (char& c : u) c = c == '-' ? '_' : c;
  for (int t = 0; t < kTopicCount; ++t)
    if (u == kTopics[t]) {
      e.topics[t] = true;
      return true;
    }
  return false;
}

EnvLevel level_from_env() {
  EnvLevel e;
  const char* v = std::getenv("TERRACE_LOG");
  if (!v) return e;
  std::string s = v;
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (s.empty()) return e;
  const std::string expected =
      "expected error, warn, info, debug or trace, or the topics graph_breaks, recompiles, deopts, promotions, "
      "validation, threads";
  if (s.find(',') == std::string::npos) {
    bool level_given = false;
    if (!read_item(s, e, level_given))
      e.problem = std::string("TERRACE_LOG='") + v + "' is not a log level or topic (" + expected + "); logging at warn";
    return e;
  }
  // A list: at most one level and any topics.
  std::string bad;
  int levels = 0;
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    std::string item = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    bool level_given = false;
    if (!item.empty() && !read_item(item, e, level_given)) bad += (bad.empty() ? "'" : ", '") + item + "'";
    levels += level_given;
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (!bad.empty())
    e.problem = std::string("TERRACE_LOG='") + v + "': " + bad + " is not a log level or topic (" + expected +
                "); ignored";
  else if (levels > 1)
    e.problem = std::string("TERRACE_LOG='") + v + "' names more than one level; the last one counts";
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

namespace {
std::mutex& line_mutex() {
  static std::mutex* mu = new std::mutex;  // never destroyed: abandoned compiles may log at exit
  return *mu;
}
}  // namespace

void log_line(LogLevel level, const std::string& line) {
  std::lock_guard<std::mutex> lock(line_mutex());
  std::fprintf(stderr, "[terrace %s] %s\n", kNames[int(level)], line.c_str());
}

const char* log_topic_name(LogTopic topic) { return kTopics[int(topic)]; }

bool log_topic_enabled(LogTopic topic) { return env_level().topics[int(topic)]; }

void log_topic_line(LogTopic topic, const std::string& line) {
  std::lock_guard<std::mutex> lock(line_mutex());
  std::fprintf(stderr, "[terrace %s] %s\n", kTopics[int(topic)], line.c_str());
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
