// The reference interpreter: dispatch through the kernel table, value lifetimes, error context.
#include "interp/interpreter.h"

#include "interp/cancel.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "interp/kernel.h"

namespace terrace {

const KernelTable& kernel_table() {
  static const KernelTable table = [] {
    KernelTable t;
    register_elementwise_kernels(t);
    register_reduce_kernels(t);
    register_linalg_kernels(t);
    register_nn_kernels(t);
    register_shape_kernels(t);
    register_control_kernels(t);
    register_misc_kernels(t);
    return t;
  }();
  return table;
}

bool has_kernel(Op op) { return kernel_table().fns[size_t(op)] != nullptr; }

const RValue& KernelContext::input_value(size_t i) const {
  TERRACE_CHECK(has_input(i), InvalidModel, node.describe(), ": input ", i, " is required");
  return *inputs_[i];
}

const Tensor& KernelContext::input(size_t i) const {
  const RValue& v = input_value(i);
  TERRACE_CHECK(v.kind == ValueKind::Tensor, InvalidModel, node.describe(), ": input ", i,
                " must be a tensor");
  return v.tensor;
}

void KernelContext::set_output(size_t i, Tensor t) { set_output_value(i, RValue(std::move(t))); }

void KernelContext::set_output_value(size_t i, RValue v) {
  TERRACE_ASSERT(i < outputs_.size(), node.describe(), " has no output ", i);
  outputs_[i] = std::move(v);
}

const RValue* Frame::lookup(const std::string& name) const {
  for (const Frame* f = this; f; f = f->parent) {
    int id = f->graph->find_value(name);
    if (id >= 0 && f->env[size_t(id)].defined()) return &f->env[size_t(id)];
  }
  return nullptr;
}

int KernelContext::opset() const { return frame_ && frame_->graph ? frame_->graph->opset : 17; }

std::vector<RValue> KernelContext::run_subgraph(const Graph& body, std::vector<RValue> in) const {
  if (frame_ && frame_->bodies)
    if (std::optional<std::vector<RValue>> out = frame_->bodies->run(body, in, *frame_)) return std::move(*out);
  return interpret(body, std::move(in), frame_);
}

std::vector<RValue> interpret_node(const Node& node, const std::vector<const RValue*>& inputs,
                                   const Frame* frame) {
  Kernel k = kernel_table().fns[size_t(node.op)];
  TERRACE_CHECK(k, NotImplemented, "op ", op_name(node.op),
                " has no interpreter kernel (node '", node.name, "')");
  KernelContext ctx(node, inputs, frame);
  try {
    k(ctx);
  } catch (const Error& e) {
    if (e.message().find(node.describe()) != std::string::npos) throw;
    throw Error(e.code(), node.describe() + ": " + e.message());
  } catch (const std::bad_alloc&) {
    fail(ErrorCode::OutOfMemory, node.describe(), ": out of memory");
  } catch (const std::length_error& e) {  // a std::vector asked for more than it can hold
    fail(ErrorCode::OutOfMemory, node.describe(), ": a buffer too large to allocate (", e.what(), ")");
  }
  for (size_t i = 0; i < node.outputs.size(); ++i)
    if (node.outputs[i] >= 0)
      TERRACE_ASSERT(ctx.outputs()[i].defined(), node.describe(), " did not set output ", i);
  return std::move(ctx.outputs());
}

Frame make_frame(const Graph& g, std::vector<RValue> inputs, const Frame* parent) {
  TERRACE_CHECK(inputs.size() == g.inputs.size(), InvalidArgument, "graph '", g.name,
                "' takes ", g.inputs.size(), " inputs, got ", inputs.size());
  Frame frame;
  frame.graph = &g;
  frame.parent = parent;
  frame.bodies = parent ? parent->bodies : nullptr;
  frame.env.resize(g.values.size());
  for (auto& [id, t] : g.initializers) frame.env[size_t(id)] = RValue(t);
  for (size_t i = 0; i < inputs.size(); ++i) frame.env[size_t(g.inputs[i])] = std::move(inputs[i]);
  for (int id : g.captures) {
    const RValue* v = parent ? parent->lookup(g.values[size_t(id)].name) : nullptr;
    TERRACE_CHECK(v, InvalidModel, "graph '", g.name, "' reads '", g.values[size_t(id)].name,
                  "', which no enclosing graph defines");
    frame.env[size_t(id)] = *v;
  }
  return frame;
}

std::vector<int> last_use_positions(const Graph& g, const std::vector<int>& position) {
  std::vector<int> last_use(g.values.size(), -1);
  auto use = [&](int v, int pos) {
    if (v >= 0) last_use[size_t(v)] = std::max(last_use[size_t(v)], pos);
  };
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    for (int v : g.nodes[n].inputs) use(v, position[n]);
    for (int v : g.captured_by(g.nodes[n])) use(v, position[n]);
  }
  for (int v : g.outputs) use(v, std::numeric_limits<int>::max());
  return last_use;
}

void run_node(Frame& frame, int n, const NodeObserver& observe) {
  const Node& node = frame.graph->nodes[size_t(n)];
  std::vector<const RValue*> in;
  in.reserve(node.inputs.size());
  for (int v : node.inputs) in.push_back(v >= 0 ? &frame.env[size_t(v)] : nullptr);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<RValue> out = interpret_node(node, in, &frame);
  if (observe)
    observe(n, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  for (size_t i = 0; i < node.outputs.size(); ++i)
    if (node.outputs[i] >= 0) frame.env[size_t(node.outputs[i])] = std::move(out[i]);
}

void release_dead_inputs(Frame& frame, int n, int pos, const std::vector<int>& last_use) {
  const Graph& g = *frame.graph;
  for (int v : g.nodes[size_t(n)].inputs)
    if (v >= 0 && last_use[size_t(v)] == pos && !g.initializers.count(v)) frame.env[size_t(v)] = RValue();
}

std::vector<RValue> frame_outputs(const Frame& frame) {
  const Graph& g = *frame.graph;
  std::vector<RValue> result;
  result.reserve(g.outputs.size());
  for (int v : g.outputs) {
    const RValue* r = &frame.env[size_t(v)];
    // A graph output may be a captured outer value or an input passed straight through.
    if (!r->defined()) r = frame.lookup(g.values[size_t(v)].name);
    TERRACE_CHECK(r, InvalidModel, "graph '", g.name, "' output '", g.values[size_t(v)].name,
                  "' is never computed");
    result.push_back(*r);
  }
  return result;
}

std::vector<RValue> interpret(const Graph& g, std::vector<RValue> inputs, const Frame* parent,
                              const NodeObserver& observe) {
  Frame frame = make_frame(g, std::move(inputs), parent);
  std::vector<int> position(g.nodes.size());
  for (size_t n = 0; n < position.size(); ++n) position[n] = int(n);
  // Free each intermediate after its last use, so peak memory follows the live set.
  std::vector<int> last_use = last_use_positions(g, position);
  for (int n = 0; n < int(g.nodes.size()); ++n) {
    check_cancelled();
    run_node(frame, n, observe);
    release_dead_inputs(frame, n, n, last_use);
  }
  return frame_outputs(frame);
}

}  // namespace terrace
