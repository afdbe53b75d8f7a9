// The interface between the interpreter and its reference kernels (interp/ops/*.cpp).
#pragma once
#include <vector>

#include "interp/graph.h"

namespace terrace {

struct Frame;

// What a kernel sees: its node, its inputs, and room for its outputs.
class KernelContext {
 public:
  KernelContext(const Node& node, std::vector<const RValue*> inputs, const Frame* frame)
      : node(node), inputs_(std::move(inputs)), outputs_(node.outputs.size()), frame_(frame) {}

  const Node& node;

  size_t num_inputs() const { return inputs_.size(); }
  size_t num_outputs() const { return outputs_.size(); }
  // True when input i is given (optional inputs may be absent or past the end).
  bool has_input(size_t i) const { return i < inputs_.size() && inputs_[i] && inputs_[i]->defined(); }
  // Input i as a tensor; an InvalidModel error naming the node if it is absent or not a tensor.
  const Tensor& input(size_t i) const;
  const RValue& input_value(size_t i) const;
  // True when output i is wanted (absent optional outputs need not be computed).
  bool wants_output(size_t i) const { return i < node.outputs.size() && node.outputs[i] >= 0; }
  void set_output(size_t i, Tensor t);
  void set_output_value(size_t i, RValue v);
  std::vector<RValue>& outputs() { return outputs_; }

  // The default-domain opset of the graph this node belongs to (17 outside any graph).
  int opset() const;

  // Runs a subgraph attribute (If/Loop/Scan bodies) with the given inputs, in the scope of this
  // node's graph so the body can read enclosing values; returns the body's outputs.
  std::vector<RValue> run_subgraph(const Graph& body, std::vector<RValue> inputs) const;

 private:
  std::vector<const RValue*> inputs_;
  std::vector<RValue> outputs_;
  const Frame* frame_;
};

using Kernel = void (*)(KernelContext&);

struct KernelTable {
  Kernel fns[size_t(Op::kCount)] = {};
  void add(Op op, Kernel k) { fns[size_t(op)] = k; }
};

// Each interp/ops/<family>.cpp registers its kernels through one of these.
void register_elementwise_kernels(KernelTable& t);
void register_reduce_kernels(KernelTable& t);
void register_linalg_kernels(KernelTable& t);
void register_nn_kernels(KernelTable& t);
void register_shape_kernels(KernelTable& t);
void register_control_kernels(KernelTable& t);
void register_misc_kernels(KernelTable& t);

// The registered table (built once).
const KernelTable& kernel_table();
bool has_kernel(Op op);

}  // namespace terrace
