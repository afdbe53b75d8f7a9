// terrace._terrace.Session (py_session.h).
#include "python/src/py_session.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <thread>

#include "tools/cli_util.h"

namespace py = pybind11;

namespace terrace::python {

namespace {

// The enum value whose name (`name_of`) is `text`, for the first `count` values.
template <typename Enum, typename NameOf>
Enum parse_named(const std::string& what, const std::string& text, int count, NameOf name_of) {
  std::string names;
  for (int i = 0; i < count; ++i) {
    if (text == name_of(Enum(i))) return Enum(i);
    names += std::string(i ? ", " : "") + name_of(Enum(i));
  }
  fail(ErrorCode::InvalidArgument, what, " must be one of ", names, " (or None), not '", text, "'");
}

Options make_options(const std::optional<std::string>& tier, const std::optional<std::string>& mode,
                     std::optional<int> threads) {
  Options o = Options::from_env();
  if (tier) o.max_tier = parse_named<Tier>("tier", *tier, int(Tier::Gpu) + 1, tier_name);
  if (mode) o.mode = parse_named<Mode>("mode", *mode, int(Mode::MaxAutotune) + 1, mode_name);
  if (threads) {
    TERRACE_CHECK(*threads > 0, InvalidArgument, "threads must be 1 or more (or None), not ", *threads);
    o.interp_threads = *threads;
  }
  return o;
}

std::unique_ptr<Session> load(py::handle model, Options options) {
  if (py::isinstance<py::bytes>(model)) {
    char* data = nullptr;
    py::ssize_t size = 0;
    if (PyBytes_AsStringAndSize(model.ptr(), &data, &size) != 0) throw py::error_already_set();
    // bytes are immutable and the caller's reference keeps them alive while the GIL is let go.
    py::gil_scoped_release nogil;
    return Session::load_bytes(std::string_view(data, size_t(size)), std::move(options));
  }
  if (!py::isinstance<py::str>(model)) throw py::type_error("a model is a path (str) or its bytes");
  std::string path = model.cast<std::string>();
  py::gil_scoped_release nogil;
  return Session::load(path, std::move(options));
}

}  // namespace

PySession::PySession(py::object model, std::optional<std::string> tier, std::optional<std::string> mode,
                     std::optional<int> threads)
    : model_(model),
      tier_given_(tier.has_value()),
      session_(load(model, make_options(tier, mode, threads))),
      constants_(std::make_unique<ConstantMemory>(session_->graph())) {
  const Graph& g = session_->graph();
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    const std::string& name = g.values[size_t(g.outputs[i])].name;
    output_index_.emplace(name, i);
    output_list_ += (i ? ", " : "") + name;
  }
}

PySession::~PySession() {
  py::gil_scoped_release nogil;
  session_.reset();
}

std::vector<size_t> PySession::select_outputs(py::handle output_names) const {
  std::vector<size_t> wanted;
  if (output_names.is_none()) {
    for (size_t i = 0; i < output_index_.size(); ++i) wanted.push_back(i);
    return wanted;
  }
  if (py::isinstance<py::str>(output_names)) throw py::type_error("output_names is a list of names or None, not a str");
  for (py::handle item : output_names) {
    const std::string name = py::cast<std::string>(item);
    auto it = output_index_.find(name);
    TERRACE_CHECK(it != output_index_.end(), InvalidArgument, "'", name, "' is not an output of the model (outputs: ",
                  output_list_, ")");
    wanted.push_back(it->second);
  }
  return wanted;
}

NamedTensors feed_tensors(py::dict feed, std::vector<py::object>& keep) {
  NamedTensors inputs;
  inputs.reserve(feed.size());
  keep.reserve(feed.size());
  for (auto [key, value] : feed) {
    if (!py::isinstance<py::str>(key)) throw py::type_error("a feed's keys are input names (str)");
    std::string name = key.cast<std::string>();
    Tensor t = tensor_from_value(name, value, keep);
    inputs.emplace_back(std::move(name), std::move(t));
  }
  return inputs;
}

py::list PySession::run(py::object output_names, py::dict feed, bool as_tensors) {
  const std::vector<size_t> wanted = select_outputs(output_names);
  std::vector<py::object> keep;  // what borrowed tensors read: alive until the outputs are made
  const NamedTensors inputs = feed_tensors(feed, keep);
  NamedTensors out;
  {
    py::gil_scoped_release nogil;
    out = session_->run(inputs);
  }
  py::list result;
  for (size_t i : wanted)
    result.append(as_tensors ? py::cast(tensor_output(out[i].second, *constants_))
                             : py::object(numpy_from_tensor(out[i].second, *constants_)));
  return result;
}

py::list PySession::run_bound(py::dict feed, const std::vector<std::string>& output_names,
                              const std::vector<std::string>& devices) {
  TERRACE_CHECK(output_names.size() == devices.size(), Internal, "run_bound: ", output_names.size(), " names, ",
                devices.size(), " devices");
  py::list names;
  for (const std::string& n : output_names) names.append(n);
  const std::vector<size_t> wanted = select_outputs(output_names.empty() ? py::object(py::none()) : py::object(names));
  std::vector<py::object> keep;
  const NamedTensors inputs = feed_tensors(feed, keep);
  std::vector<Tensor> results;
  {
    py::gil_scoped_release nogil;
    RunOptions options;
    options.outputs_on_device = std::find(devices.begin(), devices.end(), "cuda") != devices.end();
    NamedTensors out = session_->run(inputs, options);
    for (size_t k = 0; k < wanted.size(); ++k) {
      Tensor t = out[wanted[k]].second;
      const bool on_device = !devices.empty() && devices[k] == "cuda";
      if (on_device && !t.on_device()) t = session_->to_device(t);  // NotImplemented without tier 2
      if (!on_device && t.on_device()) t = t.to_host();
      results.push_back(std::move(t));
    }
  }
  py::list result;
  for (Tensor& t : results) result.append(tensor_output(std::move(t), *constants_));
  return result;
}

void PySession::check_input(const std::string& name) const {
  cli::check_input_name(session_->graph(), name, "bind_input");  // a UsageError: InvalidArgument in Python
}

void PySession::check_output(const std::string& name) const {
  TERRACE_CHECK(output_index_.count(name), InvalidArgument, "'", name, "' is not an output of the model (outputs: ",
                output_list_, ")");
}

py::list PySession::describe(const std::vector<int>& values) const {
  const Graph& g = session_->graph();
  py::list result;
  for (int id : values) {
    const Value& v = g.values[size_t(id)];
    py::object shape = py::none();
    if (v.info.shape) {
      py::list dims;
      for (size_t d = 0; d < v.info.shape->size(); ++d) {
        const int64_t n = (*v.info.shape)[d];
        const std::string sym = d < v.info.dim_names.size() ? v.info.dim_names[d] : "";
        dims.append(n >= 0 ? py::object(py::int_(n)) : sym.empty() ? py::object(py::none()) : py::object(py::str(sym)));
      }
      shape = dims;
    }
    result.append(py::make_tuple(v.name, shape, onnx_type_string(v.info)));
  }
  return result;
}

std::string PySession::report_json() const {
  py::gil_scoped_release nogil;
  return session_->report_json();
}

std::string PySession::report() const {
  py::gil_scoped_release nogil;
  return session_->report();
}

bool PySession::wait_until_settled(std::optional<double> timeout_s) {
  py::gil_scoped_release nogil;
  if (!timeout_s) {
    session_->wait_for_compiles();
    return true;
  }
  // Session's wait has no timeout: it waits on a thread of its own, which keeps the session alive.
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> settled = done->get_future();
  std::thread([session = session_, done] {
    try {
      session->wait_for_compiles();
    } catch (...) {
    }
    done->set_value();
  }).detach();
  return settled.wait_for(std::chrono::duration<double>(std::max(0.0, *timeout_s))) == std::future_status::ready;
}

}  // namespace terrace::python
