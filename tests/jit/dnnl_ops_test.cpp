// Tier 1's oneDNN MatMul, Gemm and Conv against the interpreter: batching and broadcasting, 1-D
// operands, transposes, alpha/beta and C broadcasting, pads, auto_pad, strides, dilations, groups,
// bias, 1-3 spatial dimensions, weights known at compile time or not; and the errors.
#include "jit/dnnl_ops.h"

#ifdef TERRACE_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif
#include <cmath>
#include <cstdlib>
#include <iostream>

#include "tests/jit/chain_builder.h"
#include "tests/support/node_runner.h"

namespace terrace::testing {
namespace {

#ifdef TERRACE_HAVE_DNNL

// Runs the node on tier 1's primitive and on the interpreter; `constant_weights`: input 1 is
// handed over at compile time, as an initializer is.
void expect_matches(Op op, const std::vector<Shape>& shapes, std::map<std::string, Attr> attrs = {},
                    bool constant_weights = false, uint32_t seed = 1) {
  std::vector<Tensor> in;
  std::vector<const Tensor*> constants(shapes.size(), nullptr);
  for (size_t i = 0; i < shapes.size(); ++i)
    in.push_back(random_tensor(DType::Float32, shapes[i], -1, 1, seed + uint32_t(i), false));
  if (constant_weights) constants[1] = &in[1];
  Node node = make_node(op, shapes.size(), attrs);
  auto prim = jit::make_dnnl_primitive(node, shapes, constants);
  Tensor want = run1(op, in, attrs);
  ASSERT_EQ(prim->output_shape(), want.shape());
  Tensor got = Tensor::empty(DType::Float32, prim->output_shape());
  std::vector<const float*> ptrs;
  for (const Tensor& t : in) ptrs.push_back(t.data<float>());
  prim->run(ptrs, got.data<float>());
  std::string what = std::string(op_name(op)) + " " + shape_str(shapes[0]) + " x " + shape_str(shapes[1]);
  expect_close(got, want, what);
}

// One op with its input shapes and attributes.
struct Case {
  Op op;
  std::vector<Shape> shapes;
  std::map<std::string, Attr> attrs;
};

// The case's primitive (with `activation`, input 1 handed over at compile time when
// `constant_weights`) run on `in`.
Tensor run_primitive(const Case& c, const std::vector<Tensor>& in, jit::DnnlActivation activation,
                     bool constant_weights = false) {
  std::vector<const Tensor*> constants(c.shapes.size(), nullptr);
  if (constant_weights) constants[1] = &in[1];
  auto prim = jit::make_dnnl_primitive(make_node(c.op, c.shapes.size(), c.attrs), c.shapes, constants, activation);
  Tensor got = Tensor::empty(DType::Float32, prim->output_shape());
  std::vector<const float*> ptrs;
  for (const Tensor& t : in) ptrs.push_back(t.data<float>());
  prim->run(ptrs, got.data<float>());
  return got;
}

std::vector<Tensor> random_inputs(const Case& c, uint32_t seed) {
  std::vector<Tensor> in;
  for (size_t i = 0; i < c.shapes.size(); ++i)
    in.push_back(random_tensor(DType::Float32, c.shapes[i], -1, 1, seed + uint32_t(i), false));
  return in;
}

TEST(DnnlOps, MatMulShapes) {
  expect_matches(Op::MatMul, {{5, 7}, {7, 3}});
  expect_matches(Op::MatMul, {{2, 3, 4, 5}, {5, 6}});
  expect_matches(Op::MatMul, {{2, 1, 4, 5}, {3, 5, 6}});
  expect_matches(Op::MatMul, {{5}, {5, 3}});
  expect_matches(Op::MatMul, {{2, 4, 5}, {5}});
  expect_matches(Op::MatMul, {{5}, {5}});
  expect_matches(Op::MatMul, {{1, 128, 768}, {768, 3072}});
}

TEST(DnnlOps, GemmTransposesScalesAndC) {
  for (int ta : {0, 1})
    for (int tb : {0, 1}) {
      Shape a = ta ? Shape{7, 5} : Shape{5, 7}, b = tb ? Shape{3, 7} : Shape{7, 3};
      expect_matches(Op::Gemm, {a, b, {3}}, {{"transA", ta}, {"transB", tb}, {"alpha", 0.5f}, {"beta", 2.0f}});
    }
  expect_matches(Op::Gemm, {{5, 7}, {7, 3}});
  expect_matches(Op::Gemm, {{5, 7}, {7, 3}, {5, 3}});
  expect_matches(Op::Gemm, {{5, 7}, {7, 3}, {5, 1}});
  expect_matches(Op::Gemm, {{5, 7}, {7, 3}, {}});
  expect_matches(Op::Gemm, {{5, 7}, {7, 3}, {5, 3}}, {{"beta", 0.0f}});
  expect_matches(Op::Gemm, {{1, 512}, {1000, 512}, {1000}}, {{"transB", 1}}, true);
}

TEST(DnnlOps, ConvGeometries) {
  for (bool constant : {false, true}) {
    expect_matches(Op::Conv, {{1, 3, 9, 9}, {4, 3, 3, 3}}, {}, constant);
    expect_matches(Op::Conv, {{2, 4, 10, 11}, {6, 4, 3, 3}, {6}},
                   {{"pads", std::vector<int64_t>{1, 1, 1, 1}}, {"strides", std::vector<int64_t>{2, 2}}}, constant);
    expect_matches(Op::Conv, {{1, 8, 7, 7}, {8, 1, 3, 3}, {8}},
                   {{"group", 8}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}}, constant);  // depthwise
    expect_matches(Op::Conv, {{1, 6, 8, 8}, {4, 3, 3, 3}}, {{"group", 2}, {"dilations", std::vector<int64_t>{2, 2}}}, constant);
    expect_matches(Op::Conv, {{1, 3, 8, 7}, {2, 3, 3, 2}}, {{"auto_pad", "SAME_UPPER"}, {"strides", std::vector<int64_t>{2, 2}}}, constant);
    expect_matches(Op::Conv, {{1, 3, 8, 7}, {2, 3, 4, 4}}, {{"auto_pad", "SAME_LOWER"}}, constant);
    expect_matches(Op::Conv, {{1, 3, 8, 8}, {2, 3, 3, 3}}, {{"pads", std::vector<int64_t>{0, 1, 2, 0}}}, constant);
    expect_matches(Op::Conv, {{2, 3, 20}, {5, 3, 4}, {5}}, {{"strides", std::vector<int64_t>{3}}}, constant);
    expect_matches(Op::Conv, {{1, 2, 5, 6, 7}, {3, 2, 2, 3, 2}}, {}, constant);
    expect_matches(Op::Conv, {{1, 64, 56, 56}, {64, 64, 3, 3}}, {{"pads", std::vector<int64_t>{1, 1, 1, 1}}}, constant);
  }
}

// Zero-sized operands and results, a zero in each position of each operand: the primitive gives
// what the interpreter gives (an empty result, or alpha * 0 + beta * C, zero, or the bias, then
// the activation) and never reaches oneDNN, which dies with SIGFPE on such shapes on AVX-512
// machines. ctest runs this suite three times: with oneDNN free to use the machine's best
// instruction set, and forced down to AVX2 and to SSE4.1 (DNNL_MAX_CPU_ISA); see
// DnnlOps.RunsOnTheInstructionSetItIsAllowed.
TEST(DnnlOps, ZeroSizedOperandsGiveTheInterpretersAnswer) {
  using Ints = std::vector<int64_t>;
  const std::vector<Case> cases = {
      {Op::MatMul, {{0, 5}, {5, 3}}, {}},           // M = 0
      {Op::MatMul, {{4, 0}, {0, 3}}, {}},           // K = 0: zeros
      {Op::MatMul, {{4, 5}, {5, 0}}, {}},           // N = 0
      {Op::MatMul, {{2, 0, 5}, {5, 3}}, {}},        // M = 0 under a batch
      {Op::MatMul, {{0, 4, 5}, {5, 3}}, {}},        // batch 0
      {Op::MatMul, {{0, 1, 4, 5}, {3, 5, 6}}, {}},  // batch 0, broadcast
      {Op::MatMul, {{3, 4, 0}, {3, 0, 2}}, {}},     // batched K = 0
      {Op::MatMul, {{0}, {0}}, {}},                 // vectors of length 0: a scalar 0
      {Op::MatMul, {{0}, {0, 3}}, {}},
      {Op::Gemm, {{0, 5}, {5, 3}, {3}}, {}},  // M = 0
      {Op::Gemm, {{5, 0}, {5, 3}, {3}}, {{"transA", 1}}},
      {Op::Gemm, {{4, 0}, {0, 3}, {4, 3}}, {{"alpha", 0.5f}, {"beta", 2.0f}}},  // K = 0: beta * C
      {Op::Gemm, {{0, 4}, {0, 3}, {3}}, {{"transA", 1}, {"beta", -1.5f}}},      // C broadcast by row
      {Op::Gemm, {{4, 0}, {3, 0}, {4, 1}}, {{"transB", 1}}},                    // by column
      {Op::Gemm, {{4, 0}, {3, 0}}, {{"transB", 1}}},                            // no C: zeros
      {Op::Gemm, {{4, 5}, {0, 5}, {}}, {{"transB", 1}}},                        // N = 0
      {Op::Gemm, {{0, 5}, {0, 5}}, {{"transB", 1}}},                            // M = N = 0
      {Op::Conv, {{0, 3, 8, 8}, {4, 3, 3, 3}, {4}}, {}},                        // batch 0
      {Op::Conv, {{1, 3, 8, 8}, {0, 3, 3, 3}, {0}}, {}},                        // no output channels
      {Op::Conv, {{1, 0, 8, 8}, {4, 0, 3, 3}, {4}}, {}},                        // no input channels: bias
      {Op::Conv, {{1, 0, 8, 8}, {4, 0, 3, 3}}, {}},                             // ... or zeros
      {Op::Conv, {{1, 3, 0, 0}, {4, 3, 1, 1}, {4}}, {{"pads", Ints{1, 1, 1, 1}}}},  // padding only: bias
      {Op::Conv, {{2, 4, 0}, {6, 2, 1}, {6}}, {{"group", 2}, {"pads", Ints{2, 1}}}},
  };
  for (const Case& c : cases)
    for (bool relu : {false, true}) {
      SCOPED_TRACE(std::string(op_name(c.op)) + " " + shape_str(c.shapes[0]) + " x " + shape_str(c.shapes[1]) +
                   (relu ? " + Relu" : ""));
      std::vector<Tensor> in = random_inputs(c, 40);
      Tensor want = run1(c.op, in, c.attrs);
      if (relu) want = run1(Op::Relu, {want});
      Tensor got = run_primitive(c, in, {relu ? jit::DnnlActivation::Kind::Relu : jit::DnnlActivation::Kind::None});
      expect_close(got, want, "empty sum");
      if (want.numel() > 0 && c.op != Op::MatMul && c.shapes.size() == 3) {
        bool any_nonzero = false;  // the C or bias term really reached the result
        for (int64_t i = 0; i < got.numel(); ++i) any_nonzero = any_nonzero || got.data<float>()[i] != 0.0f;
        EXPECT_TRUE(any_nonzero);
      }
    }
}

// With DNNL_MAX_CPU_ISA set (ctest's DnnlOpsAvx2 and DnnlOpsSse41 runs), oneDNN really runs on
// that instruction set or a lower one, so those runs cover the code paths of a machine without
// AVX-512 (or without AVX at all) on this one. Without it, the test reports what oneDNN picked.
TEST(DnnlOps, RunsOnTheInstructionSetItIsAllowed) {
  expect_matches(Op::MatMul, {{5, 7}, {7, 3}});  // oneDNN initialised
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  const char* limit = std::getenv("DNNL_MAX_CPU_ISA");
  std::cout << "oneDNN runs on cpu_isa 0x" << std::hex << unsigned(isa) << std::dec
            << (limit ? std::string(" (DNNL_MAX_CPU_ISA=") + limit + ")" : std::string()) << "\n";
  if (!limit) return;
  const std::map<std::string, dnnl::cpu_isa> named = {{"SSE41", dnnl::cpu_isa::sse41}, {"AVX2", dnnl::cpu_isa::avx2}};
  auto it = named.find(limit);
  ASSERT_NE(it, named.end()) << "this test knows SSE41 and AVX2, not " << limit;
  // cpu_isa values are bit masks in which each set includes the bits of those below it.
  EXPECT_EQ(unsigned(isa) & ~unsigned(it->second), 0u) << "oneDNN ignored DNNL_MAX_CPU_ISA=" << limit;
}

// A Relu fused as the primitive's activation gives what the interpreter's node and then Relu give.
TEST(DnnlOps, FusedReluMatchesTheTwoOps) {
  const std::vector<Case> cases = {
      {Op::Conv, {{1, 4, 9, 9}, {6, 4, 3, 3}, {6}}, {{"pads", std::vector<int64_t>{1, 1, 1, 1}}}},
      {Op::Gemm, {{5, 7}, {3, 7}, {3}}, {{"transB", 1}}},
      {Op::MatMul, {{2, 5, 7}, {7, 3}}, {}},
  };
  for (const Case& c : cases) {
    std::vector<Tensor> in = random_inputs(c, 20);
    Tensor want = run1(Op::Relu, {run1(c.op, in, c.attrs)});
    expect_close(run_primitive(c, in, {jit::DnnlActivation::Kind::Relu}), want, std::string(op_name(c.op)) + " + Relu");
  }
}

// Infinities and NaN before a fused Relu: what oneDNN's post-op makes of them depends on the
// implementation it picks (a small convolution's reference path gives NaN for -inf, the JIT paths
// of larger convolutions and of MatMul give 0 for NaN); the primitive gives the interpreter's
// answer (0 for -inf, NaN kept) for every shape, the weights given at compile time or not.
TEST(DnnlOps, FusedReluKeepsTheInterpretersNonFiniteValues) {
  const std::vector<Case> cases = {
      {Op::Conv, {{1, 3, 16, 16}, {8, 3, 3, 3}, {8}}, {{"pads", std::vector<int64_t>{1, 1, 1, 1}}}},
      {Op::Conv, {{1, 64, 28, 28}, {64, 64, 3, 3}, {64}}, {{"pads", std::vector<int64_t>{1, 1, 1, 1}}}},
      {Op::Conv, {{1, 256, 14, 14}, {64, 256, 1, 1}}, {}},
      {Op::MatMul, {{64, 256}, {256, 128}}, {}},
      {Op::Gemm, {{16, 32}, {24, 32}, {24}}, {{"transB", 1}}},
  };
  for (const Case& c : cases)
    for (bool constant : {false, true})
      for (int poison = 0; poison < 3; ++poison) {  // -inf, NaN, +inf in the first input
        SCOPED_TRACE(std::string(op_name(c.op)) + " " + shape_str(c.shapes[0]) + " poison " + std::to_string(poison) +
                     (constant ? " constant weights" : ""));
        std::vector<Tensor> in = random_inputs(c, 60);
        const float bad = poison == 0 ? -INFINITY : poison == 1 ? NAN : INFINITY;
        for (int64_t i = 0; i < in[0].numel(); i += 97) in[0].data<float>()[i] = bad;
        Tensor want = run1(Op::Relu, {run1(c.op, in, c.attrs)});
        expect_close(run_primitive(c, in, {jit::DnnlActivation::Kind::Relu}, constant), want,
                     "fused Relu on non-finite inputs");
      }
}

TEST(DnnlOps, BadShapesAreClearErrors) {
  Node mm = make_node(Op::MatMul, 2, {});
  Error e = error_of([&] { jit::make_dnnl_primitive(mm, {{5, 7}, {6, 3}}, {}); });
  EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(std::string(e.what()).find("node_under_test"), std::string::npos) << e.what();
  Node gemm = make_node(Op::Gemm, 3, {});
  e = error_of([&] { jit::make_dnnl_primitive(gemm, {{5, 7}, {7, 3}, {4, 3}}, {}); });
  EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(std::string(e.what()).find("does not broadcast"), std::string::npos) << e.what();
  Node conv = make_node(Op::Conv, 2, {});
  e = error_of([&] { jit::make_dnnl_primitive(conv, {{1, 3, 9, 9}, {4, 2, 3, 3}}, {}); });
  EXPECT_NE(std::string(e.what()).find("node_under_test"), std::string::npos) << e.what();
}

TEST(DnnlOps, CanCompileNamesWhatItRefuses) {
  Node mm = make_node(Op::MatMul, 2, {});
  EXPECT_EQ(jit::dnnl_can_compile(mm, {DType::Float32, DType::Float32}, {2, 2}), "");
  EXPECT_NE(jit::dnnl_can_compile(mm, {DType::Float64, DType::Float64}, {2, 2}).find("float64"), std::string::npos);
  Node conv = make_node(Op::Conv, 2, {});
  EXPECT_NE(jit::dnnl_can_compile(conv, {DType::Float32, DType::Float32}, {7, 7}), "");
}

#else
TEST(DnnlOps, Skipped) { GTEST_SKIP() << "built without oneDNN (TERRACE_WITH_DNNL off or not found)"; }
#endif

}  // namespace
}  // namespace terrace::testing
