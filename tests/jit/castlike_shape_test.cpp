// CastLike's second input gives only the target dtype: its shape takes no part in the fused
// kernel's iteration domain (an empty "like" tensor once made the result empty).
#include <gtest/gtest.h>

#include "kernels/lower.h"

namespace terrace::kernels {
namespace {

TEST(CastLike, the_like_operand_gives_the_dtype_and_not_the_shape) {
  FusionGroup group;
  group.name = "castlike";
  group.inputs = {{DType::Float32, {2, 1, 4}}, {DType::Float64, {2, 0, 4}}};
  FusedOp op;
  op.node.op = Op::CastLike;
  op.node.name = "cast_like";
  op.operands = {Operand::input(0), Operand::input(1)};
  group.ops.push_back(op);
  TensorSig result = infer_result(group, 0);
  EXPECT_EQ(result.dtype, DType::Float64);
  EXPECT_EQ(result.shape, (Shape{2, 1, 4}));
}

}  // namespace
}  // namespace terrace::kernels
