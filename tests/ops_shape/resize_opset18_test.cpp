// Resize's opset 18 and 19 attributes: axes, keep_aspect_ratio_policy, half_pixel_symmetric.
#include <gtest/gtest.h>

#include "tests/support/node_runner.h"

namespace terrace::testing {
namespace {

Tensor none() { return Tensor(); }

TEST(Resize18, scales_for_listed_axes_leave_the_others_alone) {
  Tensor x = Tensor::from_vector<float>({1, 2}, {1, 2});
  Tensor scales = Tensor::from_vector<float>({1}, {2});
  Tensor y = run1(Op::Resize, {x, none(), scales}, {{"axes", std::vector<int64_t>{1}}, {"mode", "nearest"},
                                                    {"coordinate_transformation_mode", "asymmetric"},
                                                    {"nearest_mode", "floor"}});
  EXPECT_EQ(y.shape(), Shape({1, 4}));
  EXPECT_EQ(values_of<float>(y), (std::vector<float>{1, 1, 2, 2}));
}

// Found by the fuzzer (tests/fuzz/regressions/ubsan-resize-scalar-input-divides-by-rank.onnx):
// a rank-0 input divided by its rank.
TEST(Resize18, a_scalar_input_is_invalid_argument_naming_the_node) {
  Tensor x = Tensor::scalar<float>(1.0f);
  Error e = error_of([&] { run1(Op::Resize, {x, none(), Tensor::from_vector<float>({0}, {})}, {}); });
  EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(e.message().find("scalar"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("Resize"), std::string::npos) << e.message();
}

TEST(Resize18, keep_aspect_ratio_takes_the_smallest_or_largest_scale) {
  Tensor x = Tensor::zeros(DType::Float32, {2, 4});
  Tensor sizes = Tensor::from_vector<int64_t>({2}, {4, 4});
  Tensor small = run1(Op::Resize, {x, none(), none(), sizes}, {{"keep_aspect_ratio_policy", "not_larger"}});
  EXPECT_EQ(small.shape(), Shape({2, 4})) << "scale min(4/2, 4/4) = 1";
  Tensor large = run1(Op::Resize, {x, none(), none(), sizes}, {{"keep_aspect_ratio_policy", "not_smaller"}});
  EXPECT_EQ(large.shape(), Shape({4, 8})) << "scale max(2, 1) = 2";
  Error e = error_of([&] { run1(Op::Resize, {x, none(), none(), sizes}, {{"keep_aspect_ratio_policy", "fit"}}); });
  EXPECT_EQ(e.code(), ErrorCode::InvalidModel);
  EXPECT_NE(e.message().find("keep_aspect_ratio_policy"), std::string::npos);
}

TEST(Resize18, scales_of_the_wrong_length_for_the_axes_are_an_error) {
  Tensor x = Tensor::zeros(DType::Float32, {1, 2});
  Tensor scales = Tensor::from_vector<float>({2}, {1, 2});
  Error e = error_of([&] { run1(Op::Resize, {x, none(), scales}, {{"axes", std::vector<int64_t>{1}}}); });
  EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(e.message().find("node_under_test"), std::string::npos);
}

// Linear, 5 -> floor(2.5) = 2: half_pixel maps output x to (x + 0.5) / 0.5 - 0.5 = 2x + 0.5; the
// symmetric form adds in_len / 2 * (1 - out_size / (scale * in_len)) = 2.5 * (1 - 2 / 2.5) = 0.5.
TEST(Resize19, half_pixel_symmetric_recentres_when_the_size_rounds) {
  Tensor x = Tensor::from_vector<float>({5}, {0, 1, 2, 3, 4});
  Tensor scales = Tensor::from_vector<float>({1}, {0.5f});
  std::vector<float> sym = values_of<float>(run1(Op::Resize, {x, none(), scales},
      {{"mode", "linear"}, {"coordinate_transformation_mode", "half_pixel_symmetric"}}));
  std::vector<float> plain = values_of<float>(run1(Op::Resize, {x, none(), scales},
      {{"mode", "linear"}, {"coordinate_transformation_mode", "half_pixel"}}));
  ASSERT_EQ(sym.size(), 2u);
  EXPECT_FLOAT_EQ(plain[0], 0.5f);
  EXPECT_FLOAT_EQ(sym[0], 1.0f);
  EXPECT_FLOAT_EQ(sym[1] - sym[0], plain[1] - plain[0]);
}

}  // namespace
}  // namespace terrace::testing
