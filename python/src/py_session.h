// The Session that terrace.InferenceSession wraps: numpy feeds in, numpy outputs out, the GIL
// released while Terrace loads, runs or waits.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "python/src/arrays.h"
#include "tiers/session.h"

namespace terrace::python {

class PySession {
 public:
  // `model`: a path (str) or the model's bytes. `tier`: interp|cpu|gpu, the highest tier;
  // `mode`: default|reduce-overhead|max-autotune; `threads`: a call's threads. None: as the
  // environment says (Options::from_env). InvalidArgument for a value outside these.
  PySession(pybind11::object model, std::optional<std::string> tier, std::optional<std::string> mode,
            std::optional<int> threads);
  // Lets the GIL go while the session ends: it may wait for a compile in flight (Options::compile_wait_ms).
  ~PySession();

  // The outputs named (None: all, in the model's order) for the feed {name: array}. Thread-safe.
  pybind11::list run(pybind11::object output_names, pybind11::dict feed);
  // (name, shape, type) of each input or output: shape's dims are ints, a symbolic dim's name, or
  // None; the shape is None where the rank is unknown. type as ONNX Runtime's: "tensor(float)".
  pybind11::list inputs() const { return describe(session_->graph().inputs); }
  pybind11::list outputs() const { return describe(session_->graph().outputs); }
  std::string report_json() const;
  std::string report() const;
  // Waits for the background compiles in flight; false if `timeout_s` passed first.
  bool wait_until_settled(std::optional<double> timeout_s);

 private:
  pybind11::list describe(const std::vector<int>& values) const;
  std::vector<size_t> select_outputs(pybind11::handle output_names) const;

  // Shared with a wait_until_settled that timed out and is still waiting on its own thread.
  std::shared_ptr<Session> session_;
  std::unique_ptr<ConstantMemory> constants_;
  std::unordered_map<std::string, size_t> output_index_;
  std::string output_list_;  // "a, b": for errors
};

}  // namespace terrace::python
