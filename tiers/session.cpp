// Session: input checks, dispatch to the interpreter, per-call records, reports.
#include "tiers/session.h"

#include <chrono>
#include <mutex>
#include <sstream>

#include "interp/interpreter.h"
#include "interp/onnx_import.h"
#include "tiers/input_check.h"

namespace terrace {

struct Session::Impl {
  std::shared_ptr<const Graph> graph;
  Options options;
  mutable std::mutex mu;
  std::vector<CallRecord> calls;
};

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Session::~Session() = default;

std::unique_ptr<Session> Session::from_graph(std::shared_ptr<const Graph> graph, Options options) {
  auto impl = std::make_unique<Impl>();
  impl->graph = std::move(graph);
  impl->options = options;
  return std::unique_ptr<Session>(new Session(std::move(impl)));
}

std::unique_ptr<Session> Session::load(const std::string& path, Options options) {
  return from_graph(load_onnx_file(path).graph, options);
}

std::unique_ptr<Session> Session::load_bytes(std::string_view bytes, Options options) {
  return from_graph(load_onnx_bytes(bytes).graph, options);
}

const Graph& Session::graph() const { return *impl_->graph; }
const Options& Session::options() const { return impl_->options; }

std::vector<CallRecord> Session::calls() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->calls;
}

NamedTensors Session::run(const NamedTensors& inputs) {
  const Graph& g = *impl_->graph;
  std::vector<RValue> in = bind_inputs(g, inputs);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<RValue> out = interpret(g, std::move(in));
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  NamedTensors result;
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    const std::string& name = g.values[size_t(g.outputs[i])].name;
    TERRACE_CHECK(out[i].kind == ValueKind::Tensor, NotImplemented, "output '", name,
                  "' is a sequence or optional; Session::run returns tensors only");
    result.emplace_back(name, out[i].tensor);
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->calls.push_back({int64_t(impl_->calls.size()), ms, {"interp"}});
  return result;
}

std::string Session::report_json() const { return "{}"; }
std::string Session::report() const { return ""; }

}  // namespace terrace
