// JobPool (tiers/jobs.h).
#include "tiers/jobs.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <system_error>

#include "interp/exit_order.h"
#include "interp/log.h"
#include "interp/omp_threads.h"

namespace terrace {
namespace {

constexpr int kExitWaitMs = 10000;

struct Pools {
  std::mutex mu;
  std::vector<JobPool*> pools;
  bool exited = false;
};

Pools& pools() {
  static auto* p = new Pools;  // never destroyed: the exit reads it
  return *p;
}

}  // namespace

JobPool::JobPool(int threads, int nice) : wanted_(std::max(1, threads)), nice_(nice) {
  {
    Pools& p = pools();
    std::lock_guard<std::mutex> lock(p.mu);
    p.pools.push_back(this);
    at_exit_first(stop_all_at_exit);
  }
  std::lock_guard<std::mutex> lock(mu_);
  start_threads();  // a failure is said by the first enqueue()
}

JobPool::~JobPool() {
  {
    Pools& p = pools();
    std::lock_guard<std::mutex> lock(p.mu);  // waits for a running stop_all_at_exit
    p.pools.erase(std::remove(p.pools.begin(), p.pools.end(), this), p.pools.end());
  }
  for (std::thread& t : threads_)
    if (t.joinable()) t.join();
}

void JobPool::loop() {
  for (;;) {
    std::function<void()> f;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping
      f = std::move(queue_.front());
      queue_.pop_front();
    }
    f();
    f = nullptr;  // its captures go before the job counts as done
    at_exit_refresh();  // after the first jobs built oneDNN's and LLVM's statics (exit_order.h)
    std::lock_guard<std::mutex> lock(mu_);
    if (--in_flight_ == 0) idle_.notify_all();
  }
}

std::string JobPool::start_threads() {
  std::string why;
  while (int(threads_.size()) < wanted_) {
    try {
      if (fault_enabled("thread-create:cpu"))  // as a process at its thread limit
        throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again));
      threads_.emplace_back([this] {
        if (nice_ > 0) ::setpriority(PRIO_PROCESS, pid_t(::syscall(SYS_gettid)), nice_);  // Linux: per thread
        mark_background_thread();  // its OpenMP code on one thread (interp/omp_threads.h says why)
        loop();
      });
    } catch (const std::system_error& e) {
      why = e.what();
      break;
    }
  }
  return threads_.empty() ? "cannot start a background thread: " + why : "";
}

std::string JobPool::enqueue(std::function<void()> f) {
  at_exit_refresh();  // on the main thread: the exit stops this job before any static goes
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return "";
  if (threads_.empty())
    if (std::string why = start_threads(); !why.empty()) return why;
  ++in_flight_;
  queue_.push_back(std::move(f));
  work_.notify_one();
  return "";
}

void JobPool::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait(lock, [&] { return in_flight_ == 0; });
}

bool JobPool::stop_until(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  stopping_ = true;
  in_flight_ -= int(queue_.size());
  queue_.clear();
  work_.notify_all();
  return idle_.wait_until(lock, deadline, [&] { return in_flight_ == 0; });
}

bool JobPool::stop(int ms) {
  return stop_until(std::chrono::steady_clock::now() + std::chrono::milliseconds(std::max(0, ms)));
}

void JobPool::abandon() {
  for (std::thread& t : threads_) t.detach();
}

void JobPool::stop_all_at_exit() {
  Pools& p = pools();
  std::lock_guard<std::mutex> lock(p.mu);
  if (p.exited) return;
  p.exited = true;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kExitWaitMs);
  for (JobPool* pool : p.pools) {
    if (!pool->stop_until(deadline)) {
      std::fprintf(stderr, "[terrace warn] exiting while a background job still runs after %d ms\n", kExitWaitMs);
      return;
    }
    for (std::thread& t : pool->threads_)  // idle and stopping: each returns at once
      if (t.joinable()) t.join();
  }
}

}  // namespace terrace
