// Broadcasting binary, variadic and select kernels: shapes, dtypes, integer rules, determinism.
#include <omp.h>

#include <cmath>
#include <limits>

#include "tests/ops_elementwise/node_runner.h"

namespace terrace::testing {
namespace {

Tensor iota(Shape shape, float scale = 1.0f) {
  Tensor t = Tensor::empty(DType::Float32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = float(i) * scale;
  return t;
}

TEST(Broadcast, row_vector_adds_to_every_row) {
  Tensor y = run(Op::Add, {iota({2, 3}), Tensor::from_vector<float>({3}, {10, 20, 30})});
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_EQ(values_of<float>(y), (std::vector<float>{10, 21, 32, 13, 24, 35}));
}

TEST(Broadcast, both_operands_stretch_to_the_joint_shape) {
  Tensor col = Tensor::from_vector<float>({3, 1}, {1, 2, 3});
  Tensor row = Tensor::from_vector<float>({1, 2}, {10, 100});
  Tensor y = run(Op::Mul, {col, row});
  EXPECT_EQ(y.shape(), (Shape{3, 2}));
  EXPECT_EQ(values_of<float>(y), (std::vector<float>{10, 100, 20, 200, 30, 300}));
}

TEST(Broadcast, channel_bias_matches_a_naive_loop) {
  Tensor x = iota({2, 3, 4, 5});
  Tensor b = Tensor::from_vector<float>({3, 1, 1}, {1000, 2000, 3000});
  Tensor y = run(Op::Sub, {x, b});
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t hw = 0; hw < 20; ++hw) {
        int64_t i = (n * 3 + c) * 20 + hw;
        ASSERT_EQ(y.data<float>()[i], float(i) - float(1000 * (c + 1)));
      }
}

TEST(Broadcast, scalar_operand_on_either_side) {
  Tensor s = Tensor::scalar<float>(2);
  EXPECT_EQ(values_of<float>(run(Op::Div, {s, Tensor::from_vector<float>({2}, {1, 4})})),
            (std::vector<float>{2, 0.5f}));
  EXPECT_EQ(values_of<float>(run(Op::Div, {Tensor::from_vector<float>({2}, {1, 4}), s})),
            (std::vector<float>{0.5f, 2}));
}

TEST(Broadcast, incompatible_shapes_are_an_invalid_argument) {
  Error e = error_of([] { run(Op::Add, {iota({2, 3}), iota({2})}); });
  EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(e.message().find("node_under_test"), std::string::npos);
}

TEST(Broadcast, empty_inputs_give_empty_outputs) {
  Tensor y = run(Op::Add, {iota({0, 3}), iota({1, 3})});
  EXPECT_EQ(y.shape(), (Shape{0, 3}));
}

TEST(Determinism, results_are_bitwise_identical_for_any_thread_count) {
  Tensor x = iota({4, 64, 33, 17}, 0.37f);
  Tensor b = iota({64, 1, 17}, -1.3f);
  Tensor z = iota({1, 64, 33, 1}, 0.01f);
  int saved = omp_get_max_threads();
  std::vector<std::vector<float>> results;
  for (int threads : {1, 2, 5}) {
    omp_set_num_threads(threads);
    Tensor y = run(Op::Pow, {run(Op::Abs, {run(Op::Mul, {x, b})}), Tensor::scalar<float>(1.5f)});
    y = run(Op::Sum, {y, b, z});
    results.push_back(values_of<float>(y));
  }
  omp_set_num_threads(saved);
  EXPECT_EQ(results[0], results[1]);
  EXPECT_EQ(results[0], results[2]);
}

TEST(Dtypes, mismatched_input_dtypes_are_rejected) {
  Error e = error_of([] { run(Op::Add, {iota({2}), Tensor::from_vector<int32_t>({2}, {1, 2})}); });
  EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
}

TEST(Dtypes, unsupported_dtype_names_node_and_dtype) {
  Tensor b = Tensor::from_vector<bool>({1}, {true});
  Error e = error_of([&] { run(Op::Add, {b, b}); });
  EXPECT_EQ(e.code(), ErrorCode::NotImplemented);
  EXPECT_NE(e.message().find("node_under_test"), std::string::npos);
  EXPECT_NE(e.message().find("bool"), std::string::npos);
}

TEST(Dtypes, float16_arithmetic_rounds_once_from_float) {
  Tensor a = Tensor::from_vector<Half>({2}, {Half(1.0f), Half(0.1f)});
  Tensor b = Tensor::from_vector<Half>({2}, {Half(0.0004f), Half(0.2f)});
  Tensor y = run(Op::Add, {a, b});
  for (int i = 0; i < 2; ++i)
    EXPECT_EQ(y.data<Half>()[i].bits, Half(float(a.data<Half>()[i]) + float(b.data<Half>()[i])).bits);
}

TEST(Integers, arithmetic_wraps_around) {
  Tensor a = Tensor::from_vector<int8_t>({2}, {127, -128});
  Tensor b = Tensor::from_vector<int8_t>({2}, {1, 1});
  EXPECT_EQ(values_of<int8_t>(run(Op::Add, {a, b})), (std::vector<int8_t>{-128, -127}));
  Tensor c = Tensor::from_vector<uint16_t>({1}, {65535});
  EXPECT_EQ(values_of<uint16_t>(run(Op::Mul, {c, c})), (std::vector<uint16_t>{1}));
}

TEST(Integers, division_truncates_and_min_over_minus_one_wraps) {
  int32_t lo = std::numeric_limits<int32_t>::min();
  Tensor a = Tensor::from_vector<int32_t>({3}, {7, -7, lo});
  Tensor b = Tensor::from_vector<int32_t>({3}, {2, 2, -1});
  EXPECT_EQ(values_of<int32_t>(run(Op::Div, {a, b})), (std::vector<int32_t>{3, -3, lo}));
}

TEST(Integers, division_by_zero_is_an_error_not_a_crash) {
  Tensor a = Tensor::from_vector<int64_t>({2}, {1, 2});
  Tensor z = Tensor::from_vector<int64_t>({2}, {1, 0});
  EXPECT_EQ(error_of([&] { run(Op::Div, {a, z}); }).code(), ErrorCode::InvalidArgument);
  EXPECT_EQ(error_of([&] { run(Op::Mod, {a, z}); }).code(), ErrorCode::InvalidArgument);
}

TEST(Mod, integer_remainder_takes_the_divisor_sign_unless_fmod) {
  Tensor a = Tensor::from_vector<int32_t>({4}, {-4, 7, -7, 8});
  Tensor b = Tensor::from_vector<int32_t>({4}, {3, -3, 3, -5});
  EXPECT_EQ(values_of<int32_t>(run(Op::Mod, {a, b})), (std::vector<int32_t>{2, -2, 2, -2}));
  EXPECT_EQ(values_of<int32_t>(run(Op::Mod, {a, b}, {{"fmod", 1}})),
            (std::vector<int32_t>{-1, 1, -1, 3}));
}

TEST(Mod, float_fmod_takes_the_dividend_sign) {
  Tensor a = Tensor::from_vector<float>({2}, {-4.5f, 4.5f});
  Tensor b = Tensor::from_vector<float>({2}, {2.0f, -2.0f});
  EXPECT_EQ(values_of<float>(run(Op::Mod, {a, b}, {{"fmod", 1}})), (std::vector<float>{-0.5f, 0.5f}));
}

TEST(Pow, mixed_dtypes_keep_the_base_dtype) {
  Tensor ib = Tensor::from_vector<int32_t>({3}, {2, 3, -2});
  Tensor fe = Tensor::from_vector<float>({3}, {5, 0.5f, 3});
  Tensor y = run(Op::Pow, {ib, fe});
  EXPECT_EQ(y.dtype(), DType::Int32);
  EXPECT_EQ(values_of<int32_t>(y), (std::vector<int32_t>{32, 1, -8}));
  Tensor fb = Tensor::from_vector<float>({2}, {2, 3});
  Tensor ie = Tensor::from_vector<int64_t>({2}, {10, -1});
  EXPECT_EQ(values_of<float>(run(Op::Pow, {fb, ie})), (std::vector<float>{1024, 1.0f / 3}));
}

TEST(Pow, integer_powers_are_exact) {
  Tensor b = Tensor::from_vector<int64_t>({2}, {3, -1});
  Tensor e = Tensor::from_vector<int64_t>({2}, {39, 7});
  EXPECT_EQ(values_of<int64_t>(run(Op::Pow, {b, e})),
            (std::vector<int64_t>{4052555153018976267LL, -1}));
}

TEST(Compare, comparisons_return_bool) {
  Tensor a = Tensor::from_vector<float>({3}, {1, 2, NAN});
  Tensor b = Tensor::scalar<float>(2);
  Tensor y = run(Op::GreaterOrEqual, {a, b});
  EXPECT_EQ(y.dtype(), DType::Bool);
  EXPECT_EQ(values_of<bool>(y), (std::vector<bool>{false, true, false}));
  EXPECT_EQ(values_of<bool>(run(Op::Equal, {a, b})), (std::vector<bool>{false, true, false}));
}

TEST(Logical, xor_and_or_on_bools) {
  Tensor a = Tensor::from_vector<bool>({4}, {false, false, true, true});
  Tensor b = Tensor::from_vector<bool>({4}, {false, true, false, true});
  EXPECT_EQ(values_of<bool>(run(Op::Xor, {a, b})), (std::vector<bool>{false, true, true, false}));
  EXPECT_EQ(values_of<bool>(run(Op::And, {a, b})), (std::vector<bool>{false, false, false, true}));
  EXPECT_EQ(values_of<bool>(run(Op::Or, {a, b})), (std::vector<bool>{false, true, true, true}));
}

TEST(BitShift, shifts_past_the_width_give_zero) {
  Tensor a = Tensor::from_vector<uint8_t>({3}, {1, 255, 16});
  Tensor s = Tensor::from_vector<uint8_t>({3}, {7, 9, 2});
  EXPECT_EQ(values_of<uint8_t>(run(Op::BitShift, {a, s}, {{"direction", "LEFT"}})),
            (std::vector<uint8_t>{128, 0, 64}));
  EXPECT_EQ(values_of<uint8_t>(run(Op::BitShift, {a, s}, {{"direction", "RIGHT"}})),
            (std::vector<uint8_t>{0, 0, 4}));
  EXPECT_EQ(error_of([&] { run(Op::BitShift, {a, s}, {{"direction", "UP"}}); }).code(),
            ErrorCode::InvalidModel);
}

TEST(PRelu, slope_broadcasts_over_channels) {
  Tensor x = Tensor::from_vector<float>({2, 2}, {-1, 2, -3, 4});
  Tensor slope = Tensor::from_vector<float>({2, 1}, {0.5f, 0.25f});
  EXPECT_EQ(values_of<float>(run(Op::PRelu, {x, slope})), (std::vector<float>{-0.5f, 2, -0.75f, 4}));
}

TEST(PRelu, a_slope_larger_than_x_is_rejected) {
  Tensor x = Tensor::from_vector<float>({2}, {-1, 2});
  Tensor slope = Tensor::from_vector<float>({2, 2}, {1, 2, 3, 4});
  EXPECT_EQ(error_of([&] { run(Op::PRelu, {x, slope}); }).code(), ErrorCode::InvalidArgument);
}

TEST(Variadic, max_min_sum_mean_broadcast_all_inputs) {
  Tensor a = Tensor::from_vector<float>({2, 1}, {1, 6});
  Tensor b = Tensor::from_vector<float>({2}, {3, 4});
  Tensor c = Tensor::scalar<float>(2);
  EXPECT_EQ(values_of<float>(run(Op::Max, {a, b, c})), (std::vector<float>{3, 4, 6, 6}));
  EXPECT_EQ(values_of<float>(run(Op::Min, {a, b, c})), (std::vector<float>{1, 1, 2, 2}));
  EXPECT_EQ(values_of<float>(run(Op::Sum, {a, b, c})), (std::vector<float>{6, 7, 11, 12}));
  EXPECT_EQ(values_of<float>(run(Op::Mean, {a, b, c})), (std::vector<float>{2, 7.0f / 3, 11.0f / 3, 4}));
  EXPECT_EQ(values_of<float>(run(Op::Max, {b})), (std::vector<float>{3, 4}));
}

TEST(Variadic, max_propagates_nan_and_takes_integers) {
  Tensor a = Tensor::from_vector<float>({2}, {NAN, 1});
  Tensor b = Tensor::from_vector<float>({2}, {0, NAN});
  Tensor y = run(Op::Max, {a, b});
  EXPECT_TRUE(std::isnan(y.data<float>()[0]));
  EXPECT_TRUE(std::isnan(y.data<float>()[1]));
  Tensor i = Tensor::from_vector<uint64_t>({2}, {1, ~0ull});
  EXPECT_EQ(values_of<uint64_t>(run(Op::Min, {i, Tensor::scalar<uint64_t>(5)})),
            (std::vector<uint64_t>{1, 5}));
}

TEST(Where, selects_with_three_way_broadcasting_including_strings) {
  Tensor cond = Tensor::from_vector<bool>({2, 1}, {true, false});
  Tensor x = Tensor::from_vector<std::string>({2}, {"a", "b"});
  Tensor y = Tensor::from_vector<std::string>({1}, {"z"});
  Tensor r = run(Op::Where, {cond, x, y});
  EXPECT_EQ(r.shape(), (Shape{2, 2}));
  EXPECT_EQ(values_of<std::string>(r), (std::vector<std::string>{"a", "b", "z", "z"}));
}

TEST(Clip, bounds_come_from_optional_inputs) {
  Tensor x = Tensor::from_vector<float>({4}, {-2, 0.5f, 3, NAN});
  Tensor y = run(Op::Clip, {x, Tensor::scalar<float>(0), Tensor::scalar<float>(1)});
  EXPECT_EQ(values_of<float>(y)[0], 0);
  EXPECT_EQ(values_of<float>(y)[2], 1);
  EXPECT_TRUE(std::isnan(values_of<float>(y)[3]));
  Tensor only_max = run(Op::Clip, {x, Tensor(), Tensor::scalar<float>(0)});
  EXPECT_EQ(values_of<float>(only_max)[0], -2);
  EXPECT_EQ(values_of<float>(only_max)[1], 0);
}

TEST(Clip, min_above_max_gives_max_everywhere) {
  Tensor x = Tensor::from_vector<int8_t>({3}, {-5, 0, 5});
  Tensor y = run(Op::Clip, {x, Tensor::scalar<int8_t>(3), Tensor::scalar<int8_t>(1)});
  EXPECT_EQ(values_of<int8_t>(y), (std::vector<int8_t>{1, 1, 1}));
}

TEST(Clip, opset6_attributes_bound_the_input) {
  Tensor x = Tensor::from_vector<float>({3}, {-5, 0.25f, 5});
  Tensor y = run(Op::Clip, {x}, {{"min", -1.0f}, {"max", 1.0f}});
  EXPECT_EQ(values_of<float>(y), (std::vector<float>{-1, 0.25f, 1}));
}

}  // namespace
}  // namespace terrace::testing
