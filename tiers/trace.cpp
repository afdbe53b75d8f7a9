// Trace: events in memory, written as Chrome trace event JSON.
#include "tiers/trace.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>

#include "interp/error.h"
#include "interp/json.h"

namespace terrace {

namespace {
int64_t this_thread_id() {
  thread_local const int64_t tid = int64_t(::syscall(SYS_gettid));
  return tid;
}

// A thread's name after the first kind of event it records: the caller's threads run calls,
// regions and validations; compiles and re-checks run on the session's background threads.
std::string thread_name_for(const char* cat, int64_t tid, int64_t pid) {
  const std::string c = cat;
  if (c == "compile") return "terrace compile (" + std::to_string(tid) + ")";
  if (c == "recheck") return "terrace re-check (" + std::to_string(tid) + ")";
  return tid == pid ? "main" : "caller (" + std::to_string(tid) + ")";
}

void write_file(const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  TERRACE_CHECK(f, IoError, "profile file '", path, "': cannot write: ", std::strerror(errno));
  size_t n = std::fwrite(text.data(), 1, text.size(), f);
  int err = n == text.size() ? 0 : (errno ? errno : EIO);
  if (std::fclose(f) != 0 && !err) err = errno;
  TERRACE_CHECK(!err, IoError, "profile file '", path, "': cannot write: ", std::strerror(err));
}
}  // namespace

std::shared_ptr<Trace> Trace::for_file(const std::string& path) {
  static std::mutex* mu = new std::mutex;  // never destroyed: sessions may end at exit
  // Kept for the process: a later session appends to the trace of the earlier ones. At exit the
  // map goes and a trace with events not yet written is written by its destructor.
  static std::map<std::string, std::shared_ptr<Trace>> kept;
  std::lock_guard<std::mutex> lock(*mu);
  std::shared_ptr<Trace>& slot = kept[path];
  if (!slot) slot = std::make_shared<Trace>(path);
  return slot;
}

Trace::Trace(std::string path) : path_(std::move(path)), origin_(Clock::now()), pid_(int64_t(::getpid())) {
  TERRACE_CHECK(!path_.empty(), InvalidArgument, "profile file: empty path");
  write_file(path_, json());  // fails here, at load, rather than after the work
}

Trace::~Trace() {
  if (!dirty_) return;
  try {
    write();
  } catch (const std::exception& e) {
    // Not through log(): this may run at exit (Trace::for_file's traces), after its statics.
    std::fprintf(stderr, "[terrace warn] %s\n", e.what());
  }
}

double Trace::us(Clock::time_point t) const {
  return std::chrono::duration<double, std::micro>(t - origin_).count();
}

void Trace::add(Event e) {
  std::lock_guard<std::mutex> lock(mu_);
  dirty_ = true;
  bool named = false;
  for (auto& [tid, name] : thread_names_) named = named || tid == e.tid;
  if (!named) thread_names_.emplace_back(e.tid, thread_name_for(e.cat, e.tid, pid_));
  if (events_.size() >= kMaxEvents) {
    ++dropped_;
    return;
  }
  events_.push_back(std::move(e));
}

void Trace::span(const char* cat, std::string name, Clock::time_point start, Args args) {
  const Clock::time_point end = Clock::now();
  add({'X', cat, std::move(name), this_thread_id(), us(start), std::max(0.0, us(end) - us(start)), std::move(args), 0});
}

void Trace::instant(const char* cat, std::string name, Args args) {
  add({'i', cat, std::move(name), this_thread_id(), us(Clock::now()), 0, std::move(args), 0});
}

void Trace::counter(const char* cat, std::string name, const std::string& series, double value) {
  add({'C', cat, std::move(name), this_thread_id(), us(Clock::now()), 0, {{series, ""}}, value});
}

size_t Trace::events() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_.size();
}

std::string Trace::json() const {
  std::lock_guard<std::mutex> lock(mu_);
  JsonWriter j;
  j.begin_object();
  j.key("traceEvents").begin_array();
  j.begin_object().field("ph", "M").field("name", "process_name").field("pid", pid_).field("tid", pid_)
      .field("ts", 0);
  j.key("args").begin_object().field("name", "terrace").end_object().end_object();
  for (auto& [tid, name] : thread_names_) {
    j.begin_object().field("ph", "M").field("name", "thread_name").field("pid", pid_).field("tid", tid)
        .field("ts", 0);
    j.key("args").begin_object().field("name", name).end_object().end_object();
  }
  for (const Event& e : events_) {
    j.begin_object().field("ph", std::string(1, e.ph)).field("cat", e.cat).field("name", e.name)
        .field("pid", pid_).field("tid", e.tid).field("ts", e.ts_us);
    if (e.ph == 'X') j.field("dur", e.dur_us);
    if (e.ph == 'i') j.field("s", "t");
    j.key("args").begin_object();
    if (e.ph == 'C') j.field(e.args.at(0).first, e.value);
    else
      for (auto& [k, v] : e.args) j.field(k, v);
    j.end_object();
    j.end_object();
  }
  j.end_array();
  j.field("displayTimeUnit", "ms");
  j.key("otherData").begin_object().field("producer", "terrace").field("dropped_events", dropped_).end_object();
  j.end_object();
  return j.str() + "\n";
}

void Trace::write() const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    dirty_ = false;  // an event added from here on marks it again
  }
  write_file(path_, json());
}

}  // namespace terrace
