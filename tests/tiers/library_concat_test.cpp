// A Concat or Split along channels between convolutions is a step of their chain (YOLO's C2f
// block: Conv, Split, a bottleneck whose residual Add follows a SiLU, Concat, Conv), so the chain
// runs on in oneDNN's layouts instead of ending at each of them; its answer is the interpreter's,
// and a wrong one is caught. In the LibraryRegions suite, so that the ctests
// library_regions_on_AVX2 / _SSE41 run it on those instruction sets too.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>

#include "interp/compare.h"

#include "tests/support/graph_builder.h"
#include "tests/support/session_helpers.h"
#include "tiers/session.h"

namespace terrace {
namespace {

using testing::GraphBuilder;
using testing::expect_calls_match_and_regions_validated_on_tier1;
using testing::occurrences;
using testing::on_tier;
using testing::random_tensor;
using testing::region_ops;
using testing::report_after_a_miscompiled_call;
using testing::warm_up;

#ifdef TERRACE_HAVE_DNNL

const Shape kInput = {2, 8, 10, 10};  // two images: a copy's runs repeat per image

// x -> Conv, SiLU -> Split [8, 8] -> (second half) Conv, SiLU, Conv, SiLU, Add of the second half
// -> Concat(first half, second half, Add) -> Conv, SiLU -> Split [4, 12] (not on 8-channel blocks)
// -> Concat(Conv of the 12, the 4, x: a chain input) -> Conv.
std::shared_ptr<Graph> c2f_model() {
  GraphBuilder g;
  int x = g.input("x", DType::Float32, kInput);
  auto conv = [&](int in, Shape w, uint64_t seed) {
    int wv = g.constant("w" + std::to_string(seed), random_tensor(w, seed, -0.4f, 0.4f));
    int bv = g.constant("b" + std::to_string(seed), random_tensor({w[0]}, seed + 100));
    const int64_t pad = w[2] / 2;
    return g.node(Op::Conv, {in, wv, bv}, {{"pads", GraphBuilder::attr_ints({pad, pad, pad, pad})}});
  };
  auto silu = [&](int v) { return g.node(Op::Mul, {v, g.node(Op::Sigmoid, {v})}); };
  auto split = [&](int v, std::vector<int64_t> sizes, const std::string& name) {
    int s = g.constant(name, Tensor::from_vector<int64_t>({int64_t(sizes.size())}, sizes));
    int first = g.node(Op::Split, {v, s}, {{"axis", GraphBuilder::attr_int(1)}}, 2);
    return std::pair{first, first + 1};  // the builder numbers a node's outputs in order
  };
  auto concat = [&](std::vector<int> parts) { return g.node(Op::Concat, parts, {{"axis", GraphBuilder::attr_int(1)}}); };
  auto [s0, s1] = split(silu(conv(x, {16, 8, 1, 1}, 1)), {8, 8}, "halves");
  int r = g.node(Op::Add, {s1, silu(conv(silu(conv(s1, {8, 8, 3, 3}, 2)), {8, 8, 3, 3}, 3))});
  int d = silu(conv(concat({s0, s1, r}), {16, 24, 1, 1}, 4));
  auto [t0, t1] = split(d, {4, 12}, "uneven");
  g.output(conv(concat({conv(t1, {4, 12, 3, 3}, 5), t0, x}), {8, 16, 1, 1}, 6));
  return g.build();
}

TEST(LibraryRegions, a_channel_concat_and_split_between_convolutions_stay_in_one_chain) {
  auto graph = c2f_model();
  auto s = Session::from_graph(graph, on_tier(Tier::Cpu));
  EXPECT_EQ(region_ops(*s), (std::vector<std::string>{
                                "Conv,Sigmoid,Mul,Split,Conv,Sigmoid,Mul,Conv,Sigmoid,Mul,Add,Concat,Conv,Sigmoid,Mul,Split,"
                                "Conv,Concat,Conv"}));
  NamedTensors in = {{"x", random_tensor(kInput, 7, -2.0f, 2.0f)}};
  const NamedTensors want = Session::from_graph(graph, on_tier(Tier::Interp))->run(in);
  warm_up(*s, in);
  expect_calls_match_and_regions_validated_on_tier1(*s, in, want, 1);
}

// An input that is not finite sends the chain to its reference path (its fused activations would
// treat it unlike the interpreter): there the Concat and the Slices are the interpreter's too.
TEST(LibraryRegions, a_chain_through_a_concat_meets_infinities_as_the_interpreter) {
  auto graph = c2f_model();
  auto s = Session::from_graph(graph, on_tier(Tier::Cpu));
  warm_up(*s, {{"x", random_tensor(kInput, 7, -2.0f, 2.0f)}});
  Tensor x = random_tensor(kInput, 12, -2.0f, 2.0f);
  x.data<float>()[3] = std::numeric_limits<float>::infinity();     // image 0, channel 0
  x.data<float>()[900] = -std::numeric_limits<float>::infinity();  // image 1, channel 1
  const NamedTensors in = {{"x", x}};
  const NamedTensors want = Session::from_graph(graph, on_tier(Tier::Interp))->run(in);
  const NamedTensors got = s->run(in);
  ASSERT_EQ(got.size(), 1u);
  Comparison c = compare_tensors(want[0].second, got[0].second, Tolerance::for_dtype(DType::Float32));
  EXPECT_TRUE(c.equal) << c.message;
  const std::vector<std::string> tiers = s->last_call().tiers;
  EXPECT_NE(std::find(tiers.begin(), tiers.end(), "cpu"), tiers.end());  // the chain's own reference path
}

// The region's allowance follows each value through the copies exactly, so a wrong result of the
// chain is caught (its version fails validation, the caller gets the interpreter's answer).
TEST(LibraryRegions, a_miscompiled_chain_through_a_concat_is_caught) {
  const std::string json = report_after_a_miscompiled_call(c2f_model(), {{"x", random_tensor(kInput, 8)}});
  EXPECT_EQ(occurrences(json, "\"validation\":\"failed: output"), 1u) << json;
  EXPECT_EQ(occurrences(json, "\"tier\":\"cpu\""), 0u) << json;
}

// A Concat along another axis, or of values of rank 3, is no chain step: the chain ends before it.
TEST(LibraryRegions, a_concat_along_another_axis_ends_the_chain) {
  GraphBuilder g;
  int x = g.input("x", DType::Float32, kInput);
  int w = g.constant("w", random_tensor({8, 8, 1, 1}, 3, -0.4f, 0.4f));
  int a = g.node(Op::Conv, {x, w});
  g.output(g.node(Op::Concat, {a, x}, {{"axis", GraphBuilder::attr_int(2)}}));
  auto graph = g.build();
  auto s = Session::from_graph(graph, on_tier(Tier::Cpu));
  EXPECT_EQ(region_ops(*s), (std::vector<std::string>{"Conv", "Concat"}));
  NamedTensors in = {{"x", random_tensor(kInput, 9)}};
  const NamedTensors want = Session::from_graph(graph, on_tier(Tier::Interp))->run(in);
  warm_up(*s, in);
  expect_calls_match_and_regions_validated_on_tier1(*s, in, want, 2);
}

// Tier 2's chains are cuDNN convolutions with their epilogues: a session planned for tier 2 ends
// the chain at a channel Concat, as before it joined tier 1's.
TEST(LibraryRegions, planned_for_tier2_a_concat_ends_the_chain) {
  GraphBuilder g;
  int x = g.input("x", DType::Float32, kInput);
  int w = g.constant("w", random_tensor({8, 8, 1, 1}, 3, -0.4f, 0.4f));
  int r = g.node(Op::Relu, {g.node(Op::Conv, {x, w})});
  int w2 = g.constant("w2", random_tensor({8, 16, 1, 1}, 4, -0.4f, 0.4f));
  g.output(g.node(Op::Conv, {g.node(Op::Concat, {r, x}, {{"axis", GraphBuilder::attr_int(1)}}), w2}));
  auto graph = g.build();
  EXPECT_EQ(region_ops(*Session::from_graph(graph, on_tier(Tier::Cpu))),
            (std::vector<std::string>{"Conv,Relu,Concat,Conv"}));
  Options gpu = on_tier(Tier::Cpu);
  gpu.plan_for = Tier::Gpu;
  for (const std::string& ops : region_ops(*Session::from_graph(graph, gpu)))
    EXPECT_EQ(ops.find("Relu,Concat"), std::string::npos) << ops;
}

#else
TEST(LibraryRegions, ConcatSkipped) { GTEST_SKIP() << "built without oneDNN"; }
#endif

}  // namespace
}  // namespace terrace
