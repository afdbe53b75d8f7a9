// The ONNX semantics of each elementwise op, written as kernel IR expressions.
#pragma once
#include <vector>

#include "interp/graph.h"
#include "kernels/ir.h"

namespace terrace::kernels {

// float16 and bfloat16 are storage types: values are loaded into float32 and computed there.
DType compute_type(DType storage);

// One operand of an op: its value in compute_type(dtype), undefined for an absent optional input.
struct OperandValue {
  Expr value;
  DType dtype = DType::Float32;  // the storage dtype
  bool present() const { return value.defined(); }
};

// The storage dtype of the op's result. Throws NotImplemented naming the node when the op or the
// dtypes are not supported by the lowering.
DType elementwise_result_dtype(const Node& node, const std::vector<OperandValue>& operands);

// The op's result, in compute_type(elementwise_result_dtype(...)). Matches the ONNX spec (and the
// interpreter) including NaN and Inf handling; throws NotImplemented like the function above.
Expr lower_elementwise(const Node& node, const std::vector<OperandValue>& operands);

}  // namespace terrace::kernels
