// Reduce*, ArgMax/ArgMin, Softmax family, CumSum and TopK: edge cases the node tests miss.
#include <cmath>
#include <limits>

#include "tests/ops_reduce_linalg/run_node.h"

namespace terrace::testing {
namespace {

TEST(Reduce, empty_set_reductions_give_the_identity_of_each_op) {
  Tensor x = Tensor::empty(DType::Float32, {2, 0});
  auto reduce = [&](Op op) {
    return run1(op, {x}, {{"axes", ints_attr({1})}, {"keepdims", int_attr(0)}}).data<float>()[0];
  };
  EXPECT_EQ(reduce(Op::ReduceSum), 0.f);
  EXPECT_EQ(reduce(Op::ReduceProd), 1.f);
  EXPECT_EQ(reduce(Op::ReduceL2), 0.f);
  EXPECT_EQ(reduce(Op::ReduceMax), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(reduce(Op::ReduceMin), std::numeric_limits<float>::infinity());
  EXPECT_EQ(reduce(Op::ReduceLogSumExp), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(reduce(Op::ReduceMean)));
}

TEST(Reduce, axes_input_with_noop_leaves_the_tensor_unreduced) {
  Tensor x = Tensor::from_vector<float>({2, 2}, {1, 2, 3, 4});
  Tensor no_axes = Tensor::empty(DType::Int64, {0});
  EXPECT_EQ(values_of<float>(run1(Op::ReduceSum, {x, no_axes}, {{"noop_with_empty_axes", int_attr(1)}})),
            (std::vector<float>{1, 2, 3, 4}));
  Tensor all = run1(Op::ReduceSum, {x, no_axes});
  EXPECT_EQ(all.shape(), (Shape{1, 1}));
  EXPECT_EQ(all.data<float>()[0], 10.f);
}

TEST(Reduce, middle_axis_keeps_the_order_of_outer_and_inner_dims) {
  Tensor x = Tensor::from_vector<int32_t>({2, 3, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  Tensor y = run1(Op::ReduceSum, {x, Tensor::from_vector<int64_t>({1}, {-2})}, {{"keepdims", int_attr(0)}});
  EXPECT_EQ(values_of<int32_t>(y), (std::vector<int32_t>{9, 12, 27, 30}));
  Tensor m = run1(Op::ReduceMax, {x}, {{"axes", ints_attr({0, 2})}});
  EXPECT_EQ(m.shape(), (Shape{1, 3, 1}));
  EXPECT_EQ(values_of<int32_t>(m), (std::vector<int32_t>{8, 10, 12}));
}

TEST(Reduce, log_sum_exp_does_not_overflow_for_large_inputs) {
  Tensor x = Tensor::from_vector<float>({2}, {1000.f, 1000.f});
  EXPECT_FLOAT_EQ(run1(Op::ReduceLogSumExp, {x}).data<float>()[0], 1000.f + std::log(2.f));
}

TEST(Reduce, repeated_axes_are_an_error) {
  Tensor x = random_tensor({2, 2}, 1);
  EXPECT_EQ(error_of([&] { run1(Op::ReduceMean, {x}, {{"axes", ints_attr({1, -1})}}); }).code(),
            ErrorCode::InvalidModel);
}

TEST(ArgMax, nan_wins_and_select_last_index_picks_the_last_tie) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = Tensor::from_vector<float>({2, 3}, {1, nan, 1, 5, 2, 5});
  EXPECT_EQ(values_of<int64_t>(run1(Op::ArgMax, {x}, {{"axis", int_attr(1)}})), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(values_of<int64_t>(run1(Op::ArgMax, {x}, {{"axis", int_attr(1)}, {"select_last_index", int_attr(1)}})),
            (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(values_of<int64_t>(run1(Op::ArgMin, {x}, {{"axis", int_attr(0)}, {"keepdims", int_attr(0)}})),
            (std::vector<int64_t>{0, 0, 0}));
}

TEST(Softmax, lanes_sum_to_one_along_a_middle_axis) {
  Tensor x = random_tensor({2, 5, 3}, 2);
  Tensor y = run1(Op::Softmax, {x}, {{"axis", int_attr(1)}});
  for (int64_t o = 0; o < 2; ++o)
    for (int64_t i = 0; i < 3; ++i) {
      double s = 0;
      for (int64_t k = 0; k < 5; ++k) s += y.data<float>()[(o * 5 + k) * 3 + i];
      EXPECT_NEAR(s, 1.0, 1e-6);
    }
  Tensor h = run1(Op::Hardmax, {Tensor::from_vector<float>({1, 3}, {2, 7, 7})});
  EXPECT_EQ(values_of<float>(h), (std::vector<float>{0, 1, 0}));
}

TEST(CumSum, exclusive_reverse_sums_run_from_the_end) {
  Tensor x = Tensor::from_vector<float>({4}, {1, 2, 3, 4});
  Tensor axis = Tensor::scalar<int32_t>(0);
  EXPECT_EQ(values_of<float>(run1(Op::CumSum, {x, axis}, {{"exclusive", int_attr(1)}, {"reverse", int_attr(1)}})),
            (std::vector<float>{9, 7, 4, 0}));
}

TEST(TopK, ties_keep_the_lower_index_first) {
  Tensor x = Tensor::from_vector<float>({5}, {3, 1, 3, 2, 1});
  auto out = run_node(Op::TopK, {x, Tensor::from_vector<int64_t>({1}, {3})}, {}, 2);
  EXPECT_EQ(values_of<float>(out[0]), (std::vector<float>{3, 3, 2}));
  EXPECT_EQ(values_of<int64_t>(out[1]), (std::vector<int64_t>{0, 2, 3}));
  auto low = run_node(Op::TopK, {x, Tensor::from_vector<int64_t>({1}, {2})}, {{"largest", int_attr(0)}}, 2);
  EXPECT_EQ(values_of<int64_t>(low[1]), (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(error_of([&] { run_node(Op::TopK, {x, Tensor::from_vector<int64_t>({1}, {6})}, {}, 2); }).code(),
            ErrorCode::InvalidArgument);
}

}  // namespace
}  // namespace terrace::testing
