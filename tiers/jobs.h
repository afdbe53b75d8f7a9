// JobPool: a session's background threads (compiles, re-checks) and their queue, and the process
// exit that stops every pool before the libraries its jobs use are torn down.
#pragma once
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace terrace {

// Threads of the session's own, not a shared pool: a compile that hangs then holds up only its
// own session's jobs. When the session goes away, queued jobs are dropped unrun and a running one
// is waited for up to a limit, then abandoned: its thread is detached and finishes on its own, and
// the pool is leaked with it rather than destroyed under it (what the job touches is the caller's
// to keep alive). A thread that cannot start (std::system_error: EAGAIN at a thread limit) is tried
// again at the next job while none runs; enqueue() then says why.
class JobPool {
 public:
  // `threads` threads at scheduling priority `nice` (0 as the caller's; 19 yields to every other).
  explicit JobPool(int threads, int nice = 0);
  ~JobPool();  // only once stop() found nothing running

  // Queues f; "" when it will run (or the pool is stopping: then it is dropped), else why it cannot.
  std::string enqueue(std::function<void()> f);
  // Blocks until no job is queued or running.
  void wait();
  // Drops the queued jobs and waits up to `ms` for the running ones: true when none is left.
  bool stop(int ms);
  // Detaches the threads of a pool whose running job outlived stop(): leak the pool after this.
  void abandon();

 private:
  void loop();
  std::string start_threads();  // mu_ held
  bool stop_until(std::chrono::steady_clock::time_point deadline);
  // Every pool, live sessions' and abandoned ones'; at exit (interp/exit_order.h) each stops, its
  // running jobs are waited for (at most 10 s in all) and its threads joined.
  static void stop_all_at_exit();

  std::mutex mu_;
  std::condition_variable work_, idle_;
  std::deque<std::function<void()>> queue_;
  int in_flight_ = 0;  // queued or running
  bool stopping_ = false;
  const int wanted_, nice_;
  std::vector<std::thread> threads_;
};

}  // namespace terrace
