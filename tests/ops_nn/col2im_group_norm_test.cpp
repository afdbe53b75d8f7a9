// Col2Im (opset 18) and GroupNormalization (opset 18's per-group scale; opset 21's per channel is
// checked through a model in tests/import/opset_versions_test.cpp).
#include <gtest/gtest.h>

#include <cmath>

#include "tests/support/node_runner.h"

namespace terrace::testing {
namespace {

// A 3x3 image of ones cut into 2x2 blocks at stride 1 (4 blocks), then summed back: each pixel
// counts the blocks covering it.
TEST(Col2Im, sums_overlapping_blocks_back_into_the_image) {
  Tensor cols = Tensor::from_vector<float>({1, 4, 4}, std::vector<float>(16, 1.0f));
  Tensor image = Tensor::from_vector<int64_t>({2}, {3, 3});
  Tensor block = Tensor::from_vector<int64_t>({2}, {2, 2});
  Tensor y = run1(Op::Col2Im, {cols, image, block});
  EXPECT_EQ(y.shape(), Shape({1, 1, 3, 3}));
  EXPECT_EQ(values_of<float>(y), (std::vector<float>{1, 2, 1, 2, 4, 2, 1, 2, 1}));
  Tensor wrong = Tensor::from_vector<float>({1, 4, 5}, std::vector<float>(20, 1.0f));
  Error e = error_of([&] { run1(Op::Col2Im, {wrong, image, block}); });
  EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(e.message().find("node_under_test"), std::string::npos);
}

TEST(GroupNormalization, normalises_each_group_of_channels) {
  // 4 channels of 1 element in 2 groups: {1, 3} and {10, 30}.
  Tensor x = Tensor::from_vector<float>({1, 4, 1}, {1, 3, 10, 30});
  Tensor scale = Tensor::from_vector<float>({2}, {1, 2});
  Tensor bias = Tensor::from_vector<float>({2}, {0, 5});
  std::vector<float> y = values_of<float>(run1(Op::GroupNormalization, {x, scale, bias},
                                               {{"num_groups", 2}, {"epsilon", 0.0f}}));
  EXPECT_FLOAT_EQ(y[0], -1);
  EXPECT_FLOAT_EQ(y[1], 1);
  EXPECT_FLOAT_EQ(y[2], 2 * -1 + 5);
  EXPECT_FLOAT_EQ(y[3], 2 * 1 + 5);
  Error e = error_of([&] { run1(Op::GroupNormalization, {x, scale, bias}, {{"num_groups", 3}}); });
  EXPECT_NE(e.message().find("num_groups 3"), std::string::npos);
}

}  // namespace
}  // namespace terrace::testing
