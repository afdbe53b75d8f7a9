// Tier 1's oneDNN MatMul, Gemm and Conv against the interpreter: batching and broadcasting, 1-D
// operands, transposes, alpha/beta and C broadcasting, pads, auto_pad, strides, dilations, groups,
// bias, 1-3 spatial dimensions, weights known at compile time or not; and the errors.
#include "jit/cpu/dnnl_ops.h"

#ifdef TERRACE_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>
#endif
#include <cmath>
#include <cstdlib>
#include <thread>
#include <iostream>

#include "interp/omp_threads.h"
#include "jit/cpu/dnnl_activation.h"
#include "jit/cpu/packed_gemm.h"
#include "jit/cpu/winograd_conv.h"
#include "tests/jit/chain_builder.h"
#include "tests/support/node_runner.h"
#include "tests/support/process_threads.h"

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
  // C one value per column with alpha and beta 1 (a Linear layer's bias): oneDNN's bias argument.
  for (int ta : {0, 1}) {
    const Shape a = ta ? Shape{7, 5} : Shape{5, 7};
    expect_matches(Op::Gemm, {a, {7, 3}, {3}}, {{"transA", ta}});
    expect_matches(Op::Gemm, {a, {7, 3}, {1, 3}}, {{"transA", ta}}, true);
    expect_matches(Op::Gemm, {a, {7, 1}, {}}, {{"transA", ta}});  // a scalar C, one column
  }
}

// A primitive keeps its arguments' oneDNN memory objects between calls (jit/cpu/dnnl_ops.cpp's
// BoundArgs): each call must read and write its own buffers, also while another call of the same
// primitive runs on another thread (that one makes its own set).
TEST(DnnlOps, RepeatedAndConcurrentCallsReadAndWriteTheirOwnBuffers) {
  const Case c{Op::Gemm, {{4, 24}, {24, 16}, {16}}, {}};
  const std::vector<Tensor> first = random_inputs(c, 3);
  std::vector<const Tensor*> constants = {nullptr, &first[1], &first[2]};
  auto prim = jit::make_dnnl_primitive(make_node(c.op, 3, c.attrs), c.shapes, constants,
                                       {jit::DnnlActivation::Kind::Relu});
  auto check = [&](uint32_t seed) {
    std::vector<Tensor> in = random_inputs(c, seed);
    in[1] = first[1];
    in[2] = first[2];
    Tensor want = run1(c.op, in, c.attrs);
    for (int64_t i = 0; i < want.numel(); ++i) want.data<float>()[i] = std::max(0.0f, want.data<float>()[i]);
    Tensor got = Tensor::empty(DType::Float32, prim->output_shape());
    prim->run({in[0].data<float>(), in[1].data<float>(), in[2].data<float>()}, got.data<float>());
    int wrong = 0;  // elements outside expect_close's tolerance
    for (int64_t i = 0; i < want.numel(); ++i) {
      const double g = got.data<float>()[i], w = want.data<float>()[i];
      wrong += !(std::abs(g - w) <= 1e-5 + 1e-3 * std::abs(w));
    }
    return wrong;
  };
  EXPECT_EQ(check(5), 0);
  EXPECT_EQ(check(6), 0);  // the same primitive, other buffers
  std::vector<int> wrong(2, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) wrong[size_t(t)] += check(uint32_t(100 + 2 * i + t));
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong[0], 0);
  EXPECT_EQ(wrong[1], 0);
}

// Constant weights of a gemm-based product (oneDNN below AVX-512: this machine's, or ctest's
// DnnlOpsAvx2 and DnnlOpsSse41 runs) are read in ONNX's order or copied into the other plain order
// where that is measured faster (jit/cpu/dnnl_ops.cpp); TERRACE_GEMM_WEIGHT_ORDER forces either, so
// that both are checked here whatever the timing says. On AVX-512 oneDNN packs its own blocked
// layout and the setting changes nothing.
TEST(DnnlOps, ConstantWeightsInEitherPlainOrderMatchTheInterpreter) {
  setenv("TERRACE_PACKED_GEMM", "0", 1);  // oneDNN's own path, not Terrace's packed weights (below)
  for (const char* order : {"given", "other", ""}) {
    if (*order) setenv("TERRACE_GEMM_WEIGHT_ORDER", order, 1);
    else unsetenv("TERRACE_GEMM_WEIGHT_ORDER");
    SCOPED_TRACE(std::string("TERRACE_GEMM_WEIGHT_ORDER=") + order);
    expect_matches(Op::MatMul, {{1, 128, 256}, {256, 1024}}, {}, true);       // timed: 33.5M multiply-adds
    expect_matches(Op::MatMul, {{2, 3, 16, 24}, {3, 24, 40}}, {}, true);      // batched weights
    expect_matches(Op::Gemm, {{16, 96}, {80, 96}, {80}}, {{"transB", 1}}, true);  // given as [N, K]
    expect_matches(Op::Gemm, {{16, 96}, {96, 80}, {80}}, {{"alpha", 0.5f}}, true);
    Case relu{Op::MatMul, {{64, 96}, {96, 200}}, {}};
    std::vector<Tensor> in = random_inputs(relu, 5);
    Tensor fused = run_primitive(relu, in, {jit::DnnlActivation::Kind::Relu}, true);
    Tensor want = run1(Op::MatMul, in, {});
    for (int64_t i = 0; i < want.numel(); ++i) want.data<float>()[i] = std::max(0.0f, want.data<float>()[i]);
    expect_close(fused, want, "MatMul with a Relu post-op");
  }
  unsetenv("TERRACE_GEMM_WEIGHT_ORDER");
  unsetenv("TERRACE_PACKED_GEMM");
}

// Where oneDNN has no packed layout of its own (below AVX-512: this machine's oneDNN, or ctest's
// dnnl_ops_on_AVX2/SSE41 runs), a product of 16 rows or more with constant weights (by default of
// any size: TERRACE_PACKED_GEMM_BYTES unset) runs on Terrace's packed weights (jit/cpu/packed_gemm.h)
// if the CPU has AVX2 and FMA: the bias added in its kernel, the
// activation after it, by oneDNN when every input is finite and as the interpreter computes it
// otherwise (a NaN stays NaN through Relu, which oneDNN's turns into 0).
TEST(DnnlOps, PackedWeightProductsWithBiasAndActivationMatchTheInterpreter) {
  unsetenv("TERRACE_PACKED_GEMM");
  unsetenv("TERRACE_PACKED_GEMM_BYTES");
  unsetenv("TERRACE_GEMM_WEIGHT_ORDER");
  expect_matches(Op::MatMul, {{1, 128, 256}, {256, 1000}}, {}, true);
  expect_matches(Op::Gemm, {{16, 96}, {80, 96}}, {{"transB", 1}}, true);  // weights given as [N, K]
  expect_matches(Op::Gemm, {{96, 16}, {96, 80}, {80}}, {{"transA", 1}}, true);  // A by columns: oneDNN's
  expect_matches(Op::MatMul, {{15, 96}, {96, 40}}, {}, true);              // under 16 rows: oneDNN's
  int packed = 0;
  for (auto kind : {jit::DnnlActivation::Kind::Gelu, jit::DnnlActivation::Kind::Relu})
    for (bool nan : {false, true}) {
      const Shape as{64, 96}, bs{96, 200}, bias_shape{200};
      std::vector<Tensor> in = {random_tensor(DType::Float32, as, -1, 1, 3, false),
                                random_tensor(DType::Float32, bs, -1, 1, 4, false),
                                random_tensor(DType::Float32, bias_shape, -1, 1, 5, false)};
      if (nan) in[0].data<float>()[5 * 96 + 7] = NAN;  // row 5 of the result: NaN before the activation
      const jit::DnnlActivation act{kind};
      auto prim = jit::make_dnnl_primitive(make_node(Op::MatMul, 3, {}), {as, bs, bias_shape}, {nullptr, &in[1], nullptr},
                                           act);
      packed += prim->describe().find("packed-weight") != std::string::npos;
      Tensor got = Tensor::empty(DType::Float32, prim->output_shape());
      prim->run({in[0].data<float>(), in[1].data<float>(), in[2].data<float>()}, got.data<float>());
      Tensor want = run1(Op::MatMul, {in[0], in[1]}, {});
      for (int64_t i = 0; i < want.numel(); ++i) {
        float& w = want.data<float>()[i];
        w = jit::dnnl_activation_apply(act, w + in[2].data<float>()[i % 200]);
      }
      expect_close(got, want, std::string(kind == jit::DnnlActivation::Kind::Gelu ? "GELU" : "Relu") +
                                  (nan ? " with a NaN input: " : ": ") + prim->describe());
      if (nan) {
        EXPECT_TRUE(std::isnan(got.data<float>()[5 * 200 + 3])) << prim->describe();
      }
    }
  std::cout << "[          ] " << packed << " of 4 products on Terrace's packed weights (this CPU and oneDNN ISA)\n";
  if (jit::packed_gemm_supported() && std::getenv("DNNL_MAX_CPU_ISA") &&
      std::string(std::getenv("DNNL_MAX_CPU_ISA")) != "ALL") {
    EXPECT_EQ(packed, 4) << "oneDNN held below AVX-512 has no packed layout: Terrace's must take these";
  }
  unsetenv("TERRACE_PACKED_GEMM_BYTES");
}

// A product built on a background thread (the tier manager's compile jobs) starts no OpenMP team
// there, also where it times the weights' two plain orders (below AVX-512). oneDNN runs a
// primitive on a team of the size it was built for, whatever the thread's setting, and a team
// started on a second thread adds workers to those libgomp manages: once they outnumber the cores
// every team's spin-wait is cut short for the rest of the process (interp/omp_threads.h).
TEST(DnnlOps, ABackgroundBuildStartsNoOpenMPTeam) {
  unsetenv("TERRACE_GEMM_WEIGHT_ORDER");
  // A BERT up-projection with its bias (oneDNN adds it in a parallel loop of its own).
  Case c{Op::Gemm, {{128, 768}, {768, 3072}, {3072}}, {}};
  std::vector<Tensor> in = random_inputs(c, 9);
  std::vector<const Tensor*> constants = {nullptr, &in[1], &in[2]};
  size_t before = 0, after = 0;
  std::unique_ptr<jit::DnnlPrimitive> prim;
  std::thread background([&] {
    mark_background_thread();
    before = process_threads();
    prim = jit::make_dnnl_primitive(make_node(c.op, c.shapes.size(), c.attrs), c.shapes, constants);
    after = process_threads();
  });
  background.join();
  EXPECT_EQ(after, before) << "threads started while the product was built";
  EXPECT_TRUE(prim);
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

// A Clip (MobileNets' Relu6) fused as the primitive's activation gives what the node and then
// Clip give, on finite inputs and on infinities and NaN (the interpreter's: NaN kept, -inf to lo).
TEST(DnnlOps, FusedClipMatchesTheTwoOps) {
  const std::vector<Case> cases = {
      {Op::Conv, {{1, 4, 9, 9}, {6, 4, 3, 3}, {6}}, {{"pads", std::vector<int64_t>{1, 1, 1, 1}}}},
      {Op::Conv, {{1, 16, 12, 12}, {16, 1, 3, 3}, {16}}, {{"group", 16}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}}},
      {Op::Conv, {{1, 32, 14, 14}, {24, 32, 1, 1}}, {}},
      {Op::Gemm, {{5, 7}, {3, 7}, {3}}, {{"transB", 1}}},
      {Op::MatMul, {{2, 5, 7}, {7, 3}}, {}},
  };
  const jit::DnnlActivation clip{jit::DnnlActivation::Kind::Clip, -0.25f, 0.5f};
  for (const Case& c : cases)
    for (bool constant : {false, true})
      for (int poison = -1; poison < 3; ++poison) {  // none, -inf, NaN, +inf in the first input
        SCOPED_TRACE(std::string(op_name(c.op)) + " " + shape_str(c.shapes[0]) + " poison " + std::to_string(poison) +
                     (constant ? " constant weights" : ""));
        std::vector<Tensor> in = random_inputs(c, 70);
        if (poison >= 0) {
          const float bad = poison == 0 ? -INFINITY : poison == 1 ? NAN : INFINITY;
          for (int64_t i = 0; i < in[0].numel(); i += 53) in[0].data<float>()[i] = bad;
        }
        Tensor want = run1(Op::Clip, {run1(c.op, in, c.attrs), Tensor::scalar(clip.lo), Tensor::scalar(clip.hi)});
        Tensor got = run_primitive(c, in, clip, constant);
        expect_close(got, want, "fused Clip");
        if (poison < 0) {
          bool clipped = false;  // the bounds were reached, so the test sees the post-op at work
          for (int64_t i = 0; i < got.numel(); ++i) clipped = clipped || got.data<float>()[i] == clip.hi;
          EXPECT_TRUE(clipped);
        }
      }
}

// ---- Convolution chains (make_dnnl_conv_chain) ----

using Ints = std::vector<int64_t>;

// A chain and its inputs: `ops` read chain inputs by index, op k's result as -1 - k.
struct Chain {
  static constexpr int kPrevious = -1000;  // in conv(): the last op's result
  std::vector<jit::DnnlChainOp> ops;
  std::vector<Tensor> inputs;
  std::vector<bool> constant;  // per input: handed over at compile time

  int input(Tensor t, bool is_constant) {
    inputs.push_back(std::move(t));
    constant.push_back(is_constant);
    return int(inputs.size()) - 1;
  }
  void conv(int x, Shape w, bool bias, std::map<std::string, Attr> attrs, bool constant_weights = true) {
    jit::DnnlChainOp op;
    op.node = make_node(Op::Conv, bias ? 3 : 2, attrs);
    op.node.name = "conv" + std::to_string(ops.size());
    const int64_t cout = w[0];
    if (x == kPrevious) x = -int(ops.size());
    op.inputs = {x, input(random_tensor(DType::Float32, w, -0.5, 0.5, uint32_t(ops.size() + 7), false), constant_weights)};
    if (bias) op.inputs.push_back(input(random_tensor(DType::Float32, {cout}, -0.5, 0.5, uint32_t(ops.size() + 90), false), true));
    ops.push_back(std::move(op));
  }
  void activation(jit::DnnlActivation a) {
    jit::DnnlChainOp op;
    op.kind = jit::DnnlChainOp::Kind::Activation;
    op.node = make_node(a.kind == jit::DnnlActivation::Kind::Relu ? Op::Relu : Op::Clip, 1);
    op.activation = a;
    ops.push_back(std::move(op));
  }
  void add(int residual) {
    jit::DnnlChainOp op;
    op.kind = jit::DnnlChainOp::Kind::Add;
    op.node = make_node(Op::Add, 2);
    op.inputs = {residual};
    ops.push_back(std::move(op));
  }

  void pool(int x, Op op, std::map<std::string, Attr> attrs) {
    jit::DnnlChainOp p;
    p.kind = jit::DnnlChainOp::Kind::Pool;
    p.node = make_node(op, 1, attrs);
    p.node.name = "pool" + std::to_string(ops.size());
    p.inputs = {x == kPrevious ? -int(ops.size()) : x};
    ops.push_back(std::move(p));
  }

  // The chain op by op on the interpreter: the last op's result, or op k's.
  Tensor reference(int k = -1) const {
    std::vector<Tensor> results;
    Tensor cur;
    for (const jit::DnnlChainOp& op : ops) {
      auto in = [&](int i) { return i < 0 ? results.at(size_t(-1 - i)) : inputs[size_t(i)]; };
      if (op.kind == jit::DnnlChainOp::Kind::Conv || op.kind == jit::DnnlChainOp::Kind::Pool) {
        std::vector<Tensor> args;
        for (int i : op.inputs) args.push_back(in(i));
        cur = run_node(op.node, args).at(0);
      } else if (op.kind == jit::DnnlChainOp::Kind::Add) {
        cur = run1(Op::Add, {cur, in(op.inputs[0])});
      } else if (op.activation.kind == jit::DnnlActivation::Kind::Relu) {
        cur = run1(Op::Relu, {cur});
      } else {
        cur = run1(Op::Clip, {cur, Tensor::scalar(op.activation.lo), Tensor::scalar(op.activation.hi)});
      }
      results.push_back(cur);
    }
    return k < 0 ? cur : results.at(size_t(k));
  }
  std::unique_ptr<jit::DnnlPrimitive> compile(const std::vector<int>& outputs = {}) const {
    std::vector<Shape> shapes;
    std::vector<const Tensor*> constants;
    for (size_t i = 0; i < inputs.size(); ++i) {
      shapes.push_back(inputs[i].shape());
      constants.push_back(constant[i] ? &inputs[i] : nullptr);
    }
    return jit::make_dnnl_conv_chain(ops, shapes, constants, outputs);
  }
  Tensor run(const jit::DnnlPrimitive& prim) const {
    Tensor got = Tensor::empty(DType::Float32, prim.output_shape());
    std::vector<const float*> ptrs;
    for (const Tensor& t : inputs) ptrs.push_back(t.data<float>());
    prim.run(ptrs, got.data<float>());
    return got;
  }
  std::vector<Tensor> run_all(const jit::DnnlPrimitive& prim) const {
    std::vector<Tensor> got;
    std::vector<float*> outs;
    for (const Shape& s : prim.output_shapes()) {
      got.push_back(Tensor::empty(DType::Float32, s));
      outs.push_back(got.back().data<float>());
    }
    std::vector<const float*> ptrs;
    for (const Tensor& t : inputs) ptrs.push_back(t.data<float>());
    prim.run_outputs(ptrs, outs);
    return got;
  }
};

const jit::DnnlActivation kRelu{jit::DnnlActivation::Kind::Relu};
const jit::DnnlActivation kRelu6{jit::DnnlActivation::Kind::Clip, 0.0f, 6.0f};

// MobileNetV2's inverted residual block: 1x1 expansion, Relu6, depthwise 3x3, Relu6, 1x1 projection,
// the residual Add.
Chain inverted_residual(Shape x, int64_t expand, int64_t stride, bool residual) {
  Chain c;
  const int64_t cin = x[1], hidden = cin * expand;
  const int in = c.input(random_tensor(DType::Float32, x, -1, 1, 3, false), false);
  c.conv(in, {hidden, cin, 1, 1}, true, {});
  c.activation(kRelu6);
  c.conv(Chain::kPrevious, {hidden, 1, 3, 3}, true, {{"group", hidden}, {"pads", Ints{1, 1, 1, 1}}, {"strides", Ints{stride, stride}}});
  c.activation(kRelu6);
  c.conv(Chain::kPrevious, {cin, hidden, 1, 1}, true, {});
  if (residual) c.add(in);
  return c;
}

// ResNet's bottleneck: 1x1, Relu, 3x3, Relu, 1x1, the residual Add, Relu.
Chain bottleneck(Shape x, int64_t mid) {
  Chain c;
  const int in = c.input(random_tensor(DType::Float32, x, -1, 1, 4, false), false);
  c.conv(in, {mid, x[1], 1, 1}, true, {});
  c.activation(kRelu);
  c.conv(Chain::kPrevious, {mid, mid, 3, 3}, true, {{"pads", Ints{1, 1, 1, 1}}});
  c.activation(kRelu);
  c.conv(Chain::kPrevious, {x[1], mid, 1, 1}, true, {});
  c.add(in);
  c.activation(kRelu);
  return c;
}

TEST(DnnlOps, ConvChainsMatchTheInterpreterOpByOp) {
  std::vector<std::pair<std::string, Chain>> chains = {
      {"inverted residual", inverted_residual({1, 24, 14, 14}, 6, 1, true)},
      {"inverted residual, stride 2", inverted_residual({1, 16, 15, 15}, 6, 2, false)},
      {"bottleneck", bottleneck({1, 64, 10, 10}, 16)},
      {"batch 2, odd channels", bottleneck({2, 20, 7, 9}, 12)},
  };
  {  // weights given at run time, a 1-D chain, no bias, dilations
    Chain c;
    const int in = c.input(random_tensor(DType::Float32, {1, 6, 30}, -1, 1, 5, false), false);
    c.conv(in, {8, 6, 3}, false, {{"dilations", Ints{2}}}, false);
    c.activation(kRelu);
    c.conv(Chain::kPrevious, {5, 8, 5}, true, {{"strides", Ints{2}}, {"pads", Ints{2, 1}}}, false);
    chains.emplace_back("1-D, weights at run time", std::move(c));
  }
  for (const auto& [what, c] : chains) {
    SCOPED_TRACE(what);
    auto prim = c.compile();
    Tensor want = c.reference();
    ASSERT_EQ(prim->output_shape(), want.shape());
    expect_close(c.run(*prim), want, what);
    expect_close(c.run(*prim), want, what + ", a second call");  // buffers reused
  }
}

// A ResNet stage as one chain: a block with a downsampling Conv on the shortcut (both branches
// read the stage's input), then an identity block whose Add reads the first block's output, an
// earlier result; three outputs, two of them intermediate. Each matches the interpreter.
// Each of `outputs` matches the chain on the interpreter, on two calls and with input 0's element
// `poisoned` set to NaN and to `infinity` (the reference path gives every output too).
void expect_outputs_match(const Chain& c, const jit::DnnlPrimitive& prim, const std::vector<int>& outputs,
                          size_t poisoned, float infinity) {
  for (int call = 0; call < 2; ++call) {
    std::vector<Tensor> got = c.run_all(prim);
    for (size_t j = 0; j < outputs.size(); ++j)
      expect_close(got[j], c.reference(outputs[j]), "output " + std::to_string(j) + ", call " + std::to_string(call));
  }
  for (float bad : {NAN, infinity}) {
    Chain d = c;
    d.inputs[0] = c.inputs[0].clone();
    d.inputs[0].data<float>()[poisoned] = bad;
    std::vector<Tensor> got = d.run_all(prim);
    for (size_t j = 0; j < outputs.size(); ++j) expect_close(got[j], d.reference(outputs[j]), "non-finite input");
  }
}

TEST(DnnlOps, ConvChainsWithBranchesAndSeveralOutputsMatchTheInterpreter) {
  Chain c;
  const int x = c.input(random_tensor(DType::Float32, {1, 16, 12, 12}, -1, 1, 8, false), false);
  const Ints pads{1, 1, 1, 1};
  c.conv(x, {8, 16, 1, 1}, true, {});                                           // 0
  c.activation(kRelu);                                                          // 1
  c.conv(-1 - 1, {8, 8, 3, 3}, true, {{"pads", pads}, {"strides", Ints{2, 2}}});  // 2
  c.activation(kRelu);                                                          // 3
  c.conv(-1 - 3, {32, 8, 1, 1}, true, {});                                      // 4
  c.conv(x, {32, 16, 1, 1}, true, {{"strides", Ints{2, 2}}});                   // 5: the shortcut
  c.add(-1 - 4);                                                                // 6
  c.activation(kRelu);                                                          // 7: block 1's output
  c.conv(-1 - 7, {8, 32, 1, 1}, true, {});                                      // 8
  c.activation(kRelu);                                                          // 9
  c.conv(-1 - 9, {8, 8, 3, 3}, true, {{"pads", pads}});                         // 10
  c.activation(kRelu);                                                          // 11
  c.conv(-1 - 11, {32, 8, 1, 1}, true, {});                                     // 12
  c.add(-1 - 7);                                                                // 13
  c.activation(kRelu);                                                          // 14
  const std::vector<int> outputs{14, 7, 11};
  auto prim = c.compile(outputs);
  ASSERT_EQ(prim->num_outputs(), 3u);
  expect_outputs_match(c, *prim, outputs, 5, -INFINITY);
  const std::string text = prim->describe();
  EXPECT_NE(text.find("sum(step 3)"), std::string::npos) << text;  // the identity block adds block 1's output
}

// ResNet's stem and first block as one chain: Conv, Relu, MaxPool (3x3, stride 2, padded) in the
// chain's blocked layout, then the block's main path and its shortcut Conv both reading the pool;
// an AveragePool (padding not counted, ceil_mode) read by a Conv; a chain that starts with a pool
// of its input. Each matches the interpreter, also as an output of its own and on non-finite inputs
// (the interpreter's max keeps NaN).
TEST(DnnlOps, ConvChainsWithPoolsMatchTheInterpreter) {
  Chain c;
  const int x = c.input(random_tensor(DType::Float32, {1, 3, 32, 32}, -1, 1, 4, false), false);
  const Ints pads{1, 1, 1, 1};
  c.conv(x, {16, 3, 7, 7}, true, {{"pads", Ints{3, 3, 3, 3}}, {"strides", Ints{2, 2}}});         // 0
  c.activation(kRelu);                                                                           // 1
  c.pool(-1 - 1, Op::MaxPool, {{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", pads}});  // 2
  c.conv(-1 - 2, {8, 16, 1, 1}, true, {});                                                       // 3
  c.activation(kRelu);                                                                           // 4
  c.conv(-1 - 4, {32, 8, 3, 3}, true, {{"pads", pads}});                                         // 5
  c.conv(-1 - 2, {32, 16, 1, 1}, true, {});                                                      // 6: the shortcut
  c.add(-1 - 5);                                                                                 // 7
  c.activation(kRelu);                                                                           // 8
  c.pool(-1 - 8, Op::AveragePool, {{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}, {"ceil_mode", Attr(int64_t(1))}});  // 9
  c.conv(-1 - 9, {16, 32, 3, 3}, true, {{"pads", pads}});                                        // 10
  const std::vector<int> outputs{10, 2};
  auto prim = c.compile(outputs);
  ASSERT_EQ(prim->num_outputs(), 2u);
  expect_outputs_match(c, *prim, outputs, 37, INFINITY);
  const std::string text = prim->describe();
  EXPECT_NE(text.find("pooling (MaxPool 'pool2', "), std::string::npos) << text;
  EXPECT_NE(text.find("src step 1 [1,16,8,8]"), std::string::npos) << "the Convs read the pool's result\n" << text;

  Chain p;  // a pool of the chain's input first
  const int y = p.input(random_tensor(DType::Float32, {2, 8, 10, 10}, -1, 1, 5, false), false);
  p.pool(y, Op::MaxPool, {{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}});
  p.conv(-1, {8, 8, 3, 3}, true, {{"pads", pads}});
  p.activation(kRelu);
  auto first = p.compile();
  expect_close(p.run(*first), p.reference(), "a chain starting with a pool");

  // A global pool ending the chain (a CNN's GlobalAveragePool before its classifier), over 2-D and
  // 1-D windows; with NaN in the input the max takes the reference path (oneDNN's max need not
  // keep NaN), the average keeps it.
  for (Op op : {Op::GlobalAveragePool, Op::GlobalMaxPool})
    for (const Shape& shape : {Shape{2, 8, 7, 7}, Shape{1, 8, 13}})
      for (bool nan : {false, true}) {
        SCOPED_TRACE(std::string(op_name(op)) + " over " + shape_str(shape) + (nan ? " with NaN" : ""));
        Chain g;
        Tensor in = random_tensor(DType::Float32, shape, -1, 1, 6, false);
        if (nan) in.data<float>()[5] = NAN;
        const int z = g.input(in, false);
        const Ints w = shape.size() == 4 ? Ints{16, 8, 3, 3} : Ints{16, 8, 3};
        g.conv(z, w, true, {{"pads", shape.size() == 4 ? Ints{1, 1, 1, 1} : Ints{1, 1}}});
        g.activation(kRelu);
        g.pool(Chain::kPrevious, op, {});
        auto prim = g.compile();
        expect_close(g.run(*prim), g.reference(), "a global pool ending the chain");
        if (!nan) {
          EXPECT_NE(prim->describe().find("pooling (" + std::string(op_name(op))), std::string::npos) << prim->describe();
        }
      }
}

// y + Conv(y), the Add reading the Conv's own source at its last use: the sum cannot write into
// that buffer while the Conv reads it.
TEST(DnnlOps, ConvChainAddingItsOwnSourceMatchesTheInterpreter) {
  Chain c;
  const int x = c.input(random_tensor(DType::Float32, {1, 16, 9, 9}, -1, 1, 9, false), false);
  c.conv(x, {16, 16, 3, 3}, true, {{"pads", Ints{1, 1, 1, 1}}});  // 0
  c.activation(kRelu);                                              // 1: y
  c.conv(-1 - 1, {16, 16, 3, 3}, true, {{"pads", Ints{1, 1, 1, 1}}});  // 2
  c.add(-1 - 1);                                                    // 3: y + Conv(y)
  c.activation(kRelu);                                              // 4
  auto prim = c.compile();
  expect_close(c.run(*prim), c.reference(), "y + Conv(y)");
}

// Zero-sized tensors anywhere in a chain: the interpreter's answer (an empty result, or the bias
// through the activations when the sums are empty), without reaching oneDNN.
TEST(DnnlOps, ConvChainsWithZeroSizedTensorsGiveTheInterpretersAnswer) {
  std::vector<std::pair<std::string, Chain>> chains;
  for (const Shape& x : {Shape{0, 8, 6, 6}, Shape{1, 8, 0, 6}, Shape{1, 0, 6, 6}})
    for (bool global_pool : {false, true}) {
      Chain c;
      const int in = c.input(random_tensor(DType::Float32, x, -1, 1, 6, false), false);
      const int64_t k = x[2] == 0 ? 1 : 3;  // an empty height: a 1x1 kernel over the padding only
      c.conv(in, {4, x[1], k, k}, true, {{"pads", Ints{1, 1, 1, 1}}});
      c.activation(kRelu6);
      c.conv(Chain::kPrevious, {5, 4, 1, 1}, true, {});
      c.activation(kRelu);
      // An average over an empty window (x's height 0 stays 0 through 1x1 kernels: the mean of nothing).
      if (global_pool) c.pool(Chain::kPrevious, Op::GlobalAveragePool, {});
      chains.emplace_back("x " + shape_str(x) + (global_pool ? ", then GlobalAveragePool" : ""), std::move(c));
    }
  for (const auto& [what, c] : chains) {
    SCOPED_TRACE(what);
    auto prim = c.compile();
    EXPECT_NE(prim->describe().find("no library call"), std::string::npos) << prim->describe();
    Tensor want = c.reference();
    expect_close(c.run(*prim), want, what);
  }
}

// Infinities and NaN in a chain's input: the interpreter's answer (its Relu and Clip keep NaN and
// send -inf to the lower bound, which oneDNN's fused post-ops do not on every path).
TEST(DnnlOps, ConvChainsKeepTheInterpretersNonFiniteValues) {
  for (int poison = 0; poison < 3; ++poison) {
    SCOPED_TRACE("poison " + std::to_string(poison));
    Chain c = inverted_residual({1, 16, 10, 10}, 4, 1, true);
    const float bad = poison == 0 ? -INFINITY : poison == 1 ? NAN : INFINITY;
    for (int64_t i = 0; i < c.inputs[0].numel(); i += 211) c.inputs[0].data<float>()[i] = bad;
    auto prim = c.compile();
    expect_close(c.run(*prim), c.reference(), "non-finite input");
  }
}

// Whether a chain's 3x3 step of stride 1 over `x` runs on Terrace's Winograd kernel here
// (jit/cpu/winograd_conv.h): an AVX2/FMA CPU whose oneDNN keeps nChw8c (at most AVX2: on AVX-512 it
// keeps nChw16c and the step stays oneDNN's, unless DNNL_MAX_CPU_ISA lowers it), and enough tiles
// for this machine's threads.
bool winograd_expected(const Shape& x, int64_t cout) {
  const unsigned isa = unsigned(dnnl::get_effective_cpu_isa());
  const char* off = std::getenv("TERRACE_WINOGRAD");
  return (isa & ~unsigned(dnnl::cpu_isa::avx2)) == 0 && !(off && std::string(off) == "0") &&
         jit::WinogradConv::fits({x[0], x[1], cout, x[2], x[3]}, omp_get_max_threads());
}

// ResNet's 3x3 convolutions of stride 1 with 64 channels or more: on Winograd's F(2x2, 3x3) where
// the CPU allows it (the description says so), the interpreter's answer on odd image sizes (tiles
// over the edge), batch 2, without bias or Relu, and with infinities and NaN in the input (the
// transforms would turn inf - inf into NaN: such calls take the reference path).
TEST(DnnlOps, WinogradConvolutionsMatchTheInterpreter) {
  struct Case {
    std::string what;
    Chain chain;
    Shape x;  // a Winograd step's input
  };
  std::vector<Case> chains = {{"bottleneck", bottleneck({1, 128, 14, 14}, 64), {1, 64, 14, 14}}};
  {
    Chain c;
    const int in = c.input(random_tensor(DType::Float32, {2, 64, 9, 11}, -1, 1, 6, false), false);
    c.conv(in, {72, 64, 3, 3}, false, {{"pads", Ints{1, 1, 1, 1}}});
    c.activation(kRelu);
    c.conv(Chain::kPrevious, {64, 72, 3, 3}, true, {{"pads", Ints{1, 1, 1, 1}}});
    chains.push_back({"batch 2, 9x11, no bias then no Relu", std::move(c), {2, 72, 9, 11}});
  }
  for (auto& [what, c, x] : chains) {
    SCOPED_TRACE(what);
    // Every value a multiple of 1/8 in [-1, 1]: the products, transforms and sums of these chains
    // stay on a grid of 2^-14 well inside float's 24 bits (Winograd's transformed weights are
    // multiples of 1/32), so they are exact whatever the order of the sums, and an element near
    // zero after cancellation compares as exactly as any other (with values of [-1, 1], 648-term
    // sums had put oneDNN 1.3e-5 off near zero on 16 threads, past the 1e-5 tolerance).
    for (Tensor& t : c.inputs)
      for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = std::round(t.data<float>()[i] * 8) / 8;
    auto prim = c.compile();
    const std::string d = prim->describe();
    if (winograd_expected(x, 64)) {
      EXPECT_NE(d.find("Winograd"), std::string::npos) << d;
    }
    expect_close(c.run(*prim), c.reference(), what);
    expect_close(c.run(*prim), c.reference(), what + ", a second call");
    for (float bad : {INFINITY, NAN, -INFINITY}) {
      Chain p = c;
      p.inputs[0] = c.inputs[0].clone();
      for (int64_t i = 0; i < p.inputs[0].numel(); i += 97) p.inputs[0].data<float>()[i] = bad;
      p.inputs[0].data<float>()[1] = -bad;  // inf and -inf in one tile
      expect_close(p.run(*prim), p.reference(), what + ", non-finite input");
    }
  }
}

// Steps Winograd does not take stay oneDNN's: stride 2, 5x5, fewer than 64 channels, a chain with
// TERRACE_WINOGRAD=0.
TEST(DnnlOps, WinogradTakesOnlyTheConvolutionsItComputes) {
  auto lone = [](Shape x, Shape w, std::map<std::string, Attr> attrs) {
    Chain c;
    const int in = c.input(random_tensor(DType::Float32, x, -1, 1, 8, false), false);
    c.conv(in, w, true, attrs);
    c.activation(kRelu);
    return c;
  };
  const std::vector<std::pair<std::string, Chain>> chains = {
      {"stride 2", lone({1, 64, 28, 28}, {64, 64, 3, 3}, {{"pads", Ints{1, 1, 1, 1}}, {"strides", Ints{2, 2}}})},
      {"5x5", lone({1, 64, 28, 28}, {64, 64, 5, 5}, {{"pads", Ints{2, 2, 2, 2}}})},
      {"32 channels", lone({1, 32, 28, 28}, {32, 32, 3, 3}, {{"pads", Ints{1, 1, 1, 1}}})},
      {"no padding", lone({1, 64, 28, 28}, {64, 64, 3, 3}, {})},
  };
  for (const auto& [what, c] : chains) {
    SCOPED_TRACE(what);
    auto prim = c.compile();
    EXPECT_EQ(prim->describe().find("Winograd"), std::string::npos) << prim->describe();
    expect_close(c.run(*prim), c.reference(), what);
  }
  if (!winograd_expected({1, 64, 28, 28}, 64)) return;
  Chain c = lone({1, 64, 28, 28}, {64, 64, 3, 3}, {{"pads", Ints{1, 1, 1, 1}}});
  EXPECT_NE(c.compile()->describe().find("Winograd"), std::string::npos);
  setenv("TERRACE_WINOGRAD", "0", 1);
  auto prim = c.compile();
  unsetenv("TERRACE_WINOGRAD");
  EXPECT_EQ(prim->describe().find("Winograd"), std::string::npos) << prim->describe();
  expect_close(c.run(*prim), c.reference(), "TERRACE_WINOGRAD=0");
}

// A chain keeps its intermediates in oneDNN's layout: reorders only at its edges, and the
// description says what each step runs.
// RegNet's X block: 1x1, a grouped 3x3 (16 channels a group), 1x1, the residual Add. Read in the
// NHWC layout the first 1x1 writes, the grouped convolution got oneDNN's reference code (10-50 ms
// a call on RegNet-X-400MF); it now picks its own layouts, with a reorder between, and no step of
// the chain runs reference code.
TEST(DnnlOps, GroupedConvChainsRunNoReferenceCode) {
  for (int64_t stride : {1, 2}) {
    Chain c;
    const int in = c.input(random_tensor(DType::Float32, {1, 64, 14, 14}, -1, 1, 7, false), false);
    c.conv(in, {160, 64, 1, 1}, true, {});
    c.activation(kRelu);
    c.conv(Chain::kPrevious, {160, 16, 3, 3}, true,
           {{"group", int64_t(10)}, {"pads", Ints{1, 1, 1, 1}}, {"strides", Ints{stride, stride}}});
    c.activation(kRelu);
    c.conv(Chain::kPrevious, {160, 160, 1, 1}, true, {});
    auto prim = c.compile();
    const std::string d = prim->describe();
    SCOPED_TRACE(d);
    EXPECT_EQ(d.find("ref:"), std::string::npos);
    Tensor want = c.reference();
    expect_close(c.run(*prim), want, "stride " + std::to_string(stride));
    expect_close(c.run(*prim), want, "stride " + std::to_string(stride) + ", a second call");
  }
}

TEST(DnnlOps, ConvChainDescribesItsStepsAndLayouts) {
  Chain c = bottleneck({1, 32, 8, 8}, 16);
  auto prim = c.compile();
  const std::string d = prim->describe();
  EXPECT_NE(d.find("convolution chain of 3"), std::string::npos) << d;
  EXPECT_NE(d.find("sum(input 0)"), std::string::npos) << d;
  EXPECT_NE(d.find("clip") == std::string::npos && d.find("relu") != std::string::npos, false) << d;
}

// ---- MaxPool and AveragePool ----

TEST(DnnlOps, PoolsMatchTheInterpreter) {
  const std::vector<Case> cases = {
      {Op::MaxPool, {{1, 16, 56, 56}}, {{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}}},
      {Op::MaxPool, {{2, 3, 9, 10}}, {{"kernel_shape", Ints{2, 3}}, {"ceil_mode", 1}, {"strides", Ints{2, 2}}}},
      {Op::MaxPool, {{1, 4, 11, 11}}, {{"kernel_shape", Ints{3, 3}}, {"dilations", Ints{2, 2}}, {"pads", Ints{2, 1, 0, 2}}}},
      {Op::MaxPool, {{1, 5, 13}}, {{"kernel_shape", Ints{4}}, {"auto_pad", "SAME_UPPER"}, {"strides", Ints{3}}}},
      {Op::MaxPool, {{1, 2, 5, 6, 7}}, {{"kernel_shape", Ints{2, 2, 3}}, {"strides", Ints{1, 2, 2}}}},
      {Op::AveragePool, {{1, 8, 14, 14}}, {{"kernel_shape", Ints{3, 3}}, {"pads", Ints{1, 1, 1, 1}}}},
      {Op::AveragePool, {{1, 8, 14, 14}}, {{"kernel_shape", Ints{3, 3}}, {"pads", Ints{1, 1, 1, 1}}, {"count_include_pad", 1}}},
      {Op::AveragePool, {{2, 3, 9, 10}}, {{"kernel_shape", Ints{3, 2}}, {"ceil_mode", 1}, {"strides", Ints{2, 2}}}},
      {Op::AveragePool, {{1, 3, 8, 7}}, {{"kernel_shape", Ints{2, 2}}, {"auto_pad", "SAME_LOWER"}}},
      {Op::AveragePool, {{1, 6, 7, 7}}, {{"kernel_shape", Ints{7, 7}}}},  // a global average by window
      {Op::AveragePool, {{1, 2, 6, 5, 4}}, {{"kernel_shape", Ints{2, 2, 2}}, {"pads", Ints{1, 0, 1, 1, 0, 0}}}},
  };
  for (const Case& c : cases)
    for (int poison = -1; poison < 3; ++poison) {  // none, -inf, NaN, +inf
      SCOPED_TRACE(std::string(op_name(c.op)) + " " + shape_str(c.shapes[0]) + " poison " + std::to_string(poison));
      std::vector<Tensor> in = random_inputs(c, 80);
      if (poison >= 0) {
        const float bad = poison == 0 ? -INFINITY : poison == 1 ? NAN : INFINITY;
        for (int64_t i = 0; i < in[0].numel(); i += 37) in[0].data<float>()[i] = bad;
      }
      auto prim = jit::make_dnnl_primitive(make_node(c.op, 1, c.attrs), c.shapes, {nullptr});
      EXPECT_EQ(prim->describe().find("no library call"), std::string::npos) << prim->describe();
      expect_close(run_primitive(c, in, {}), run1(c.op, in, c.attrs), "pool");
    }
}

// Zero-sized pools give the interpreter's answer (an empty result) without reaching oneDNN.
TEST(DnnlOps, ZeroSizedPoolsGiveTheInterpretersAnswer) {
  const std::vector<Case> cases = {
      {Op::MaxPool, {{0, 3, 8, 8}}, {{"kernel_shape", Ints{2, 2}}}},
      {Op::MaxPool, {{1, 0, 8, 8}}, {{"kernel_shape", Ints{2, 2}}}},
      {Op::AveragePool, {{0, 3, 8, 8}}, {{"kernel_shape", Ints{3, 3}}, {"pads", Ints{1, 1, 1, 1}}}},
      {Op::AveragePool, {{2, 0, 5}}, {{"kernel_shape", Ints{2}}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(op_name(c.op)) + " " + shape_str(c.shapes[0]));
    auto prim = jit::make_dnnl_primitive(make_node(c.op, 1, c.attrs), c.shapes, {nullptr});
    EXPECT_NE(prim->describe().find("no library call"), std::string::npos) << prim->describe();
    std::vector<Tensor> in = random_inputs(c, 81);
    expect_close(run_primitive(c, in, {}), run1(c.op, in, c.attrs), "empty pool");
  }
}

// What oneDNN cannot run as ONNX means it is refused with the node's name and the reason: an
// average that counts padding whose ceil_mode window passes the pads (oneDNN would count the
// extra padding), a window over padding only, and MaxPool's Indices output.
TEST(DnnlOps, PoolsOneDnnCannotMatchAreRefusedWithAReason) {
  Node avg = make_node(Op::AveragePool, 1,
                       {{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"ceil_mode", 1}, {"count_include_pad", 1}});
  Error e = error_of([&] { jit::make_dnnl_primitive(avg, {{1, 2, 8, 8}}, {nullptr}); });
  EXPECT_EQ(e.code(), ErrorCode::NotImplemented);
  EXPECT_NE(std::string(e.what()).find("node_under_test"), std::string::npos) << e.what();
  Node padded = make_node(Op::MaxPool, 1, {{"kernel_shape", Ints{2, 2}}, {"pads", Ints{3, 0, 0, 0}}});
  e = error_of([&] { jit::make_dnnl_primitive(padded, {{1, 2, 4, 4}}, {nullptr}); });
  EXPECT_NE(std::string(e.what()).find("padding only"), std::string::npos) << e.what();
  Node indices = make_node(Op::MaxPool, 1, {{"kernel_shape", Ints{2, 2}}});
  indices.outputs.push_back(2);
  EXPECT_NE(jit::dnnl_can_compile(indices, {DType::Float32}, {4}).find("Indices"), std::string::npos);
  EXPECT_EQ(jit::dnnl_can_compile(make_node(Op::AveragePool, 1, {}), {DType::Float32}, {4}), "");
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
