// Reductions and normalisations in tier 1's regions (kernels/lower_reduce.cpp through the mixed
// regions of tiers/cpu/cpu_backend.cpp): small graphs whose reductions sit between elementwise ops run
// through a Session, compile into one region with no graph break, and give the interpreter's
// answers call after call.
#include <gtest/gtest.h>

#include "interp/compare.h"
#include "tests/support/graph_builder.h"
#include "tiers/session.h"
#include "tiers/tier_manager.h"

namespace terrace {
namespace {

using testing::GraphBuilder;
using testing::random_tensor;

NamedTensors reference(const std::shared_ptr<Graph>& g, const NamedTensors& in) {
  Options o;
  o.max_tier = Tier::Interp;
  return Session::from_graph(g, o)->run(in);
}

// Runs `g` on tier 1 until its regions are compiled; the graph must be one region, the last call
// must have run on tier 1, and every call must match the interpreter.
void expect_one_compiled_region(const std::shared_ptr<Graph>& g, const NamedTensors& in, const std::string& what) {
  SCOPED_TRACE(what);
  Options o;
  o.max_tier = Tier::Cpu;
  auto s = Session::from_graph(g, o);
  std::string breaks;
  for (const Step& st : s->plan().steps)
    if (st.region < 0) breaks += st.reason + "; ";
  EXPECT_EQ(breaks, "") << "graph breaks";
  EXPECT_EQ(s->plan().regions.size(), 1u);
  NamedTensors want = reference(g, in);
  for (int call = 0; call < 5; ++call) {
    NamedTensors got = s->run(in);
    s->wait_for_compiles();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      Comparison c = compare_tensors(want[i].second, got[i].second, Tolerance::for_dtype(want[i].second.dtype()));
      EXPECT_TRUE(c.equal) << "call " << call << ", " << got[i].first << ": " << c.message;
    }
  }
  bool on_cpu = false;
  for (const std::string& t : s->last_call().tiers) on_cpu = on_cpu || t == "cpu";
  EXPECT_TRUE(on_cpu) << s->report();
  for (const RegionReport& r : s->region_reports()) {
    EXPECT_EQ(r.tier, Tier::Cpu) << r.ops << ": " << r.state;
    EXPECT_EQ(r.validation.rfind("passed", 0), 0u) << r.ops << ": " << r.validation;
  }
}

// Attention scores: softmax(q * scale + mask) over the last axis, then a residual-style Add.
TEST(ReduceRegions, scaled_masked_softmax_compiles_with_its_elementwise_neighbours) {
  GraphBuilder b;
  int q = b.input("q", DType::Float32, {2, 4, 16, 16});
  int mask = b.input("mask", DType::Float32, {16, 16});
  int scale = b.constant("scale", Tensor::scalar<float>(0.125f));
  int sm = b.node(Op::Softmax, {b.node(Op::Add, {b.node(Op::Mul, {q, scale}), mask})}, {{"axis", GraphBuilder::attr_int(-1)}});
  b.output(b.node(Op::Mul, {sm, sm}));
  expect_one_compiled_region(b.build(), {{"q", random_tensor({2, 4, 16, 16}, 1, -8, 8)}, {"mask", random_tensor({16, 16}, 2)}},
                             "Mul, Add, Softmax, Mul");
}

// A transformer block's tail: LayerNormalization(x + r) with scale and bias, then + x again.
TEST(ReduceRegions, layernorm_between_residual_adds_compiles_into_one_region) {
  GraphBuilder b;
  int x = b.input("x", DType::Float32, {3, 10, 64});
  int r = b.input("r", DType::Float32, {3, 10, 64});
  int sum = b.node(Op::Add, {x, r});
  int ln = b.node(Op::LayerNormalization,
                  {sum, b.constant("gamma", random_tensor({64}, 3, 0.5, 1.5)), b.constant("beta", random_tensor({64}, 4))},
                  {{"axis", GraphBuilder::attr_int(-1)}, {"epsilon", GraphBuilder::attr_float(1e-5f)}});
  b.output(b.node(Op::Add, {ln, x}));
  expect_one_compiled_region(b.build(), {{"x", random_tensor({3, 10, 64}, 5, -3, 3)}, {"r", random_tensor({3, 10, 64}, 6)}},
                             "Add, LayerNormalization, Add");
}

// x - mean(x) over the channels (an outer axis), squared and summed over the rows.
TEST(ReduceRegions, reductions_over_inner_and_outer_axes_feed_elementwise_ops) {
  GraphBuilder b;
  int x = b.input("x", DType::Float32, {4, 8, 33});
  int mean = b.node(Op::ReduceMean, {x}, {{"axes", GraphBuilder::attr_ints({1})}, {"keepdims", GraphBuilder::attr_int(1)}});
  int centred = b.node(Op::Sub, {x, mean});
  int sq = b.node(Op::Mul, {centred, centred});
  b.output(b.node(Op::ReduceSum, {sq, b.constant("axes", Tensor::from_vector<int64_t>({1}, {-1}))},
                  {{"keepdims", GraphBuilder::attr_int(0)}}));
  b.output(b.node(Op::ReduceMax, {centred}, {{"axes", GraphBuilder::attr_ints({0, 2})}}));
  b.output(b.node(Op::ArgMax, {x}, {{"axis", GraphBuilder::attr_int(2)}}, 1, DType::Int64));
  expect_one_compiled_region(b.build(), {{"x", random_tensor({4, 8, 33}, 7, -5, 5)}}, "ReduceMean, Sub, Mul, ReduceSum, ReduceMax, ArgMax");
}

// A CNN's head: GlobalAveragePool after a Relu, then LogSoftmax over the classes.
TEST(ReduceRegions, global_pool_and_log_softmax_head_compiles) {
  GraphBuilder b;
  int x = b.input("x", DType::Float32, {2, 32, 7, 7});
  int gap = b.node(Op::GlobalAveragePool, {b.node(Op::Relu, {x})});
  int gmp = b.node(Op::GlobalMaxPool, {x});
  b.output(b.node(Op::LogSoftmax, {b.node(Op::Add, {gap, gmp})}, {{"axis", GraphBuilder::attr_int(1)}}));
  expect_one_compiled_region(b.build(), {{"x", random_tensor({2, 32, 7, 7}, 8, -2, 2)}}, "Relu, GlobalAveragePool, GlobalMaxPool, Add, LogSoftmax");
}

// Before opset 13, Softmax, LogSoftmax and Hardmax take every dim from `axis` on as one lane (the
// 2-D view): tier 1 compiles that form too, default axis 1 of a rank-4 input included.
TEST(ReduceRegions, opset_11_softmax_family_over_flattened_trailing_dims_compiles) {
  GraphBuilder b;
  int x = b.input("x", DType::Float32, {2, 3, 4, 5});
  int sm = b.node(Op::Softmax, {x});
  int lsm = b.node(Op::LogSoftmax, {b.node(Op::Relu, {x})}, {{"axis", GraphBuilder::attr_int(2)}});
  int hm = b.node(Op::Hardmax, {x}, {{"axis", GraphBuilder::attr_int(-2)}});
  b.output(b.node(Op::Add, {b.node(Op::Add, {sm, lsm}), hm}));
  auto g = b.build();
  g->opset = 11;
  expect_one_compiled_region(g, {{"x", random_tensor({2, 3, 4, 5}, 10, -3, 3)}}, "opset 11 Softmax, LogSoftmax, Hardmax");
}

// Axes computed in the graph (a Constant node, or arithmetic on Shape) are known at compile time.
TEST(ReduceRegions, axes_computed_from_constants_and_shapes_compile) {
  GraphBuilder b;
  int x = b.input("x", DType::Float32, {4, 6, 5});
  Attribute value;
  value.kind = Attribute::Kind::Tensor;
  value.t = Tensor::from_vector<int64_t>({1}, {1});
  int axes = b.node(Op::Constant, {}, {{"value", value}}, 1, DType::Int64);
  int rank_minus_one = b.node(Op::Sub, {b.node(Op::Size, {b.node(Op::Shape, {x}, {}, 1, DType::Int64)}, {}, 1, DType::Int64),
                                        b.constant("one", Tensor::scalar<int64_t>(1))});
  int last = b.node(Op::Unsqueeze, {rank_minus_one, b.constant("zero", Tensor::from_vector<int64_t>({1}, {0}))}, {}, 1, DType::Int64);
  int mid = b.node(Op::ReduceSum, {x, axes}, {{"keepdims", GraphBuilder::attr_int(1)}});
  b.output(b.node(Op::ReduceMax, {b.node(Op::Mul, {mid, x}), last}, {{"keepdims", GraphBuilder::attr_int(0)}}));
  auto g = b.build();
  g->opset = 18;  // every Reduce op takes axes as an input
  expect_one_compiled_region(g, {{"x", random_tensor({4, 6, 5}, 9, -3, 3)}}, "ReduceSum(axes Constant), ReduceMax(axes from Shape)");
}

// A reduction whose axes arrive at run time stays on the interpreter, with the reason.
TEST(ReduceRegions, runtime_axes_are_a_graph_break_with_a_reason) {
  GraphBuilder b;
  int x = b.input("x", DType::Float32, {4, 5});
  int axes = b.input("axes", DType::Int64, {1});
  b.output(b.node(Op::ReduceSum, {x, axes}));
  Options o;
  o.max_tier = Tier::Cpu;
  auto s = Session::from_graph(b.build(), o);
  std::string reasons;
  for (const Step& st : s->plan().steps)
    if (st.region < 0) reasons += st.reason;
  EXPECT_NE(reasons.find("axes computed at run time"), std::string::npos) << reasons;
}

}  // namespace
}  // namespace terrace
