// Every elementwise op tier 1 lowers, one kernel per op, against the interpreter on random inputs
// with NaN, +-Inf and signed zeros (float32 and float64), and the can_lower answers.
#include "tests/jit/chain_builder.h"

namespace terrace::testing {
namespace {

struct OpCase {
  Op op;
  int arity;
  double lo, hi;  // input range
  std::map<std::string, Attribute> attrs = {};
};

const std::vector<OpCase>& float_cases() {
  static const std::vector<OpCase> cases = {
      {Op::Abs, 1, -5, 5}, {Op::Neg, 1, -5, 5}, {Op::Relu, 1, -5, 5}, {Op::Sigmoid, 1, -30, 30},
      {Op::Tanh, 1, -10, 10}, {Op::Erf, 1, -5, 5}, {Op::Exp, 1, -100, 100}, {Op::Log, 1, -1, 1e6},
      {Op::Sqrt, 1, -1, 100}, {Op::Reciprocal, 1, -3, 3}, {Op::Floor, 1, -9, 9},
      {Op::Ceil, 1, -9, 9}, {Op::Round, 1, -9, 9}, {Op::Sign, 1, -3, 3}, {Op::Sin, 1, -100, 100},
      {Op::Cos, 1, -100, 100}, {Op::Tan, 1, -1.5, 1.5}, {Op::Atan, 1, -20, 20},
      {Op::Asin, 1, -1, 1}, {Op::Acos, 1, -1, 1}, {Op::Sinh, 1, -89, 89}, {Op::Cosh, 1, -89, 89},
      {Op::Asinh, 1, -1e3, 1e3}, {Op::Acosh, 1, 1, 1e3}, {Op::Atanh, 1, -1, 1},
      {Op::Softplus, 1, -100, 100}, {Op::Softsign, 1, -10, 10}, {Op::Mish, 1, -10, 10},
      {Op::Gelu, 1, -8, 8}, {Op::Gelu, 1, -8, 8, {{"approximate", str_attr("tanh")}}},
      {Op::Elu, 1, -5, 5, {{"alpha", float_attr(0.7f)}}}, {Op::Selu, 1, -5, 5},
      {Op::Celu, 1, -5, 5, {{"alpha", float_attr(1.3f)}}}, {Op::HardSigmoid, 1, -6, 6},
      {Op::HardSwish, 1, -6, 6}, {Op::LeakyRelu, 1, -5, 5}, {Op::ThresholdedRelu, 1, -3, 3},
      {Op::Shrink, 1, -2, 2, {{"lambd", float_attr(0.8f)}, {"bias", float_attr(0.3f)}}},
      {Op::IsNaN, 1, -1, 1}, {Op::IsInf, 1, -1, 1}, {Op::Identity, 1, -1, 1},
      {Op::Add, 2, -9, 9}, {Op::Sub, 2, -9, 9}, {Op::Mul, 2, -9, 9}, {Op::Div, 2, -9, 9},
      {Op::Pow, 2, -4, 4}, {Op::Max, 3, -9, 9}, {Op::Min, 3, -9, 9}, {Op::Sum, 3, -9, 9},
      {Op::Mean, 3, -9, 9}, {Op::PRelu, 2, -5, 5}, {Op::Mod, 2, -9, 9, {{"fmod", int_attr(1)}}},
      {Op::Equal, 2, -2, 2}, {Op::Less, 2, -9, 9}, {Op::Greater, 2, -9, 9},
      {Op::LessOrEqual, 2, -9, 9}, {Op::GreaterOrEqual, 2, -9, 9}, {Op::Clip, 3, -9, 9},
  };
  return cases;
}

void check_op(const OpCase& oc, DType dtype, uint32_t seed) {
  std::string name = std::string(op_name(oc.op)) + "_" + dtype_name(dtype);
  ChainBuilder c(name);
  std::vector<Ref> args;
  for (int i = 0; i < oc.arity; ++i) {
    // Clip's bounds are scalars; the other operands broadcast a row against a matrix.
    Shape shape = oc.op == Op::Clip && i > 0 ? Shape{} : i == 0 ? Shape{37, 29} : Shape{29};
    args.push_back(c.input(random_tensor(dtype, shape, oc.lo, oc.hi, seed + uint32_t(i))));
  }
  c.output(c.op(oc.op, args, oc.attrs));
  std::vector<Tensor> got = c.run();
  expect_close(got[0], c.expected[0], name);
}

TEST(ElementwiseOps, Float32MatchInterpreter) {
  for (const OpCase& oc : float_cases()) check_op(oc, DType::Float32, 100);
}

TEST(ElementwiseOps, Float64MatchInterpreter) {
  for (const OpCase& oc : float_cases()) check_op(oc, DType::Float64, 200);
}

TEST(ElementwiseOps, IntegerOpsAreExact) {
  for (Op op : {Op::Add, Op::Sub, Op::Mul, Op::Div, Op::Max, Op::Min, Op::Abs, Op::Neg, Op::Sign,
                Op::Relu, Op::Equal, Op::Less, Op::BitwiseAnd, Op::BitwiseXor})
    for (DType t : {DType::Int32, DType::Int64, DType::Int8}) {
      if (op == Op::Relu && t == DType::Int8) continue;
      int arity = op == Op::Abs || op == Op::Neg || op == Op::Sign || op == Op::Relu ? 1 : 2;
      check_op({op, arity, -120, 120}, t, 300);
    }
  check_op({Op::Mod, 2, -50, 50, {{"fmod", int_attr(0)}}}, DType::Int32, 400);
}

TEST(ElementwiseOps, PowOfLargeAndSpecialValues) {
  ChainBuilder c("pow_special");
  std::vector<float> xs = {0.0f, -0.0f, 1.0f, -1.0f, 2.0f, -2.0f, INFINITY, -INFINITY, NAN, 0.5f, 10.0f};
  std::vector<float> ys = {0.0f, 1.0f, -1.0f, 2.0f, 3.0f, -3.0f, 0.5f, INFINITY, -INFINITY, NAN, 30.0f};
  Ref x = c.input(Tensor::from_vector<float>({11, 1}, xs));
  Ref y = c.input(Tensor::from_vector<float>({1, 11}, ys));
  c.output(c.op(Op::Pow, {x, y}));
  expect_close(c.run()[0], c.expected[0], "pow");
}

TEST(ElementwiseOps, CanLowerAnswersByOpAndDtype) {
  auto node = [](Op op, int inputs) {
    Node n;
    n.op = op;
    n.outputs = {0};
    n.inputs.assign(size_t(inputs), 0);
    return n;
  };
  std::vector<DType> f32 = {DType::Float32, DType::Float32}, i32 = {DType::Int32, DType::Int32};
  EXPECT_TRUE(kernels::can_lower(node(Op::Add, 2), f32));
  EXPECT_TRUE(kernels::can_lower(node(Op::Add, 2), i32));
  EXPECT_TRUE(kernels::can_lower(node(Op::Sigmoid, 1), f32));
  EXPECT_FALSE(kernels::can_lower(node(Op::Sigmoid, 1), i32)) << "float-only op";
  EXPECT_FALSE(kernels::can_lower(node(Op::MatMul, 2), f32)) << "not elementwise";
  EXPECT_FALSE(kernels::can_lower(node(Op::Add, 2), std::vector<DType>{DType::String, DType::String}));
  EXPECT_FALSE(kernels::can_lower(node(Op::Pow, 2), i32)) << "integer ** integer is not lowered";
  EXPECT_FALSE(kernels::can_lower(node(Op::Div, 2), i32)) << "the interpreter raises on x / 0";
  EXPECT_TRUE(kernels::can_lower(node(Op::Div, 2), f32));
  Node clip = node(Op::Clip, 3);
  clip.inputs[1] = -1;  // no lower bound
  EXPECT_TRUE(kernels::can_lower(clip, std::vector<DType>{DType::Float32, DType::Float32, DType::Float32}));
}

}  // namespace
}  // namespace terrace::testing
