// Unary math, activation, cast and identity kernels: rounding rules, edge values, dtype errors.
#include <cmath>
#include <limits>

#include "tests/ops_elementwise/node_runner.h"

namespace terrace::testing {
namespace {

TEST(Unary, round_goes_half_to_even) {
  Tensor x = Tensor::from_vector<float>({6}, {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 2.4f});
  EXPECT_EQ(values_of<float>(run(Op::Round, {x})), (std::vector<float>{0, 2, 2, -0, -2, 2}));
}

TEST(Unary, abs_and_neg_of_the_most_negative_integer_wrap) {
  int16_t lo = std::numeric_limits<int16_t>::min();
  Tensor x = Tensor::from_vector<int16_t>({3}, {lo, -3, 4});
  EXPECT_EQ(values_of<int16_t>(run(Op::Abs, {x})), (std::vector<int16_t>{lo, 3, 4}));
  EXPECT_EQ(values_of<int16_t>(run(Op::Neg, {x})), (std::vector<int16_t>{lo, 3, -4}));
}

TEST(Unary, sign_keeps_nan_and_handles_unsigned) {
  Tensor x = Tensor::from_vector<double>({4}, {-2, 0, 3, NAN});
  std::vector<double> s = values_of<double>(run(Op::Sign, {x}));
  EXPECT_EQ(s[0], -1);
  EXPECT_EQ(s[1], 0);
  EXPECT_EQ(s[2], 1);
  EXPECT_TRUE(std::isnan(s[3]));
  EXPECT_EQ(values_of<uint8_t>(run(Op::Sign, {Tensor::from_vector<uint8_t>({2}, {0, 9})})),
            (std::vector<uint8_t>{0, 1}));
}

TEST(Unary, float_only_ops_reject_integers_naming_the_dtype) {
  Error e = error_of([] { run(Op::Sin, {Tensor::from_vector<int32_t>({1}, {1})}); });
  EXPECT_EQ(e.code(), ErrorCode::NotImplemented);
  EXPECT_NE(e.message().find("int32"), std::string::npos);
  EXPECT_NE(e.message().find("Sin"), std::string::npos);
}

TEST(Unary, double_inputs_compute_in_double) {
  double v = 0.1234567890123;
  Tensor y = run(Op::Exp, {Tensor::from_vector<double>({1}, {v})});
  EXPECT_EQ(y.data<double>()[0], std::exp(v));
}

TEST(Unary, bfloat16_computes_in_float_and_rounds_once) {
  Tensor x = Tensor::from_vector<BFloat16>({2}, {BFloat16(0.3f), BFloat16(-2.0f)});
  Tensor y = run(Op::Tanh, {x});
  for (int i = 0; i < 2; ++i)
    EXPECT_EQ(y.data<BFloat16>()[i].bits, BFloat16(std::tanh(float(x.data<BFloat16>()[i]))).bits);
}

TEST(Unary, isinf_honours_detect_flags_and_isnan_returns_bool) {
  float inf = std::numeric_limits<float>::infinity();
  Tensor x = Tensor::from_vector<float>({4}, {-inf, inf, NAN, 1});
  EXPECT_EQ(values_of<bool>(run(Op::IsInf, {x})), (std::vector<bool>{true, true, false, false}));
  EXPECT_EQ(values_of<bool>(run(Op::IsInf, {x}, {{"detect_positive", 0}})),
            (std::vector<bool>{true, false, false, false}));
  EXPECT_EQ(values_of<bool>(run(Op::IsInf, {x}, {{"detect_negative", 0}})),
            (std::vector<bool>{false, true, false, false}));
  EXPECT_EQ(values_of<bool>(run(Op::IsNaN, {x})), (std::vector<bool>{false, false, true, false}));
}

TEST(Activation, defaults_follow_the_onnx_schema) {
  Tensor x = Tensor::from_vector<float>({2}, {-1, 2});
  std::vector<float> elu = values_of<float>(run(Op::Elu, {x}));
  EXPECT_FLOAT_EQ(elu[0], std::exp(-1.0f) - 1);
  EXPECT_EQ(elu[1], 2);
  std::vector<float> leaky = values_of<float>(run(Op::LeakyRelu, {x}));
  EXPECT_FLOAT_EQ(leaky[0], -0.01f);
  std::vector<float> hs = values_of<float>(run(Op::HardSigmoid, {x}));
  EXPECT_FLOAT_EQ(hs[0], 0.3f);
  EXPECT_FLOAT_EQ(hs[1], 0.9f);
  std::vector<float> selu = values_of<float>(run(Op::Selu, {x}, {{"alpha", 2.0f}, {"gamma", 3.0f}}));
  EXPECT_FLOAT_EQ(selu[0], 3.0f * (2.0f * std::exp(-1.0f) - 2.0f));
  EXPECT_FLOAT_EQ(selu[1], 6.0f);
}

TEST(Activation, gelu_exact_and_tanh_forms_match_their_formulas) {
  std::vector<double> xs = {-6, -1.5, -0.25, 0, 0.5, 2, 7};
  Tensor x = Tensor::from_vector<double>({7}, xs);
  std::vector<double> exact = values_of<double>(run(Op::Gelu, {x}));
  std::vector<double> tanh_form = values_of<double>(run(Op::Gelu, {x}, {{"approximate", "tanh"}}));
  // In double, against long-double forms without cancellation (1 + erf(x) and 1 + tanh(x) lose
  // every digit for x near -6, erfc and the logistic form do not).
  for (size_t i = 0; i < xs.size(); ++i) {
    long double v = xs[i];
    long double want_exact = 0.5L * v * std::erfc(-v / std::sqrt(2.0L));
    long double z = std::sqrt(2.0L / 3.14159265358979323846264338327950288L) * (v + 0.044715L * v * v * v);
    long double want_tanh = v / (1 + std::exp(-2 * z));
    EXPECT_NEAR(exact[i], double(want_exact), 1e-13 * std::fabs(double(want_exact))) << xs[i];
    EXPECT_NEAR(tanh_form[i], double(want_tanh), 1e-13 * std::fabs(double(want_tanh))) << xs[i];
  }
  EXPECT_NE(exact[2], tanh_form[2]) << "the two forms differ away from 0";
}

TEST(Activation, gelu_rejects_an_unknown_approximation_naming_the_node) {
  Tensor x = Tensor::from_vector<float>({1}, {1});
  Error e = error_of([&] { run(Op::Gelu, {x}, {{"approximate", "sigmoid"}}); });
  EXPECT_EQ(e.code(), ErrorCode::InvalidModel);
  EXPECT_NE(e.message().find("Gelu"), std::string::npos);
  EXPECT_NE(e.message().find("approximate"), std::string::npos);
}

TEST(Activation, softplus_and_sigmoid_do_not_overflow) {
  Tensor x = Tensor::from_vector<float>({3}, {-1000, 0, 1000});
  std::vector<float> sp = values_of<float>(run(Op::Softplus, {x}));
  EXPECT_EQ(sp[0], 0);
  EXPECT_FLOAT_EQ(sp[1], std::log(2.0f));
  EXPECT_EQ(sp[2], 1000);
  EXPECT_EQ(values_of<float>(run(Op::Sigmoid, {x})), (std::vector<float>{0, 0.5f, 1}));
}

TEST(Activation, shrink_takes_integers) {
  Tensor x = Tensor::from_vector<int32_t>({5}, {-3, -1, 0, 1, 3});
  EXPECT_EQ(values_of<int32_t>(run(Op::Shrink, {x}, {{"lambd", 1.5f}, {"bias", 1.0f}})),
            (std::vector<int32_t>{-2, 0, 0, 0, 2}));
}

TEST(Activation, relu_keeps_nan_and_takes_signed_integers) {
  Tensor x = Tensor::from_vector<float>({3}, {-1, NAN, 2});
  std::vector<float> r = values_of<float>(run(Op::Relu, {x}));
  EXPECT_EQ(r[0], 0);
  EXPECT_TRUE(std::isnan(r[1]));
  EXPECT_EQ(values_of<int8_t>(run(Op::Relu, {Tensor::from_vector<int8_t>({2}, {-4, 4})})),
            (std::vector<int8_t>{0, 4}));
}

TEST(Cast, float_to_integer_truncates_toward_zero) {
  Tensor x = Tensor::from_vector<float>({4}, {2.7f, -2.7f, NAN, 1e10f});
  Tensor y = run(Op::Cast, {x}, {{"to", int64_t(6)}});
  EXPECT_EQ(y.dtype(), DType::Int32);
  EXPECT_EQ(values_of<int32_t>(y),
            (std::vector<int32_t>{2, -2, 0, std::numeric_limits<int32_t>::max()}));
}

TEST(Cast, double_to_float16_rounds_once) {
  // Halfway between two float16 values plus a hair: rounding through float first would land on
  // the tie and round to even (down); the direct rounding goes up.
  double v = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  Tensor y = run(Op::Cast, {Tensor::from_vector<double>({1}, {v})}, {{"to", int64_t(10)}});
  EXPECT_EQ(float(y.data<Half>()[0]), 1.0f + std::ldexp(1.0f, -10));
}

TEST(Cast, float_to_string_is_the_shortest_round_trip_text) {
  Tensor x = Tensor::from_vector<float>({4}, {0.039187793f, 1e-5f, -2, std::numeric_limits<float>::infinity()});
  Tensor y = run(Op::Cast, {x}, {{"to", int64_t(8)}});
  EXPECT_EQ(values_of<std::string>(y), (std::vector<std::string>{"0.039187793", "1e-05", "-2", "inf"}));
}

TEST(Cast, string_to_float_reads_nan_and_signed_infinities) {
  Tensor x = Tensor::from_vector<std::string>({4}, {"0.47892547", "NaN", "+INF", "-INF"});
  std::vector<float> y = values_of<float>(run(Op::Cast, {x}, {{"to", int64_t(1)}}));
  EXPECT_EQ(y[0], 0.47892547f);
  EXPECT_TRUE(std::isnan(y[1]));
  EXPECT_EQ(y[2], std::numeric_limits<float>::infinity());
  EXPECT_EQ(y[3], -std::numeric_limits<float>::infinity());
}

TEST(Cast, unreadable_strings_and_unknown_types_are_errors) {
  Tensor x = Tensor::from_vector<std::string>({1}, {"twelve"});
  EXPECT_EQ(error_of([&] { run(Op::Cast, {x}, {{"to", int64_t(7)}}); }).code(),
            ErrorCode::InvalidArgument);
  Tensor f = Tensor::from_vector<float>({1}, {1});
  EXPECT_EQ(error_of([&] { run(Op::Cast, {f}, {{"to", int64_t(15)}}); }).code(),
            ErrorCode::NotImplemented);  // complex128, which Terrace lacks
}

TEST(Cast, castlike_takes_the_dtype_of_its_second_input) {
  Tensor x = Tensor::from_vector<int32_t>({2}, {0, 3});
  Tensor y = run(Op::CastLike, {x, Tensor::from_vector<bool>({1}, {false})});
  EXPECT_EQ(values_of<bool>(y), (std::vector<bool>{false, true}));
}

TEST(Identity, passes_sequences_and_optionals_through) {
  RValue seq = RValue::sequence({Tensor::scalar<float>(1), Tensor::scalar<float>(2)});
  RValue out = run_value(make_node(Op::Identity, 1), {seq});
  ASSERT_EQ(out.kind, ValueKind::Sequence);
  EXPECT_EQ(out.seq.size(), 2u);
  RValue empty;
  empty.kind = ValueKind::Optional;
  EXPECT_EQ(run_value(make_node(Op::Identity, 1), {empty}).kind, ValueKind::Optional);
}

}  // namespace
}  // namespace terrace::testing
