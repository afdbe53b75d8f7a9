// Sigmoid, Tanh, LeakyRelu, Elu, HardSwish and Gelu after a MatMul, Gemm, Conv (chain) or
// ConvTranspose join its tier-1 library region as oneDNN post-ops (jit/cpu/dnnl_activation.h), are
// validated against the interpreter with the region's allowance carried through their slope, and
// a wrong result is still caught. In the LibraryRegions suite, so that the ctests
// library_regions_on_AVX2 / _SSE41 run it on those instruction sets too.
#include <gtest/gtest.h>

#include <cstdlib>

#include "interp/compare.h"
#include "tests/support/graph_builder.h"
#include "tests/support/session_helpers.h"
#include "tiers/cpu/cpu_library.h"
#include "tiers/gpu/gpu_backend.h"
#include "tiers/session.h"

namespace terrace {
namespace {

using testing::GraphBuilder;
using testing::random_tensor;
using testing::on_tier;
using testing::occurrences;
using testing::expect_calls_match_and_regions_validated_on_tier1;
using testing::region_ops;
using testing::warm_up;
using testing::report_after_a_miscompiled_call;

#ifdef TERRACE_HAVE_DNNL

// x [1,4,8,8] -> Conv -> Sigmoid -> Conv -> LeakyRelu -> Conv -> Tanh (one chain) -> ConvTranspose
// -> Elu -> Flatten -> Gemm -> Gelu -> MatMul -> HardSwish -> Gemm -> Gelu(tanh).
std::shared_ptr<Graph> activations_model() {
  GraphBuilder g;
  int x = g.input("x", DType::Float32, {1, 4, 8, 8});
  auto conv = [&](int in, Shape w, uint64_t seed) {
    int wv = g.constant("w" + std::to_string(seed), random_tensor(w, seed, -0.4f, 0.4f));
    int bv = g.constant("b" + std::to_string(seed), random_tensor({w[0]}, seed + 100));
    return g.node(Op::Conv, {in, wv, bv}, {{"pads", GraphBuilder::attr_ints({1, 1, 1, 1})}});
  };
  int a = g.node(Op::Sigmoid, {conv(x, {8, 4, 3, 3}, 1)});
  int b = g.node(Op::LeakyRelu, {conv(a, {8, 8, 3, 3}, 2)}, {{"alpha", GraphBuilder::attr_float(0.1f)}});
  int c = g.node(Op::Tanh, {conv(b, {4, 8, 3, 3}, 3)});
  int wt = g.constant("wt", random_tensor({4, 2, 2, 2}, 4, -0.5f, 0.5f));
  int d = g.node(Op::Elu, {g.node(Op::ConvTranspose, {c, wt}, {{"strides", GraphBuilder::attr_ints({2, 2})}})},
                 {{"alpha", GraphBuilder::attr_float(0.5f)}});
  int flat = g.node(Op::Flatten, {d});  // [1, 2 * 16 * 16]
  int w1 = g.constant("g1", random_tensor({24, 512}, 5, -0.1f, 0.1f));
  int e = g.node(Op::Gelu, {g.node(Op::Gemm, {flat, w1}, {{"transB", GraphBuilder::attr_int(1)}})});
  int w2 = g.constant("g2", random_tensor({24, 16}, 6));
  int f = g.node(Op::HardSwish, {g.node(Op::MatMul, {e, w2})});
  int w3 = g.constant("g3", random_tensor({16, 5}, 7));
  Attribute tanh_form;
  tanh_form.kind = Attribute::Kind::String;
  tanh_form.s = "tanh";
  g.output(g.node(Op::Gelu, {g.node(Op::Gemm, {f, w3})}, {{"approximate", tanh_form}}));
  return g.build();
}

TEST(LibraryRegions, activations_after_library_ops_are_post_ops_validated_on_tier1) {
  auto g = activations_model();
  auto s = Session::from_graph(g, on_tier(Tier::Cpu));
  EXPECT_EQ(region_ops(*s), (std::vector<std::string>{"Conv,Sigmoid,Conv,LeakyRelu,Conv,Tanh", "ConvTranspose,Elu",
                                                      "Flatten", "Gemm,Gelu", "MatMul,HardSwish", "Gemm,Gelu"}));
  NamedTensors in = {{"x", random_tensor({1, 4, 8, 8}, 8, -2.0f, 2.0f)}};
  const NamedTensors want = Session::from_graph(g, on_tier(Tier::Interp))->run(in);
  warm_up(*s, in);
  expect_calls_match_and_regions_validated_on_tier1(*s, in, want, 6);
}

// EfficientNet's MBConv: 1x1 Conv, SiLU (Mul(x, Sigmoid(x)), as exporters write it), depthwise
// 3x3 Conv, SiLU, 1x1 Conv, the residual Add: one chain, each SiLU a swish post-op (EfficientNet-B0
// had 203 reorders a call with each SiLU ending a chain); validated, and a SiLU whose x has a third
// reader stays outside.
TEST(LibraryRegions, silu_after_a_convolution_is_a_swish_post_op_of_its_chain) {
  GraphBuilder g;
  int x = g.input("x", DType::Float32, {1, 8, 10, 10});
  auto conv = [&](int in, Shape w, uint64_t seed, int64_t group, bool pad) {
    int wv = g.constant("w" + std::to_string(seed), random_tensor(w, seed, -0.4f, 0.4f));
    int bv = g.constant("b" + std::to_string(seed), random_tensor({w[0]}, seed + 100));
    return g.node(Op::Conv, {in, wv, bv},
                  {{"pads", GraphBuilder::attr_ints(pad ? std::vector<int64_t>{1, 1, 1, 1} : std::vector<int64_t>{0, 0, 0, 0})},
                   {"group", GraphBuilder::attr_int(group)}});
  };
  auto silu = [&](int v) { return g.node(Op::Mul, {v, g.node(Op::Sigmoid, {v})}); };
  int a = silu(conv(x, {32, 8, 1, 1}, 1, 1, false));
  int b = silu(conv(a, {32, 1, 3, 3}, 2, 32, true));
  int c = g.node(Op::Add, {conv(b, {8, 32, 1, 1}, 3, 1, false), x});
  int d = conv(c, {8, 8, 1, 1}, 4, 1, false);
  int sd = g.node(Op::Sigmoid, {d});
  g.output(g.node(Op::Mul, {sd, d}));
  g.output(d);  // a third reader of d: that SiLU is left to the elementwise kernels
  auto graph = g.build();
  auto s = Session::from_graph(graph, on_tier(Tier::Cpu));
  EXPECT_EQ(region_ops(*s), (std::vector<std::string>{"Conv,Sigmoid,Mul,Conv,Sigmoid,Mul,Conv,Add,Conv", "Sigmoid,Mul"}));
  NamedTensors in = {{"x", random_tensor({1, 8, 10, 10}, 8, -2.0f, 2.0f)}};
  const NamedTensors want = Session::from_graph(graph, on_tier(Tier::Interp))->run(in);
  warm_up(*s, in);
  expect_calls_match_and_regions_validated_on_tier1(*s, in, want, 2);
}

// Two squeeze-and-excitation blocks as torchvision writes them (GlobalAveragePool, 1x1 Conv,
// Relu, 1x1 Conv, Sigmoid or HardSigmoid, then Mul(scale, x) or Mul(x, scale)) between convolutions:
// the Muls are Scale steps, so the whole stack is one chain in oneDNN's layouts (EfficientNet-B0
// was 35 regions, each SE Mul a generated kernel between two reorders); validated, and a
// miscompiled call is caught. A Mul by a per-pixel mask ([1, 1, H, W]) is no Scale and stays out.
std::shared_ptr<Graph> squeeze_excite_model(bool with_mask) {
  GraphBuilder g;
  int x = g.input("x", DType::Float32, {1, 8, 10, 10});
  auto conv = [&](int in, Shape w, uint64_t seed) {
    int wv = g.constant("w" + std::to_string(seed), random_tensor(w, seed, -0.4f, 0.4f));
    int bv = g.constant("b" + std::to_string(seed), random_tensor({w[0]}, seed + 100));
    return g.node(Op::Conv, {in, wv, bv});
  };
  auto excite = [&](int v, int64_t c, uint64_t seed, bool hard, bool scale_first) {
    int p = g.node(Op::GlobalAveragePool, {v});
    int r = g.node(Op::Relu, {conv(p, {4, c, 1, 1}, seed)});
    int e = conv(r, {c, 4, 1, 1}, seed + 1);
    int sc = hard ? g.node(Op::HardSigmoid, {e}, {{"alpha", GraphBuilder::attr_float(1.0f / 6)}})
                  : g.node(Op::Sigmoid, {e});
    return g.node(Op::Mul, scale_first ? std::vector<int>{sc, v} : std::vector<int>{v, sc});
  };
  int a = g.node(Op::Relu, {conv(excite(x, 8, 20, false, false), {16, 8, 1, 1}, 1)});  // x: a chain input
  int b = conv(excite(a, 16, 2, false, true), {8, 16, 1, 1}, 4);
  int c = g.node(Op::Relu, {conv(g.node(Op::Add, {b, x}), {16, 8, 1, 1}, 5)});
  int d = conv(excite(c, 16, 6, true, false), {8, 16, 1, 1}, 8);
  if (with_mask) d = g.node(Op::Mul, {d, g.constant("mask", random_tensor({1, 1, 10, 10}, 9))});
  g.output(d);
  return g.build();
}

TEST(LibraryRegions, squeeze_excite_blocks_are_scale_steps_of_one_chain) {
  for (bool with_mask : {false, true}) {
    auto graph = squeeze_excite_model(with_mask);
    auto s = Session::from_graph(graph, on_tier(Tier::Cpu));
    std::vector<std::string> want_regions = {
        "GlobalAveragePool",
        "Conv,Relu,Conv,Sigmoid,Mul,Conv,Relu,GlobalAveragePool,Conv,Relu,Conv,Sigmoid,Mul,Conv,Add,Conv,Relu,GlobalAveragePool,Conv,Relu,Conv,"
        "HardSigmoid,Mul,Conv"};
    if (with_mask) want_regions.push_back("Mul");
    EXPECT_EQ(region_ops(*s), want_regions);
    NamedTensors in = {{"x", random_tensor({1, 8, 10, 10}, 10, -2.0f, 2.0f)}};
    const NamedTensors want = Session::from_graph(graph, on_tier(Tier::Interp))->run(in);
    warm_up(*s, in);
    expect_calls_match_and_regions_validated_on_tier1(*s, in, want, want_regions.size());
  }
  const std::string json = report_after_a_miscompiled_call(squeeze_excite_model(false), {{"x", random_tensor({1, 8, 10, 10}, 11)}});
  EXPECT_EQ(occurrences(json, "\"validation\":\"failed: output"), 2u) << json;
  EXPECT_EQ(occurrences(json, "\"tier\":\"cpu\""), 0u) << json;
}

// YOLOv8's detect head: one Conv + SiLU read by three Convs, each with its SiLU. The partition
// takes each branch's Sigmoid right after its Conv (not a sibling Conv first), so the chain's
// post-ops follow their producers; before, such regions failed to compile ("reads op 5's result,
// which is no step's last") and stayed on the interpreter.
TEST(LibraryRegions, sibling_convolutions_each_with_a_silu_form_one_chain) {
  GraphBuilder g;
  int x = g.input("x", DType::Float32, {1, 8, 6, 6});
  auto conv = [&](int in, Shape w, uint64_t seed) {
    int wv = g.constant("w" + std::to_string(seed), random_tensor(w, seed, -0.4f, 0.4f));
    int bv = g.constant("b" + std::to_string(seed), random_tensor({w[0]}, seed + 100));
    return g.node(Op::Conv, {in, wv, bv}, {{"pads", GraphBuilder::attr_ints({1, 1, 1, 1})}});
  };
  auto silu = [&](int v) { return g.node(Op::Mul, {v, g.node(Op::Sigmoid, {v})}); };
  int a = silu(conv(x, {8, 8, 3, 3}, 1));
  std::vector<int> branches;  // in the exporter's order: the three Convs, then their SiLUs
  for (uint64_t seed : {2, 3, 4}) branches.push_back(conv(a, {4, 8, 3, 3}, seed));
  for (int v : branches) g.output(silu(v));
  auto graph = g.build();
  auto s = Session::from_graph(graph, on_tier(Tier::Cpu));
  ASSERT_EQ(region_ops(*s).size(), 1u);
  NamedTensors in = {{"x", random_tensor({1, 8, 6, 6}, 8, -2.0f, 2.0f)}};
  const NamedTensors want = Session::from_graph(graph, on_tier(Tier::Interp))->run(in);
  warm_up(*s, in);
  expect_calls_match_and_regions_validated_on_tier1(*s, in, want, 1);
}

TEST(LibraryRegions, miscompiled_region_with_a_fused_activation_is_caught) {
  const std::string json =
      report_after_a_miscompiled_call(activations_model(), {{"x", random_tensor({1, 4, 8, 8}, 9)}});
  EXPECT_EQ(occurrences(json, "\"validation\":\"failed: output"), 6u) << json;
  EXPECT_EQ(occurrences(json, "\"tier\":\"cpu\""), 0u) << json;
}

// (1e8 + 1) - 1e8 is 0 in float32 and 1 in double; after a Sigmoid 0.5 against 0.73. The
// product's allowance (gamma_K times the sum of |products|), carried through the Sigmoid's slope
// 1/4, covers it: the region validates (without the slope it would be demoted).
TEST(LibraryRegions, cancelling_product_before_a_sigmoid_passes_within_its_carried_bound) {
  GraphBuilder gb;
  int a = gb.input("a", DType::Float32, {2, 3});
  int b = gb.constant("b", Tensor::from_vector<float>({3, 1}, {1, 1, 1}));
  gb.output(gb.node(Op::Sigmoid, {gb.node(Op::MatMul, {a, b})}));
  auto g = gb.build();
  auto s = Session::from_graph(g, on_tier(Tier::Cpu));
  EXPECT_EQ(region_ops(*s), (std::vector<std::string>{"MatMul,Sigmoid"}));
  NamedTensors in = {{"a", Tensor::from_vector<float>({2, 3}, {1e8f, 1.0f, -1e8f, 0.5f, 0.25f, 2.0f})}};
  warm_up(*s, in);
  for (int call = 0; call < 3; ++call) s->run(in);
  const std::string json = s->report_json();
  EXPECT_EQ(occurrences(json, "\"tier\":\"cpu\""), 1u) << json;
  EXPECT_EQ(occurrences(json, "\"validation\":\"passed\""), 1u) << json;
}

// A session with tier 2 partitions without the activations tier 2's epilogues lack and without a
// MatMul's bias Add (tier 2's Backend::fuses, gpu_fuses), so that a MatMul then Tanh
// stays two GPU regions.
TEST(LibraryRegions, tier2_fuses_relu_and_clip_but_not_the_other_activations) {
  auto node = [](Op op) {
    Node n;
    n.op = op;
    return n;
  };
  for (Op last : {Op::MatMul, Op::Conv}) {
    for (Op op : {Op::Relu, Op::Clip, Op::Conv})
      EXPECT_TRUE(gpu_fuses(node(last), node(op))) << op_name(last) << ", " << op_name(op);
    for (Op op : {Op::Sigmoid, Op::Tanh, Op::LeakyRelu, Op::Elu, Op::HardSwish, Op::Gelu})
      EXPECT_FALSE(gpu_fuses(node(last), node(op))) << op_name(last) << ", " << op_name(op);
  }
  EXPECT_TRUE(gpu_fuses(node(Op::Conv), node(Op::Add)));  // a residual: tier 2's conv epilogue
  EXPECT_FALSE(gpu_fuses(node(Op::MatMul), node(Op::Add)));  // a bias: cuBLASLt's path takes none
}

// Options::plan_for partitions as a session with tier 2 does, without a GPU (terrace compile
// --tier gpu): the Tanh after a MatMul is a region of its own there, fused on tier 1 alone.
TEST(LibraryRegions, planning_for_the_gpu_leaves_the_activations_tier2_lacks_out_of_the_product) {
  GraphBuilder g;
  int x = g.input("x", DType::Float32, {4, 8});
  g.output(g.node(Op::Tanh, {g.node(Op::MatMul, {x, g.constant("w", random_tensor({8, 8}, 3))})}));
  auto graph = g.build();
  Options cpu = on_tier(Tier::Cpu);
  EXPECT_EQ(region_ops(*Session::from_graph(graph, cpu)), (std::vector<std::string>{"MatMul,Tanh"}));
  cpu.plan_for = Tier::Gpu;
  EXPECT_EQ(region_ops(*Session::from_graph(graph, cpu)), (std::vector<std::string>{"MatMul", "Tanh"}));
}

// A Linear layer as exporters write it, MatMul then Add of a constant bias (then an activation):
// one tier-1 region, the bias added inside oneDNN's matmul, validated; batched ([2,3,8] x [8,6])
// and with a [1,6] bias too. A bias that is not one value per column (a [3,6] addend, a graph
// input) stays out of the product's region.
TEST(LibraryRegions, a_matmuls_constant_bias_add_and_activation_join_its_region) {
  GraphBuilder g;
  int x = g.input("x", DType::Float32, {2, 3, 8});
  int h = g.node(Op::Add, {g.node(Op::MatMul, {x, g.constant("w1", random_tensor({8, 6}, 11))}),
                           g.constant("b1", random_tensor({6}, 12))});
  int y = g.node(Op::Gelu, {g.node(Op::Add, {g.constant("b2", random_tensor({1, 6}, 14)),
                                             g.node(Op::MatMul, {h, g.constant("w2", random_tensor({6, 6}, 13))})})});
  int full = g.node(Op::Add, {g.node(Op::MatMul, {y, g.constant("w3", random_tensor({6, 6}, 15))}),
                              g.constant("b3", random_tensor({3, 6}, 16))});
  int z = g.input("z", DType::Float32, {6});
  g.output(g.node(Op::Add, {g.node(Op::MatMul, {full, g.constant("w4", random_tensor({6, 6}, 17))}), z}));
  auto graph = g.build();
  auto s = Session::from_graph(graph, on_tier(Tier::Cpu));
  EXPECT_EQ(region_ops(*s), (std::vector<std::string>{"MatMul,Add", "MatMul,Add,Gelu", "MatMul", "Add", "MatMul", "Add"}));
  NamedTensors in = {{"x", random_tensor({2, 3, 8}, 18, -2.0f, 2.0f)}, {"z", random_tensor({6}, 19)}};
  const NamedTensors want = Session::from_graph(graph, on_tier(Tier::Interp))->run(in);
  warm_up(*s, in);
  expect_calls_match_and_regions_validated_on_tier1(*s, in, want, 6);
  // With tier 2 in the plan the bias stays out (tier 2 runs a MatMul alone or with a Relu).
  Options gpu = on_tier(Tier::Cpu);
  gpu.plan_for = Tier::Gpu;
  EXPECT_EQ(region_ops(*Session::from_graph(graph, gpu))[0], "MatMul");
}

// The fused bias on an empty batch: no library call, the output empty; and the bias of a
// miscompiled region is caught like any other result.
TEST(LibraryRegions, a_fused_bias_on_an_empty_batch_and_a_miscompiled_biased_product) {
  GraphBuilder g;
  int x = g.input("x", DType::Float32, {-1, 8});
  g.output(g.node(Op::Relu, {g.node(Op::Add, {g.node(Op::MatMul, {x, g.constant("w", random_tensor({8, 4}, 21))}),
                                               g.constant("b", random_tensor({4}, 22))})}));
  auto graph = g.build();
  auto s = Session::from_graph(graph, on_tier(Tier::Cpu));
  ASSERT_EQ(region_ops(*s), (std::vector<std::string>{"MatMul,Add,Relu"}));
  NamedTensors empty = {{"x", Tensor::empty(DType::Float32, {0, 8})}};
  warm_up(*s, empty);
  NamedTensors out = s->run(empty);
  EXPECT_EQ(out[0].second.shape(), (Shape{0, 4}));
  const std::string json = report_after_a_miscompiled_call(graph, {{"x", random_tensor({3, 8}, 23)}});
  EXPECT_EQ(occurrences(json, "\"validation\":\"failed: output"), 1u) << json;
}

#endif  // TERRACE_HAVE_DNNL

}  // namespace
}  // namespace terrace
