// Trace: a session's profile in Chrome's trace event format (the JSON that Perfetto and
// chrome://tracing load). Options::profile_file (or TERRACE_PROFILE) turns it on; the session
// writes the file when it is destroyed, or on Session::write_profile.
//
// What is recorded (the "cat" of each event):
//   call        a span per Session::run, on the caller's thread
//   region      a span per region execution, with the tier that produced its results
//   compile     a span per background compile job (tier 1 or 2), on its compile thread
//   validation  a span per shadow validation (on the caller's thread) and background re-check
//   deopt       an instant event per deopt (the failed guard) and demotion (the reason)
//   transfer    a counter of host<->device tensor copies per region (tier 2)
// Timestamps are microseconds since the recorder was made; tid is the Linux thread id, and each
// thread is named (a "thread_name" metadata event) after the first kind of event it records.
//
// Cheap when off: every hook is one branch on a null pointer (Options::trace). When on, events are
// appended under a mutex; past kMaxEvents they are counted, not kept (the file says how many).
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace terrace {

class Trace {
 public:
  static constexpr size_t kMaxEvents = 1'000'000;
  using Clock = std::chrono::steady_clock;

  // Opens `path` for writing at once (and leaves an empty trace there), so that a path that cannot
  // be written fails the session's load: Error(IoError) naming it.
  explicit Trace(std::string path);
  // The recorder of `path` for this process (made on first use, kept until exit): sessions made
  // one after another with the same profile file (terrace validate, TERRACE_PROFILE over a program
  // with several sessions) write one trace holding all of them, not the last one's.
  static std::shared_ptr<Trace> for_file(const std::string& path);
  // Writes the file if it was not written since the last event (errors are logged, not thrown).
  ~Trace();
  Trace(const Trace&) = delete;
  Trace& operator=(const Trace&) = delete;

  // Extra "args" of an event: key, value pairs (values are strings, written as JSON strings).
  using Args = std::vector<std::pair<std::string, std::string>>;

  Clock::time_point now() const { return Clock::now(); }
  // A complete span ('X') on the calling thread from `start` to now.
  void span(const char* cat, std::string name, Clock::time_point start, Args args = {});
  // An instant event ('i', thread scope) on the calling thread.
  void instant(const char* cat, std::string name, Args args = {});
  // A counter ('C'): the series `series` of counter `name` takes `value`.
  void counter(const char* cat, std::string name, const std::string& series, double value);

  // The whole trace as JSON ({"traceEvents": [...], "displayTimeUnit": "ms", ...}).
  std::string json() const;
  // Writes json() to the file: Error(IoError) naming it on failure.
  void write() const;
  const std::string& path() const { return path_; }
  size_t events() const;

 private:
  struct Event {
    char ph;
    const char* cat;
    std::string name;
    int64_t tid;
    double ts_us, dur_us;
    Args args;
    double value;  // counters
  };
  void add(Event e);
  double us(Clock::time_point t) const;

  const std::string path_;
  const Clock::time_point origin_;
  const int64_t pid_;
  mutable std::mutex mu_;
  std::vector<Event> events_;
  std::vector<std::pair<int64_t, std::string>> thread_names_;
  size_t dropped_ = 0;
  mutable bool dirty_ = false;
};

// A span recorded when it goes out of scope; nothing (not even a clock read) when `trace` is null.
class TraceSpan {
 public:
  // Named "`what` `id`" ("validate region 3"), built only when tracing.
  TraceSpan(Trace* trace, const char* cat, const char* what, int64_t id) : trace_(trace), cat_(cat) {
    if (trace_) {
      name_ = std::string(what) + " " + std::to_string(id);
      start_ = trace_->now();
    }
  }
  ~TraceSpan() {
    if (trace_) trace_->span(cat_, std::move(name_), start_, std::move(args_));
  }
  void arg(std::string key, std::string value) {
    if (trace_) args_.emplace_back(std::move(key), std::move(value));
  }
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

 private:
  Trace* trace_;
  const char* cat_;
  std::string name_;
  Trace::Clock::time_point start_;
  Trace::Args args_;
};

}  // namespace terrace
