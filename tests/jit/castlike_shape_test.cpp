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

// A "like" operand of higher rank than the result (found by the fuzzer: UBSan, an index below the
// strides' start) lowers: it is never read.
TEST(CastLike, a_like_operand_of_higher_rank_lowers) {
  FusionGroup group;
  group.name = "castlike_rank";
  group.inputs = {{DType::Float32, {4}}, {DType::Float64, {2, 3, 4}}};
  FusedOp op;
  op.node.op = Op::CastLike;
  op.node.name = "cast_like";
  op.operands = {Operand::input(0), Operand::input(1)};
  group.ops.push_back(op);
  group.ops[0].result = infer_result(group, 0);
  group.outputs = {0};
  EXPECT_EQ(group.ops[0].result.shape, (Shape{4}));
  LoweredFunc f = lower(group);
  EXPECT_EQ(f.buffers.size(), 3u);
}

}  // namespace
}  // namespace terrace::kernels
