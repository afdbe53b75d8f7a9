// Reductions and normalisations lowered to kernels (kernels/lower_op.h declares the family's
// entry points; this adds the one that knows the graph's opset).
#pragma once
#include <optional>

#include "kernels/lower_op.h"

namespace terrace::kernels {

// lower_reduction for a node of a graph at default-domain `opset`: Softmax and LogSoftmax below 13
// view the input as 2-D (dims from `axis` on flattened into one lane, default axis 1), as the
// interpreter does (tiers/region_lowering passes the graph's opset, and the input's rank is known
// when a version compiles). lower_reduction(node, inputs, name) is this at opset 17.
OpKernels lower_reduction(const Node& node, const std::vector<OpInput>& inputs, const std::string& name,
                          int opset);

// Elementwise ops fused into a reduction's kernels (scale-then-softmax, layernorm-then-residual-
// add), so that their results never pass through memory.
//   prologue: computes the op's input 0 (its one output), evaluated wherever the kernels read
//     input 0, whose own slot is then not read; its inputs broadcast into input 0's shape.
//   epilogue: reads the op's output 0 as its group input `epilogue_operand` and gives what the
//     kernels store into output 0 instead (one output, of output 0's dtype and shape); its other
//     inputs broadcast into that shape. Softmax, LogSoftmax and LayerNormalization only.
// The op's slot table: the node's inputs, its outputs, the prologue's inputs, then the epilogue's
// inputs other than epilogue_operand, in order.
struct ReductionFusion {
  std::optional<FusionGroup> prologue;
  std::optional<FusionGroup> epilogue;
  int epilogue_operand = 0;
};
OpKernels lower_reduction(const Node& node, const std::vector<OpInput>& inputs, const std::string& name,
                          int opset, const ReductionFusion& fusion);

}  // namespace terrace::kernels
