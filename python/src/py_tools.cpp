// Session.validate, Session.bench and Session.warmup_state (py_session.h): `terrace validate` and
// `terrace bench` through their core (tools/validate.h, tools/bench.h), and the regions' warm-up.
#include <pybind11/stl.h>

#include "python/src/py_session.h"
#include "tiers/tier_manager.h"
#include "tools/bench.h"
#include "tools/tensor_files.h"
#include "tools/validate.h"

namespace py = pybind11;

namespace terrace::python {

namespace {

// The model as given to the session, for the tools: a path, or bytes that `model` keeps alive.
cli::ModelSource model_source(const py::object& model) {
  cli::ModelSource source;
  if (py::isinstance<py::bytes>(model)) {
    char* data = nullptr;
    py::ssize_t size = 0;
    if (PyBytes_AsStringAndSize(model.ptr(), &data, &size) != 0) throw py::error_already_set();
    source.bytes = std::string_view(data, size_t(size));
  } else {
    source.path = model.cast<std::string>();
  }
  return source;
}

std::vector<std::pair<std::string, int64_t>> dims_of(py::dict dims) {
  std::vector<std::pair<std::string, int64_t>> out;
  for (auto [k, v] : dims) {
    const int64_t n = v.cast<int64_t>();
    TERRACE_CHECK(n >= 0, InvalidArgument, "dims: '", k.cast<std::string>(), "' must be 0 or more, not ", n);
    out.emplace_back(k.cast<std::string>(), n);
  }
  return out;
}

// {input: shape} as --shapes entries, "x:1x3x224x224", which parse_shapes checks against the model.
std::vector<std::string> shapes_of(py::dict shapes) {
  std::vector<std::string> out;
  for (auto [k, v] : shapes) {
    std::string entry = k.cast<std::string>() + ":";
    bool first = true;
    for (py::handle d : v) {
      entry += (first ? "" : "x") + std::to_string(d.cast<int64_t>());
      first = false;
    }
    out.push_back(entry);
  }
  return out;
}

// A feed's tensors in host memory (the reference and the float64 model read them there), each
// checked against the model's input of its name.
NamedTensors host_feed(py::dict feed, const Graph& graph, std::vector<py::object>& keep) {
  NamedTensors given = feed_tensors(feed, keep);
  for (auto& [name, t] : given) {
    cli::check_input_name(graph, name, "input");
    if (t.on_device()) t = t.to_host();
    cli::check_against_input(graph, name, t, "input '" + name + "'");
  }
  return given;
}

}  // namespace

std::string PySession::validate(py::dict feed, const std::string& tiers, std::optional<int64_t> calls,
                                py::dict dims, py::dict shapes) {
  cli::ValidateSpec spec;
  spec.tiers = tiers;
  if (calls) TERRACE_CHECK(*calls > 0, InvalidArgument, "calls must be 1 or more (or None), not ", *calls);
  spec.calls = calls.value_or(0);
  spec.dims = dims_of(dims);
  spec.shapes = shapes_of(shapes);
  spec.base = session_->options();
  spec.random_others = true;  // inputs not in the feed are random, as the CLI's --random-inputs
  cli::check_dim_names(session_->graph(), spec.dims, "dims");
  std::vector<py::object> keep;
  spec.given = host_feed(feed, session_->graph(), keep);
  const cli::ModelSource model = model_source(model_);
  py::gil_scoped_release nogil;
  return cli::json_text(cli::validate_json(cli::validate_model(model, spec)));
}

std::string PySession::bench(py::dict feed, int64_t calls, std::optional<double> duration_s, int64_t concurrency,
                             int64_t steady_calls, std::optional<int64_t> baseline_calls, py::dict dims,
                             py::dict shapes) {
  TERRACE_CHECK(calls > 0, InvalidArgument, "calls must be 1 or more, not ", calls);
  TERRACE_CHECK(concurrency > 0, InvalidArgument, "concurrency must be 1 or more, not ", concurrency);
  TERRACE_CHECK(steady_calls >= 0, InvalidArgument, "steady_calls must be 0 or more, not ", steady_calls);
  if (duration_s)
    TERRACE_CHECK(*duration_s > 0 && *duration_s <= 1e6, InvalidArgument, "duration must be above 0 seconds, not ",
                  *duration_s);
  if (baseline_calls)
    TERRACE_CHECK(*baseline_calls > 0, InvalidArgument, "baseline_calls must be 1 or more, not ", *baseline_calls);
  cli::BenchSpec spec;
  spec.model = model_source(model_);
  spec.options = session_->options();
  spec.options.max_tier = cli::effective_tier("bench", spec.options.max_tier, tier_given_);
  spec.calls = calls;
  spec.duration_s = duration_s.value_or(0);
  spec.concurrency = concurrency;
  spec.steady_calls = steady_calls;
  spec.baseline_calls = baseline_calls.value_or(-1);
  const auto dim_values = dims_of(dims);
  const auto shape_entries = shapes_of(shapes);
  std::vector<py::object> keep;
  const NamedTensors given = host_feed(feed, session_->graph(), keep);
  const Graph& graph = session_->graph();
  cli::check_dim_names(graph, dim_values, "dims");
  cli::parse_shapes(shape_entries, graph);
  spec.inputs = [&](const Graph& g) {
    return cli::with_files(cli::random_inputs(g, 42, dim_values, cli::parse_shapes(shape_entries, g)), given);
  };
  py::gil_scoped_release nogil;
  const cli::BenchResult r = cli::run_bench(spec);
  return cli::bench_json(spec, r);
}

py::dict PySession::warmup_state() const {
  std::vector<RegionReport> reports;
  {
    py::gil_scoped_release nogil;
    reports = session_->region_reports();
  }
  // The highest tier a region can reach here: the session's max_tier, lowered to what this
  // build and machine have.
  const Tier top = std::min(session_->options().max_tier, cli::highest_available_tier());
  py::list regions;
  bool settled = true;
  int compiling = 0;
  for (const RegionReport& r : reports) {
    // Settled: it stays where it is. Stopped (a compile failed, or a tier refused it); or compiled
    // and validated, on the top tier or held below it for a reason (climb); or top is the interpreter.
    const bool stopped = r.state.rfind("stopped", 0) == 0;
    const bool done = top == Tier::Interp || stopped ||
                      (r.state == "compiled" && r.validation != "pending" && (r.tier >= top || !r.climb.empty()));
    settled = settled && done;
    compiling += r.state == "compiling";
    py::dict d;
    d["id"] = r.id;
    d["ops"] = r.ops;
    d["tier"] = tier_name(r.tier);
    d["state"] = r.state;
    d["validation"] = r.validation;
    d["calls"] = r.calls;
    d["climb"] = r.climb;
    d["settled"] = done;
    regions.append(d);
  }
  py::dict state;
  state["settled"] = settled;
  state["compiling"] = compiling;
  state["top_tier"] = tier_name(top);
  state["calls"] = session_->last_call().index + 1;
  state["regions"] = regions;
  return state;
}

}  // namespace terrace::python
