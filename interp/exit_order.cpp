// at_exit_first / at_exit_refresh: one std::atexit handler, registered again on refresh.
#include "interp/exit_order.h"

#include <unistd.h>

#include <cstdlib>
#include <mutex>
#include <vector>

namespace terrace {
namespace {

struct ExitWork {
  std::mutex mu;
  std::vector<void (*)()> fns;
  bool ran = false;
  int registrations = 0;
};

ExitWork& work() {
  static auto* w = new ExitWork;  // never destroyed: read by the handler during exit
  return *w;
}

// glibc keeps any number of handlers, but each registration is a small allocation for the
// process's life: a bound keeps a caller that refreshes often from growing it.
constexpr int kMaxRegistrations = 64;

void run_once() {
  std::vector<void (*)()> fns;
  {
    ExitWork& w = work();
    std::lock_guard<std::mutex> lock(w.mu);
    if (w.ran) return;
    w.ran = true;
    fns = w.fns;
  }
  for (void (*fn)() : fns) fn();
}

// The main thread's thread_local: exit() destroys it before any atexit handler or static runs.
struct MainThreadExit {
  ~MainThreadExit() {
    if (::gettid() == ::getpid()) run_once();  // the main thread's exit, not a thread's end
  }
};

void arm_main_thread() {
  if (::gettid() != ::getpid()) return;
  thread_local MainThreadExit sentinel;
  (void)sentinel;
}

void register_locked(ExitWork& w) {
  if (w.ran || w.fns.empty() || w.registrations >= kMaxRegistrations) return;
  if (std::atexit(run_once) == 0) ++w.registrations;
}

}  // namespace

void at_exit_first(void (*fn)()) {
  arm_main_thread();
  ExitWork& w = work();
  std::lock_guard<std::mutex> lock(w.mu);
  for (void (*f)() : w.fns)
    if (f == fn) return register_locked(w);
  w.fns.push_back(fn);
  register_locked(w);
}

void at_exit_refresh() {
  arm_main_thread();
  ExitWork& w = work();
  std::lock_guard<std::mutex> lock(w.mu);
  register_locked(w);
}

}  // namespace terrace
