// Tier-1 fused kernels against the interpreter: the reference chain in several dtypes, with
// broadcasting, NaN and Inf; outputs of every size; 16-bit floats.
#include "tests/jit/chain_builder.h"

namespace terrace::testing {
namespace {

// y = a * sigmoid(a) + b; out = tanh(y) * 0.5 + y * y, with b broadcast against a.
void build_reference_chain(ChainBuilder& c, DType dtype, const Shape& sa, const Shape& sb) {
  Ref a = c.input(random_tensor(dtype, sa, -6, 6, 1));
  Ref b = c.input(random_tensor(dtype, sb, -6, 6, 2));
  Ref half = c.constant(Tensor::scalar<float>(0.5f).cast(dtype));
  Ref y = c.op(Op::Add, {c.op(Op::Mul, {a, c.op(Op::Sigmoid, {a})}), b});
  Ref out = c.op(Op::Add, {c.op(Op::Mul, {c.op(Op::Tanh, {y}), half}), c.op(Op::Mul, {y, y})});
  c.output(out);
}

void expect_outputs_match(ChainBuilder& c) {
  std::vector<Tensor> got = c.run();
  for (size_t i = 0; i < got.size(); ++i)
    expect_close(got[i], c.expected[i], c.group.name + " output " + std::to_string(i));
}

TEST(FusedChain, Float32WithBroadcastingMatchesInterpreter) {
  ChainBuilder c("chain_f32");
  build_reference_chain(c, DType::Float32, {4, 5, 33}, {5, 1});
  expect_outputs_match(c);
}

TEST(FusedChain, Float32LongContiguousRunsInParallel) {
  ChainBuilder c("chain_f32_long");
  build_reference_chain(c, DType::Float32, {3, 100000}, {3, 100000});
  expect_outputs_match(c);
  EXPECT_EQ(c.kernel.parallel_extent, 300000) << "equal shapes collapse to one loop";
}

TEST(FusedChain, Float64MatchesInterpreter) {
  ChainBuilder c("chain_f64");
  build_reference_chain(c, DType::Float64, {2, 3, 17}, {17});
  expect_outputs_match(c);
}

TEST(FusedChain, Float16AndBFloat16ComputeInFloat) {
  for (DType t : {DType::Float16, DType::BFloat16}) {
    ChainBuilder c(std::string("chain_") + dtype_name(t));
    Ref a = c.input(random_tensor(t, {64}, -3, 3, 3, false));
    Ref b = c.input(random_tensor(t, {64}, -3, 3, 4, false));
    c.output(c.op(Op::Add, {c.op(Op::Mul, {a, c.op(Op::Sigmoid, {a})}), b}));
    expect_outputs_match(c);
  }
}

// x * sigmoid(x), in either order, lowers to one silu call; the values at the ends and the NaN of
// -inf * sigmoid(-inf) = -inf * 0 are the unfused ops'. A sigmoid read elsewhere is still computed.
TEST(FusedChain, XTimesSigmoidOfXFusesToSilu) {
  for (DType t : {DType::Float32, DType::Float64}) {
    ChainBuilder c(std::string("silu_") + dtype_name(t));
    std::vector<float> xs = {0.0f, -0.0f, 1.5f, -3.0f, 20.0f, -20.0f, 87.5f, -87.5f, -88.5f, -100.0f,
                             1e-30f, INFINITY, -INFINITY, NAN};
    Tensor x = Tensor::from_vector<float>({int64_t(xs.size())}, xs).cast(t);
    Ref a = c.input(x);
    Ref b = c.input(random_tensor(t, {int64_t(xs.size())}, -6, 6, 10));
    Ref sa = c.op(Op::Sigmoid, {a});
    c.output(c.op(Op::Mul, {a, sa}));
    c.output(c.op(Op::Mul, {c.op(Op::Sigmoid, {b}), b}));
    c.output(c.op(Op::Add, {sa, b}));  // the sigmoid is read again
    c.output(c.op(Op::Mul, {a, c.op(Op::Sigmoid, {b})}));  // not x * sigmoid(x)
    expect_outputs_match(c);
    const std::string suffix = t == DType::Float32 ? "_f32(" : "_f64(";
    const std::string body = c.kernel.source.substr(c.kernel.source.find("extern \"C\""));
    size_t silu = 0;
    for (size_t at = body.find("tr_silu" + suffix); at != std::string::npos; at = body.find("tr_silu" + suffix, at + 1)) ++silu;
    EXPECT_EQ(silu, 2u) << body;
  }
}

TEST(FusedChain, Int32ArithmeticIsExact) {
  ChainBuilder c("chain_i32");
  Ref a = c.input(random_tensor(DType::Int32, {6, 7}, -1000, 1000, 5));
  Ref b = c.input(random_tensor(DType::Int32, {7}, 1, 50, 6));
  Ref y = c.op(Op::Add, {c.op(Op::Mul, {a, a}), b});
  Ref out = c.op(Op::Sub, {c.op(Op::Max, {y, c.op(Op::Neg, {b})}), c.op(Op::Div, {a, b})});
  c.output(out);
  c.output(c.op(Op::Mod, {a, b}));
  c.output(c.op(Op::Abs, {c.op(Op::Min, {a, b})}));
  expect_outputs_match(c);
}

TEST(FusedChain, ComparisonsAndLogicGiveBools) {
  ChainBuilder c("chain_bool");
  Ref a = c.input(random_tensor(DType::Float32, {5, 9}, -2, 2, 7));
  Ref b = c.input(random_tensor(DType::Float32, {9}, -2, 2, 8));
  Ref lt = c.op(Op::Less, {a, b});
  Ref ge = c.op(Op::GreaterOrEqual, {a, c.constant(Tensor::scalar<float>(0.0f))});
  Ref mask = c.op(Op::Or, {c.op(Op::And, {lt, ge}), c.op(Op::Not, {c.op(Op::IsNaN, {a})})});
  c.output(c.op(Op::Xor, {mask, lt}));
  c.output(c.op(Op::Where, {lt, a, b}));
  c.output(c.op(Op::Cast, {mask}, {{"to", int_attr(1)}}));
  expect_outputs_match(c);
}

TEST(FusedChain, IntermediateOutputOfSmallerShapeIsWrittenOnce) {
  ChainBuilder c("chain_small_output");
  Ref a = c.input(random_tensor(DType::Float32, {1, 8}, -2, 2, 9));
  Ref b = c.input(random_tensor(DType::Float32, {6, 1}, -2, 2, 10));
  Ref row = c.op(Op::Exp, {a});           // [1, 8]
  Ref grid = c.op(Op::Mul, {row, b});     // [6, 8]
  c.output(row);
  c.output(grid);
  expect_outputs_match(c);
}

TEST(FusedChain, ScalarAndEmptyTensors) {
  ChainBuilder s("chain_scalar");
  Ref x = s.input(Tensor::scalar<float>(0.25f));
  s.output(s.op(Op::Sqrt, {x}));
  expect_outputs_match(s);

  ChainBuilder e("chain_empty");
  Ref z = e.input(Tensor::empty(DType::Float32, {3, 0}));
  e.output(e.op(Op::Relu, {z}));
  expect_outputs_match(e);
}

TEST(FusedChain, CastsSaturateLikeTheInterpreter) {
  ChainBuilder c("chain_casts");
  Ref a = c.input(random_tensor(DType::Float32, {200}, -5e9, 5e9, 11));
  for (int to : {6 /*int32*/, 3 /*int8*/, 2 /*uint8*/, 7 /*int64*/, 9 /*bool*/, 10 /*f16*/, 11 /*f64*/})
    c.output(c.op(Op::Cast, {a}, {{"to", int_attr(to)}}));
  expect_outputs_match(c);
}

}  // namespace
}  // namespace terrace::testing
