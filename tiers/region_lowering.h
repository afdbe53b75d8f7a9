// Lowering of a generated-code region (everything but a library op) into kernel IR over one slot
// table, for every compiled tier: tier 1 compiles each kernel with Clang/ORC, tier 2 renders them
// all as one CUDA program, and `terrace compile` lists them. One place decides what is fused: a
// region's nodes run in order; each maximal run of elementwise nodes becomes fusion groups (split by
// iteration domain), each other node its lowered kernels (kernels/lower_op.h); a run that only feeds
// a reduction is fused into it as its prologue, and a run that only consumes a Softmax's, LogSoftmax's
// or LayerNormalization's result as its epilogue; values known at compile time (shape arithmetic:
// kernels::known_at_compile_time) are computed here and get a slot only where a kernel reads them.
#pragma once
#include <string>
#include <vector>

#include "interp/graph.h"
#include "kernels/fusion_group.h"
#include "kernels/ir.h"
#include "tiers/partition.h"

namespace terrace {

// One step of a lowered region over its slot table.
struct LoweredStep {
  enum class Kind { Kernel, Copy } kind = Kind::Kernel;
  kernels::LoweredFunc func;  // Kernel
  std::vector<int> slots;     // Kernel: the slot of each entry of func.buffers; Copy: {from, to}
  std::string node;           // the op's node, for errors ("" for fused elementwise kernels)
  // Run-time checks of a lowered op (kernels::OpKernels::error_slot): the slot of two int64 zeroed
  // before the op's first kernel (check_first) and read after its last (check_last); a nonzero
  // word [0] is InvalidArgument "<node>: <error_message> (got <word[1]>)".
  int error_slot = -1;
  bool check_first = false, check_last = false;
  std::string error_message;
};

struct LoweredRegion {
  // The region's inputs, its outputs (in Region order), then intermediates.
  std::vector<kernels::TensorSig> slots;
  // Per slot: -1 (a buffer of its own, or a region input), the slot whose buffer it views (>= 0: a
  // Reshape or Squeeze, no copy; a region output too, returned as a view like the interpreter's
  // Reshape), or -2 - i: it holds constants[i], computed at compile time.
  std::vector<int> alias;
  std::vector<Tensor> constants;
  // Region inputs whose values (not only signatures) the kernels were built for: guard them
  // (CompiledRegion::value_inputs).
  std::vector<int> value_inputs;
  std::vector<LoweredStep> steps;  // run in order

  int add_slot(kernels::TensorSig sig, int alias_of = -1);
};

// "" when `node` can be part of a lowered region, else the reason it cannot.
std::string can_lower_node(const Graph& g, const Node& node);

// True when every output of `node` is known at compile time (it is evaluated, not compiled).
bool evaluable_at_compile_time(const Graph& g, const Node& node);

// Lowers `region` (its nodes as can_lower_node accepts them) for the signatures of `inputs` (whose
// small shape-like contents may be used: value_inputs says which). Throws NotImplemented or
// InvalidArgument naming the node.
LoweredRegion lower_region(const Graph& g, const Region& region, const std::vector<Tensor>& inputs);

}  // namespace terrace
