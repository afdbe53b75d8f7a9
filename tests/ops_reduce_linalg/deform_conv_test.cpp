// DeformConv (opset 19): zero offsets give the plain convolution; offsets move each tap's read,
// bilinearly, zero outside the image; the mask scales each tap.
#include <gtest/gtest.h>

#include "tests/support/node_runner.h"

namespace terrace::testing {
namespace {

TEST(DeformConv, offsets_move_the_taps_bilinearly) {
  // X 1x1x2x3, W 1x1x1x2 ([1, 10]): one output row of 2 at stride 1.
  Tensor x = Tensor::from_vector<float>({1, 1, 2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor w = Tensor::from_vector<float>({1, 1, 1, 2}, {1, 10});
  Tensor zero = Tensor::zeros(DType::Float32, {1, 4, 2, 2});
  EXPECT_EQ(values_of<float>(run1(Op::DeformConv, {x, w, zero})), (std::vector<float>{21, 32, 54, 65}))
      << "plain convolution: x[i][j] + 10 x[i][j+1]";
  // Every tap moved half a row down (dy = 0.5): rows average; row 1 reads half zeros past the end.
  std::vector<float> half(16, 0.0f);
  for (int tap = 0; tap < 2; ++tap)
    for (int p = 0; p < 4; ++p) half[size_t(tap * 8 + p)] = 0.5f;  // channel 2*tap is dy
  Tensor down = Tensor::from_vector<float>({1, 4, 2, 2}, half);
  EXPECT_EQ(values_of<float>(run1(Op::DeformConv, {x, w, down})), (std::vector<float>{37.5f, 48.5f, 27, 32.5f}));
  Tensor mask = Tensor::from_vector<float>({1, 2, 2, 2}, {1, 1, 1, 1, 0, 0, 0, 0});  // drop tap 1
  EXPECT_EQ(values_of<float>(run1(Op::DeformConv, {x, w, zero, Tensor(), mask})), (std::vector<float>{1, 2, 4, 5}));
}

TEST(DeformConv, a_wrong_offset_shape_names_the_node) {
  Tensor x = Tensor::zeros(DType::Float32, {1, 1, 2, 3});
  Tensor w = Tensor::zeros(DType::Float32, {1, 1, 1, 2});
  Error e = error_of([&] { run1(Op::DeformConv, {x, w, Tensor::zeros(DType::Float32, {1, 3, 2, 2})}); });
  EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(e.message().find("node_under_test"), std::string::npos);
}

}  // namespace
}  // namespace terrace::testing
