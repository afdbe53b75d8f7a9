// GELU fusion (tiers/passes/gelu_fusion.cpp) on hand-built decomposed GELUs: the exporters' forms
// become one Gelu with the interpreter's answer (within the dtype's tolerance), near misses stay.
#include <cmath>

#include "tests/passes/helpers.h"
#include "tiers/passes/passes.h"

namespace terrace {
namespace {

using testing::GraphBuilder;
using testing::count_ops;
using testing::expect_fused_into;
using testing::expect_not_fused_into;
using testing::optimized;
using testing::random_tensor;

enum class Tail { XThenHalf, XThenDivTwo, HalfXFirst, HalfThenX };

struct GeluForm {
  bool tanh = false;
  bool mul_by_inverse = false;  // x * (1/sqrt 2) instead of x / sqrt 2
  bool cube_by_pow = false;     // Pow(x, 3) instead of x * (x * x)
  bool one_first = false;       // Add(1, erf)
  Tail tail = Tail::XThenHalf;
  float sqrt2 = float(M_SQRT2);
  float cubic = 0.044715f;
  float one = 1.0f;
  bool erf_is_output = false;   // the Erf's (Tanh's) result also a graph output
  bool other_factor = false;    // the product takes another value than x
};

std::shared_ptr<Graph> build_gelu(const GeluForm& f) {
  GraphBuilder b;
  int in = b.input("in", DType::Float32, {4, 16});
  int x = b.node(Op::Relu, {in});  // x is an intermediate, as after a MatMul in a model
  int y = b.input("y", DType::Float32, {4, 16});
  auto c = [&](const char* name, float v) { return b.constant(name, Tensor::scalar<float>(v)); };
  int e;
  if (!f.tanh) {
    int u = f.mul_by_inverse ? b.node(Op::Mul, {x, c("inv_sqrt2", float(1 / M_SQRT2))})
                             : b.node(Op::Div, {x, c("sqrt2", f.sqrt2)});
    e = b.node(Op::Erf, {u});
  } else {
    int cube = f.cube_by_pow ? b.node(Op::Pow, {x, c("three", 3.0f)}) : b.node(Op::Mul, {x, b.node(Op::Mul, {x, x})});
    int inner = b.node(Op::Add, {x, b.node(Op::Mul, {c("cubic", f.cubic), cube})});
    e = b.node(Op::Tanh, {b.node(Op::Mul, {c("k", float(std::sqrt(2 / M_PI))), inner})});
  }
  int p = f.one_first ? b.node(Op::Add, {c("one", f.one), e}) : b.node(Op::Add, {e, c("one", f.one)});
  const int factor = f.other_factor ? y : x;
  int out = -1;
  switch (f.tail) {
    case Tail::XThenHalf: out = b.node(Op::Mul, {b.node(Op::Mul, {factor, p}), c("half", 0.5f)}); break;
    case Tail::XThenDivTwo: out = b.node(Op::Div, {b.node(Op::Mul, {p, factor}), c("two", 2.0f)}); break;
    case Tail::HalfXFirst: out = b.node(Op::Mul, {b.node(Op::Mul, {c("half", 0.5f), factor}), p}); break;
    case Tail::HalfThenX: out = b.node(Op::Mul, {factor, b.node(Op::Mul, {p, c("half", 0.5f)})}); break;
  }
  b.output(out);
  if (f.erf_is_output) b.output(e);
  return b.build();
}

std::vector<RValue> gelu_inputs() { return {RValue(random_tensor({4, 16}, 3, -4, 4)), RValue(random_tensor({4, 16}, 4))}; }

void expect_fused(const GeluForm& f) {
  auto opt = expect_fused_into(build_gelu(f), Op::Gelu, 2, gelu_inputs());  // the Relu and the Gelu
  for (const Node& n : opt->nodes) {
    if (n.op == Op::Gelu) {
      EXPECT_EQ(n.attr_string("approximate", "none"), f.tanh ? "tanh" : "none");
    }
  }
}

void expect_not_fused(const GeluForm& f) { expect_not_fused_into(build_gelu(f), Op::Gelu, gelu_inputs()); }

TEST(GeluFusion, torchs_erf_gelu_becomes_one_gelu_with_the_interpreters_answer) {
  expect_fused({});
  EXPECT_EQ(count_ops(*optimized(build_gelu({}), OptimizeLevel::Basic), Op::Gelu), 0);
}

TEST(GeluFusion, every_ordering_of_the_scaling_fuses) {
  for (Tail t : {Tail::XThenHalf, Tail::XThenDivTwo, Tail::HalfXFirst, Tail::HalfThenX}) {
    GeluForm f;
    f.tail = t;
    f.one_first = t == Tail::HalfXFirst;
    f.mul_by_inverse = t == Tail::HalfThenX;
    SCOPED_TRACE(int(t));
    expect_fused(f);
  }
}

TEST(GeluFusion, the_tanh_approximation_fuses_with_approximate_tanh) {
  GeluForm f;
  f.tanh = true;
  expect_fused(f);
  f.cube_by_pow = true;
  f.tail = Tail::HalfXFirst;
  expect_fused(f);
}

TEST(GeluFusion, a_value_of_the_pattern_read_elsewhere_keeps_it_decomposed) {
  GeluForm f;
  f.erf_is_output = true;
  expect_not_fused(f);
  f.tanh = true;
  expect_not_fused(f);
}

TEST(GeluFusion, wrong_constants_or_another_factor_keep_it_decomposed) {
  GeluForm f;
  f.sqrt2 = 1.5f;
  expect_not_fused(f);
  f = {};
  f.one = 2.0f;
  expect_not_fused(f);
  f = {};
  f.tanh = true;
  f.cubic = 0.05f;
  expect_not_fused(f);
  f = {};
  f.other_factor = true;  // y * (1 + erf(x / sqrt 2)) / 2 is no GELU
  expect_not_fused(f);
}

}  // namespace
}  // namespace terrace
