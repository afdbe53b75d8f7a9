// Session: Terrace's public API. Load a model, run it (from any number of threads), report.
#pragma once
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "interp/graph.h"
#include "interp/tensor.h"
#include "tiers/options.h"
#include "tiers/partition.h"

namespace terrace {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
struct RegionReport;
struct PlanRecording;  // tiers/call_plan.h
struct PlanReport;     // tiers/call_plan.h
class CallPlan;        // tiers/call_plan.h
struct Frame;          // interp/interpreter.h

// What one run() call did.
struct CallRecord {
  int64_t index = 0;
  double ms = 0;
  std::vector<std::string> tiers;  // tiers that ran during the call ("interp", "cpu", "gpu")
  int64_t transfers = 0;           // tensors copied between host and device during the call
  int threads = 0;                 // the OpenMP team the call ran with
};

// The team a session's calls run with: fixed (Options::interp_threads, OMP_NUM_THREADS, one core)
// or chosen by measurement (tiers/thread_tuner.h), with its decisions, latest last.
struct ThreadsReport {
  int team = 0;
  bool adaptive = false;
  std::string why;  // the latest decision's reason, or why the team is fixed
  struct Decision {
    int64_t call = 0;
    int team = 0;
    std::string why;
  };
  std::vector<Decision> decisions;
};

// Per-call settings. A run that is terminated (from any thread) or passes its deadline stops
// before its next step, or its next node inside a Loop, Scan or If body, and throws
// Error(Cancelled); the session stays usable.
class RunOptions {
 public:
  RunOptions() : terminate_(std::make_shared<std::atomic<bool>>(false)) {}
  // Asks the runs given these options (and copies of them) to stop; thread-safe.
  void terminate() const { terminate_->store(true); }
  bool terminated() const { return terminate_->load(); }
  const std::atomic<bool>* terminate_flag() const { return terminate_.get(); }
  // The time by which the run must end (none by default).
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  // Outputs that tier 2 computed stay on the device (Tensor::on_device(); read with to_host()) for
  // a caller that feeds them to its own GPU work or back as inputs (with Session::to_device, ONNX
  // Runtime's IoBinding); others are host tensors. False: every output is a host tensor.
  bool outputs_on_device = false;

 private:
  std::shared_ptr<std::atomic<bool>> terminate_;
};

class Session {
 public:
  // Loads an ONNX model; throws terrace::Error (InvalidModel, IoError, NotImplemented).
  static std::unique_ptr<Session> load(const std::string& path, Options options = Options::from_env());
  static std::unique_ptr<Session> load_bytes(std::string_view bytes, Options options = Options::from_env());
  static std::unique_ptr<Session> from_graph(std::shared_ptr<const Graph> graph,
                                             Options options = Options::from_env());
  ~Session();

  // Runs the model. Inputs are matched by name; each graph input must be given once with the
  // declared dtype, rank and static dims (InvalidArgument naming the input otherwise). Returns
  // the graph outputs in declaration order. Thread-safe.
  NamedTensors run(const NamedTensors& inputs);
  NamedTensors run(const NamedTensors& inputs, const RunOptions& options);
  // A copy of host tensor `t` on tier 2's device, to pass as an input: regions on the GPU read it
  // where it is, other consumers get a host copy. Error(NotImplemented) without tier 2.
  Tensor to_device(const Tensor& t);

  // A JSON report: per region (id, ops, tier, calls, compile_ms, ...) and per call.
  std::string report_json() const;
  // The regions' part of it, typed (tiers/tier_manager.h): for tools that poll it between calls.
  std::vector<RegionReport> region_reports() const;
  // The call plans made so far (tiers/call_plan.h), most recent first.
  std::vector<PlanReport> plan_reports() const;
  // A short human-readable report.
  std::string report() const;
  // The team calls run with now, and why.
  ThreadsReport threads_report() const;

  // The graph the session runs: the loaded one after the graph passes (Options::optimize), whose
  // node indices the plan uses.
  const Graph& graph() const;
  // The execution plan: regions and interpreted nodes (graph breaks) with their reasons.
  const Plan& plan() const;
  // Blocks until no background compile is in flight (for tests and benchmarks; run() never waits).
  void wait_for_compiles();
  const Options& options() const;
  std::vector<CallRecord> calls() const;
  // Writes the Chrome trace (Options::profile_file) now, as the destructor does; IoError naming
  // the file on failure. Nothing without a profile file.
  void write_profile() const;
  // The latest call's record (index -1 before the first call): calls().back() without copying
  // every record.
  CallRecord last_call() const;

  struct Impl;

 private:
  struct CallState;
  explicit Session(std::unique_ptr<Impl> impl);
  void walk(Frame& frame, size_t from, CallState& c, PlanRecording* rec);
  double record_call(const CallState& c);  // the call's CallRecord; returns its time
  std::optional<std::vector<Tensor>> run_whole(CallPlan& plan, const std::vector<Tensor>& in, bool on_device,
                                               CallState& c);
  std::unique_ptr<Impl> impl_;
};

}  // namespace terrace
