// terrace._terrace: the compiled half of the terrace package (python/terrace/ is the other).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "python/src/errors.h"
#include "python/src/py_session.h"
#include "python/src/py_tensor.h"

namespace py = pybind11;
using namespace pybind11::literals;
using terrace::python::PySession;

PYBIND11_MODULE(_terrace, m) {
  m.doc() = "Terrace's Python binding; use the terrace package (terrace.InferenceSession).";
  m.attr("__version__") = TERRACE_VERSION_STRING;
  terrace::python::register_errors(m);
  terrace::python::register_tensor(m);
  py::class_<PySession>(m, "Session")
      .def(py::init<py::object, std::optional<std::string>, std::optional<std::string>, std::optional<int>>(),
           "model"_a, "tier"_a = py::none(), "mode"_a = py::none(), "threads"_a = py::none())
      .def("run", &PySession::run, "output_names"_a, "feed"_a, "as_tensors"_a = false)
      .def("run_bound", &PySession::run_bound, "feed"_a, "output_names"_a, "devices"_a)
      .def("check_input", &PySession::check_input, "name"_a)
      .def("check_output", &PySession::check_output, "name"_a)
      .def("inputs", &PySession::inputs)
      .def("outputs", &PySession::outputs)
      .def("report_json", &PySession::report_json)
      .def("report", &PySession::report)
      .def("wait_until_settled", &PySession::wait_until_settled, "timeout"_a = py::none())
      .def("warmup_state", &PySession::warmup_state)
      .def("validate", &PySession::validate, "feed"_a, "tiers"_a, "calls"_a, "dims"_a, "shapes"_a)
      .def("bench", &PySession::bench, "feed"_a, "calls"_a, "duration"_a, "concurrency"_a, "steady_calls"_a,
           "baseline_calls"_a, "dims"_a, "shapes"_a);
}
