// Reductions and normalisations lowered to kernels (kernels/lower_op.h declares the family's
// entry points; this adds the one that knows the graph's opset).
#pragma once
#include "kernels/lower_op.h"

namespace terrace::kernels {

// lower_reduction for a node of a graph at default-domain `opset`: Softmax and LogSoftmax below 13
// view the input as 2-D (dims from `axis` on flattened into one lane, default axis 1), as the
// interpreter does. lower_reduction(node, inputs, name) is this at opset 17; can_lower_reduction
// accepts an opset < 13 Softmax only where both readings are the same lanes.
OpKernels lower_reduction(const Node& node, const std::vector<OpInput>& inputs, const std::string& name,
                          int opset);

}  // namespace terrace::kernels
