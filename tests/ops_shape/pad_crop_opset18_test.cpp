// Pad's opset 18 axes input and CenterCropPad (opset 18).
#include <gtest/gtest.h>

#include "tests/support/node_runner.h"

namespace terrace::testing {
namespace {

TEST(Pad18, axes_say_which_dims_the_pads_speak_of) {
  Tensor x = Tensor::from_vector<float>({2, 2}, {1, 2, 3, 4});
  Tensor pads = Tensor::from_vector<int64_t>({2}, {1, 0});  // begin 1, end 0, on axis -1 only
  Tensor axes = Tensor::from_vector<int64_t>({1}, {-1});
  Tensor y = run1(Op::Pad, {x, pads, Tensor(), axes});
  EXPECT_EQ(y.shape(), Shape({2, 3}));
  EXPECT_EQ(values_of<float>(y), (std::vector<float>{0, 1, 2, 0, 3, 4}));
  Tensor twice = Tensor::from_vector<int64_t>({2}, {1, -1});
  Tensor pads4 = Tensor::from_vector<int64_t>({4}, {1, 1, 0, 0});
  Error e = error_of([&] { run1(Op::Pad, {x, pads4, Tensor(), twice}); });
  EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(e.message().find("listed twice"), std::string::npos);
}

TEST(CenterCropPad, crops_and_pads_around_the_centre_with_the_extra_element_at_the_end) {
  Tensor x = Tensor::from_vector<int32_t>({5}, {1, 2, 3, 4, 5});
  EXPECT_EQ(values_of<int32_t>(run1(Op::CenterCropPad, {x, Tensor::from_vector<int64_t>({1}, {2})})),
            (std::vector<int32_t>{2, 3}));  // drop 3: 1 before, 2 after
  EXPECT_EQ(values_of<int32_t>(run1(Op::CenterCropPad, {x, Tensor::from_vector<int64_t>({1}, {8})})),
            (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 0, 0}));  // add 3: 1 before, 2 after
  Tensor m = Tensor::from_vector<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor y = run1(Op::CenterCropPad, {m, Tensor::from_vector<int64_t>({1}, {1})}, {{"axes", std::vector<int64_t>{1}}});
  EXPECT_EQ(y.shape(), Shape({2, 1}));
  EXPECT_EQ(values_of<float>(y), (std::vector<float>{2, 5}));
}

}  // namespace
}  // namespace terrace::testing
