// Lowering of one op that is not elementwise into kernels over a slot table: reductions and
// normalisations (kernels/lower_reduce.cpp) and data movement (kernels/lower_movement.cpp).
// Tier 1 (tiers/cpu/cpu_backend.cpp) places such ops in the same regions as elementwise chains: a
// region runs its fused elementwise kernels and these ops' kernels in order over one slot table.
#pragma once
#include <string>
#include <vector>

#include "interp/graph.h"
#include "kernels/fusion_group.h"
#include "kernels/ir.h"

namespace terrace::kernels {

// One input of the op: its signature, and its value where it is known at compile time (an
// initializer that is not a graph input, or a constant produced by the graph passes).
struct OpInput {
  TensorSig sig;
  const Tensor* value = nullptr;  // nullptr: known only at run time
  bool absent = false;            // an optional input the node leaves out
};

// The kernels of one op. Slot table: the node's inputs (slot i is node.inputs[i]; an absent one
// keeps its slot, unused), then its outputs (slot n + j is node.outputs[j]), then `scratch`.
struct OpKernels {
  std::vector<TensorSig> outputs;  // one per node output, as the interpreter would shape them
  std::vector<TensorSig> scratch;  // buffers the calls share (accumulators, an error word)
  struct Call {
    LoweredFunc func;
    std::vector<int> slots;  // the slot of each entry of func.buffers
  };
  std::vector<Call> calls;  // run in this order
  // Output j is input alias_of[j] itself, reinterpreted (Reshape, Flatten, Squeeze, Unsqueeze,
  // Identity: no kernel, no copy), or -1. Empty: no aliases.
  std::vector<int> alias_of;
  // Run-time checks (an index out of range): a scratch slot of two int64 that the runtime zeroes
  // before the calls; a kernel that finds a bad value stores 1 into [0] and the value into [1], and
  // the runtime then throws InvalidArgument "<node>: <error_message> (got <value>)". -1: none.
  int error_slot = -1;
  std::string error_message;
};

// True when value v's contents are known when a region is compiled for its input signature: an
// initializer (not a graph input), the output of Shape or Size, or the result of a small integer
// op (shape arithmetic: Gather, Concat, Unsqueeze, Div, ...; masks: ConstantOfShape, Trilu, Where)
// on such values. Tier 1 evaluates these at compile time (a region input among them is guarded
// by value), so a Reshape whose target shape is computed from Shape is compiled like one whose
// shape is an initializer. Lowerings ask this for inputs they need as constants.
bool known_at_compile_time(const Graph& g, int v);

// "" unless `node` reads or writes a value of a narrow type (float8, int4/uint4, float4e2m1:
// interp/float8.h), which no kernel of tiers 1 and 2 takes: then the reason, naming the value.
std::string narrow_dtype_reason(const Graph& g, const Node& node);

// "" when lower_op handles `node` (with the dtypes and ranks the graph knows), else the reason
// tier 1 cannot compile it. The partitioner asks this for every op that is not elementwise.
std::string can_lower_op(const Graph& g, const Node& node);

// Lowers `node` for these input signatures; kernel names start with `name` (a C identifier).
// Throws NotImplemented (naming the node and what is not supported) or InvalidArgument (inputs
// the op rejects, as the interpreter would).
OpKernels lower_op(const Node& node, const std::vector<OpInput>& inputs, const std::string& name);

// The two families, each in its own file; lower_op dispatches to the one that claims the op.
std::string can_lower_reduction(const Graph& g, const Node& node);  // "" or the reason
OpKernels lower_reduction(const Node& node, const std::vector<OpInput>& inputs, const std::string& name);
std::string can_lower_movement(const Graph& g, const Node& node);
OpKernels lower_movement(const Node& node, const std::vector<OpInput>& inputs, const std::string& name);
// True when the family handles this op type at all (so that can_lower_op reports its reason).
bool is_reduction_op(Op op);
bool is_movement_op(Op op);

}  // namespace terrace::kernels
