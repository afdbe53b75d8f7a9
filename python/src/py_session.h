// The Session that terrace.InferenceSession wraps: numpy or DLPack feeds in, numpy arrays or
// terrace.Tensor out, the GIL released while Terrace loads, runs, waits, validates or benchmarks.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "python/src/arrays.h"
#include "python/src/py_tensor.h"
#include "tiers/session.h"

namespace terrace::python {

// The tensors of a feed {name: value} (tensor_from_value); what they read is appended to `keep`.
NamedTensors feed_tensors(pybind11::dict feed, std::vector<pybind11::object>& keep);

class PySession {
 public:
  // `model`: a path (str) or the model's bytes. `tier`: interp|cpu|gpu, the highest tier;
  // `mode`: default|reduce-overhead|max-autotune; `threads`: a call's threads. None: as the
  // environment says (Options::from_env). InvalidArgument for a value outside these.
  PySession(pybind11::object model, std::optional<std::string> tier, std::optional<std::string> mode,
            std::optional<int> threads);
  // Lets the GIL go while the session ends: it may wait for a compile in flight (Options::compile_wait_ms).
  ~PySession();

  // The outputs named (None: all, in the model's order) for the feed {name: value} (a numpy
  // array, a terrace.Tensor or any DLPack object), as numpy arrays or, with `as_tensors`, as
  // terrace.Tensor. Thread-safe.
  pybind11::list run(pybind11::object output_names, pybind11::dict feed, bool as_tensors);
  // IoBinding's run: the outputs named, each as a terrace.Tensor on its device ("cpu" or "cuda":
  // tier 2's device tensors stay there; a host output bound to "cuda" is copied there, which
  // needs tier 2).
  pybind11::list run_bound(pybind11::dict feed, const std::vector<std::string>& output_names,
                           const std::vector<std::string>& devices);
  // InvalidArgument naming `name` unless it is an input (output) of the model.
  void check_input(const std::string& name) const;
  void check_output(const std::string& name) const;
  // (name, shape, type) of each input or output: shape's dims are ints, a symbolic dim's name, or
  // None; the shape is None where the rank is unknown. type as ONNX Runtime's: "tensor(float)".
  pybind11::list inputs() const { return describe(session_->graph().inputs); }
  pybind11::list outputs() const { return describe(session_->graph().outputs); }
  std::string report_json() const;
  std::string report() const;
  // Waits for the background compiles in flight; false if `timeout_s` passed first.
  bool wait_until_settled(std::optional<double> timeout_s);
  // The warm-up state: each region's tier and state, and whether all have settled (py_tools.cpp).
  pybind11::dict warmup_state() const;

  // `terrace validate` and `terrace bench` on this session's model with its options, their JSON
  // as text (py_tools.cpp). `feed`: inputs given ({name: value}); the others are random, with
  // `dims` ({symbolic dim: size}) and `shapes` ({input: shape}).
  std::string validate(pybind11::dict feed, const std::string& tiers, std::optional<int64_t> calls,
                       pybind11::dict dims, pybind11::dict shapes);
  std::string bench(pybind11::dict feed, int64_t calls, std::optional<double> duration_s, int64_t concurrency,
                    int64_t steady_calls, std::optional<int64_t> baseline_calls, pybind11::dict dims,
                    pybind11::dict shapes);

 private:
  pybind11::list describe(const std::vector<int>& values) const;
  std::vector<size_t> select_outputs(pybind11::handle output_names) const;

  // The model as given (a path or bytes), which validate and bench load afresh.
  pybind11::object model_;
  bool tier_given_ = false;  // tier= was passed: bench says so where that tier is not available
  // Shared with a wait_until_settled that timed out and is still waiting on its own thread.
  std::shared_ptr<Session> session_;
  std::unique_ptr<ConstantMemory> constants_;
  std::unordered_map<std::string, size_t> output_index_;
  std::string output_list_;  // "a, b": for errors
};

}  // namespace terrace::python
