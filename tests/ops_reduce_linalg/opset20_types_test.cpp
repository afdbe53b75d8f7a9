// Types that reductions and quantized products gained after opset 17: ReduceMax/Min on bool (20),
// QLinearMatMul's float16 scales (21).
#include <gtest/gtest.h>

#include "tests/support/node_runner.h"

namespace terrace::testing {
namespace {

TEST(ReduceOnBool, max_is_any_and_min_is_all) {
  Tensor x = Tensor::from_vector<bool>({2, 2}, {true, false, false, false});
  Tensor axes = Tensor::from_vector<int64_t>({1}, {1});
  Tensor mx = run1(Op::ReduceMax, {x, axes}, {{"keepdims", 0}});
  EXPECT_EQ(mx.dtype(), DType::Bool);
  EXPECT_EQ(values_of<bool>(mx), (std::vector<bool>{true, false}));
  EXPECT_EQ(values_of<bool>(run1(Op::ReduceMin, {x, axes}, {{"keepdims", 0}})), (std::vector<bool>{false, false}));
  Error e = error_of([&] { run1(Op::ReduceSum, {x, axes}); });
  EXPECT_NE(e.message().find("bool"), std::string::npos) << "sums of bools stay refused";
}

TEST(QLinearMatMul21, float16_scales_scale_as_float32_ones_do) {
  Tensor a = Tensor::from_vector<uint8_t>({1, 2}, {2, 4});
  Tensor b = Tensor::from_vector<uint8_t>({2, 1}, {3, 5});
  Tensor zero = Tensor::from_vector<uint8_t>({}, {0});
  auto run_with = [&](DType scale_type) {
    Tensor half = Tensor::scalar(0.5f).cast(scale_type), one = Tensor::scalar(1.0f).cast(scale_type);
    return values_of<uint8_t>(run1(Op::QLinearMatMul, {a, half, zero, b, half, zero, one, zero}));
  };
  EXPECT_EQ(run_with(DType::Float16), (std::vector<uint8_t>{6}));  // (6 + 20) * 0.25 = 6.5, half to even
  EXPECT_EQ(run_with(DType::Float16), run_with(DType::Float32));
}

}  // namespace
}  // namespace terrace::testing
