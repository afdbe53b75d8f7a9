// Lowering of a fusion group of elementwise ops to one loop-nest kernel.
#pragma once
#include <span>

#include "kernels/fusion_group.h"
#include "kernels/ir.h"

namespace terrace::kernels {

// True when lower() handles `node` (an elementwise op of interp/ops.def) with these input dtypes,
// one per entry of node.inputs (entries of absent inputs, node.inputs[i] < 0, are ignored). The
// partitioner uses it to decide what joins a fusion group. Integer Div/Mod answer false: lower()
// compiles them (a zero divisor gives 0), but the interpreter raises an error there.
bool can_lower(const Node& node, std::span<const DType> input_dtypes);

// Numpy broadcasting of `b` into `a`: true and `a` the broadcast shape, or false and `a` unchanged.
bool try_broadcast(Shape& a, const Shape& b);

// The result signature of group.ops[op]: its dtype by the op's type rule, its shape by numpy
// broadcasting of its operands. Earlier ops' `result` fields must already be set. Throws
// InvalidArgument (shapes that do not broadcast) or NotImplemented naming the node.
TensorSig infer_result(const FusionGroup& group, int op);

// Lowers `group` into one kernel that reads each input element once and writes each output
// element once. Buffers: the group inputs (slots 0..n-1), then its outputs. The iteration domain
// is the broadcast of all results; broadcast dims become stride-0 terms; dims that are contiguous
// for every buffer are collapsed so the inner loop is long and unit-stride; an output smaller than
// the domain is written only where its broadcast indices are 0. Throws NotImplemented for what
// tier 1 cannot compile, InvalidArgument for an inconsistent group (naming the op).
LoweredFunc lower(const FusionGroup& group);

}  // namespace terrace::kernels
