// tiers/region_lowering: what one region becomes for the compiled tiers, and that fusing
// elementwise producers and consumers into a reduction gives the interpreter's answer.
#include <gtest/gtest.h>

#include "interp/compare.h"
#include "tests/support/graph_builder.h"
#include "tiers/region_lowering.h"
#include "tiers/session.h"
#include "tiers/tier_manager.h"

namespace terrace {
namespace {

using testing::GraphBuilder;
using testing::random_tensor;

// z = softmax(x * 0.125 + mask) * 2 (and, with `expose`, the softmax itself as an output too).
std::shared_ptr<Graph> scaled_softmax(bool expose) {
  GraphBuilder g;
  int x = g.input("x", DType::Float32, {2, 4, 16, 16});
  int mask = g.input("mask", DType::Float32, {1, 1, 16, 16});
  int scaled = g.node(Op::Add, {g.node(Op::Mul, {x, g.constant("scale", Tensor::scalar<float>(0.125f))}), mask});
  int y = g.node(Op::Softmax, {scaled}, {{"axis", GraphBuilder::attr_int(-1)}});
  g.output(g.node(Op::Mul, {y, g.constant("two", Tensor::scalar<float>(2.0f))}));
  if (expose) g.output(y);
  return g.build();
}

NamedTensors softmax_inputs() {
  return {{"x", random_tensor({2, 4, 16, 16}, 1, -4, 4)}, {"mask", random_tensor({1, 1, 16, 16}, 2, -2, 0)}};
}

// The region's inputs for a call: the graph inputs it reads, and the initializers.
std::vector<Tensor> region_inputs(const Graph& g, const Region& r, const NamedTensors& in) {
  std::vector<Tensor> out;
  for (int v : r.inputs) {
    if (auto init = g.initializers.find(v); init != g.initializers.end()) {
      out.push_back(init->second);
      continue;
    }
    for (const auto& [name, t] : in)
      if (g.values[size_t(v)].name == name) out.push_back(t);
  }
  EXPECT_EQ(out.size(), r.inputs.size());
  return out;
}

TEST(RegionLowering, elementwise_producers_and_consumers_fuse_into_the_softmax_kernels) {
  for (bool expose : {false, true}) {
    auto g = scaled_softmax(expose);
    Options o;
    o.max_tier = Tier::Cpu;
    auto s = Session::from_graph(g, o);
    ASSERT_EQ(s->plan().regions.size(), 1u);
    const Region& r = s->plan().regions[0];
    LoweredRegion lowered = lower_region(*g, r, region_inputs(*g, r, softmax_inputs()));
    size_t elementwise_kernels = 0;  // kernels of fused elementwise groups alone (no op node)
    for (const LoweredStep& step : lowered.steps) elementwise_kernels += step.node.empty() ? 1 : 0;
    if (!expose) EXPECT_EQ(elementwise_kernels, 0u) << "the Mul/Add before and the Mul after run inside the softmax";
    else EXPECT_EQ(elementwise_kernels, 1u) << "the softmax is read twice: the Mul after it is a kernel of its own";
    // Through a session: compiled, validated against the interpreter, and its answer.
    Options interp;
    interp.max_tier = Tier::Interp;
    NamedTensors want = Session::from_graph(g, interp)->run(softmax_inputs());
    for (int i = 0; i < 5; ++i) {
      NamedTensors got = s->run(softmax_inputs());
      s->wait_for_compiles();
      for (size_t j = 0; j < got.size(); ++j) {
        Comparison c = compare_tensors(want[j].second, got[j].second, Tolerance::for_dtype(DType::Float32));
        EXPECT_TRUE(c.equal) << c.message;
      }
    }
    EXPECT_EQ(s->last_call().tiers, std::vector<std::string>{"cpu"});
    EXPECT_EQ(s->region_reports().at(0).validation, "passed");
  }
}

// LayerNormalization(x + r) + x: the residual add before it is its prologue, the one after its epilogue.
TEST(RegionLowering, a_layernorm_between_residual_adds_is_one_op_with_no_elementwise_kernel) {
  GraphBuilder b;
  int x = b.input("x", DType::Float32, {4, 8, 32});
  int r = b.input("r", DType::Float32, {4, 8, 32});
  int ln = b.node(Op::LayerNormalization, {b.node(Op::Add, {x, r}), b.constant("gamma", random_tensor({32}, 3)),
                                           b.constant("beta", random_tensor({32}, 4))},
                  {{"axis", GraphBuilder::attr_int(-1)}});
  b.output(b.node(Op::Add, {ln, x}));
  auto g = b.build();
  Options o;
  o.max_tier = Tier::Cpu;
  auto s = Session::from_graph(g, o);
  ASSERT_EQ(s->plan().regions.size(), 1u);
  NamedTensors in{{"x", random_tensor({4, 8, 32}, 5)}, {"r", random_tensor({4, 8, 32}, 6)}};
  LoweredRegion lowered = lower_region(*g, s->plan().regions[0], region_inputs(*g, s->plan().regions[0], in));
  for (const LoweredStep& step : lowered.steps) EXPECT_FALSE(step.node.empty()) << "an elementwise kernel was left";
  Options interp;
  interp.max_tier = Tier::Interp;
  NamedTensors want = Session::from_graph(g, interp)->run(in);
  for (int i = 0; i < 5; ++i) {
    NamedTensors got = s->run(in);
    s->wait_for_compiles();
    Comparison c = compare_tensors(want[0].second, got[0].second, Tolerance::for_dtype(DType::Float32));
    EXPECT_TRUE(c.equal) << c.message;
  }
  EXPECT_EQ(s->last_call().tiers, std::vector<std::string>{"cpu"});
}

// A region output that is a Reshape of a value computed in the region is returned as a view of
// that value's buffer (as the interpreter's Reshape is), with no copy.
TEST(RegionLowering, a_reshaped_region_output_is_a_view_not_a_copy) {
  GraphBuilder b;
  int x = b.input("x", DType::Float32, {4, 6});
  int shape = b.constant("shape", Tensor::from_vector<int64_t>({1}, {24}));
  b.output(b.node(Op::Reshape, {b.node(Op::Relu, {x}), shape}));
  auto g = b.build();
  Options o;
  o.max_tier = Tier::Cpu;
  o.optimize = OptimizeLevel::None;
  auto s = Session::from_graph(g, o);
  ASSERT_EQ(s->plan().regions.size(), 1u);
  NamedTensors in{{"x", random_tensor({4, 6}, 7)}};
  LoweredRegion lowered = lower_region(*g, s->plan().regions[0], region_inputs(*g, s->plan().regions[0], in));
  const size_t out_slot = s->plan().regions[0].inputs.size();
  EXPECT_GE(lowered.alias.at(out_slot), 0) << "the output views the Relu's buffer";
  for (const LoweredStep& step : lowered.steps) EXPECT_EQ(step.kind, LoweredStep::Kind::Kernel);
  Options interp;
  interp.max_tier = Tier::Interp;
  NamedTensors want = Session::from_graph(g, interp)->run(in);
  for (int i = 0; i < 5; ++i) {
    NamedTensors got = s->run(in);
    s->wait_for_compiles();
    ASSERT_EQ(got[0].second.shape(), Shape{24});
    EXPECT_TRUE(compare_tensors(want[0].second, got[0].second, Tolerance::for_dtype(DType::Float32)).equal);
  }
  EXPECT_EQ(s->last_call().tiers, std::vector<std::string>{"cpu"});
}

}  // namespace
}  // namespace terrace
