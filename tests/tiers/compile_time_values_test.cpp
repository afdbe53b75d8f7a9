// Values tier 1 knows when it compiles a region for an input signature: shape arithmetic
// (Shape, Gather, Concat, ...) is evaluated at compile time, so a Reshape whose target shape is
// computed from its input's shape compiles like one with a constant shape; such a value computed
// in another step is guarded by its contents.
#include <gtest/gtest.h>

#include "guards/guard.h"
#include "interp/compare.h"
#include "kernels/lower_op.h"
#include "tests/support/graph_builder.h"
#include "tiers/session.h"
#include "tiers/tier_manager.h"

namespace terrace {
namespace {

using testing::GraphBuilder;
using testing::random_tensor;

Options tiered() {
  Options o;
  o.max_tier = Tier::Cpu;
  o.optimize = OptimizeLevel::None;  // the shape arithmetic stays in the graph, as exporters write it
  return o;
}

// y = relu(reshape(x, concat(unsqueeze(shape(x)[0]), [-1]))): the exporters' way of flattening
// all but the batch dim, with the batch dim symbolic.
std::shared_ptr<Graph> flatten_by_shape(bool break_between) {
  GraphBuilder g;
  int x = g.input("x", DType::Float32, {-1, -1, 4});
  int batch = g.node(Op::Gather, {g.node(Op::Shape, {x}), g.constant("zero", Tensor::scalar<int64_t>(0))});
  int target = g.node(Op::Concat, {g.node(Op::Unsqueeze, {batch, g.constant("axes", Tensor::from_vector<int64_t>({1}, {0}))}),
                                   g.constant("rest", Tensor::from_vector<int64_t>({1}, {-1}))},
                      {{"axis", GraphBuilder::attr_int(0)}});
  // A CumSum (not compiled by tier 1) that runs after the shape arithmetic (it reads a Relu that
  // is compiled with it) and before the Reshape puts them in two regions: the target shape then
  // enters the Reshape's region as an input.
  int data = break_between ? g.node(Op::CumSum, {g.node(Op::Relu, {x}), g.constant("axis", Tensor::scalar<int64_t>(1))}) : x;
  g.output(g.node(Op::Relu, {g.node(Op::Reshape, {data, target})}));
  return g.build();
}

NamedTensors reference(const std::shared_ptr<Graph>& g, const NamedTensors& in) {
  Options o;
  o.max_tier = Tier::Interp;
  return Session::from_graph(g, o)->run(in);
}

void expect_reference(const std::shared_ptr<Graph>& g, Session& s, const NamedTensors& in) {
  NamedTensors want = reference(g, in), got = s.run(in);
  ASSERT_EQ(got.size(), want.size());
  Comparison c = compare_tensors(want[0].second, got[0].second, Tolerance::for_dtype(DType::Float32));
  EXPECT_TRUE(c.equal) << c.message;
  EXPECT_EQ(got[0].second.shape(), want[0].second.shape());
}

TEST(CompileTimeValues, shape_arithmetic_is_known_when_a_region_is_compiled) {
  auto g = flatten_by_shape(false);
  for (const Node& n : g->nodes)
    if (n.op == Op::Concat) EXPECT_TRUE(kernels::known_at_compile_time(*g, n.outputs[0]));
    else if (n.op == Op::Relu) EXPECT_FALSE(kernels::known_at_compile_time(*g, n.outputs[0]));
  EXPECT_FALSE(kernels::known_at_compile_time(*g, g->inputs[0]));
}

TEST(CompileTimeValues, reshape_to_a_computed_shape_compiles_with_no_graph_break) {
  auto g = flatten_by_shape(false);
  auto s = Session::from_graph(g, tiered());
  ASSERT_EQ(s->plan().regions.size(), 1u);
  for (const Step& st : s->plan().steps) EXPECT_GE(st.region, 0) << "graph break: " << st.reason;
  for (int64_t batch : {2, 5}) {  // a second signature: a second version, its shape recomputed
    NamedTensors in{{"x", random_tensor({batch, 3, 4}, uint64_t(batch))}};
    for (int i = 0; i < 6; ++i) {
      expect_reference(g, *s, in);
      s->wait_for_compiles();
    }
    EXPECT_EQ(s->last_call().tiers, std::vector<std::string>{"cpu"});
  }
  for (const RegionReport& r : s->region_reports()) EXPECT_EQ(r.validation, "passed");
}

TEST(CompileTimeValues, a_computed_shape_from_another_region_is_guarded_by_value) {
  auto g = flatten_by_shape(true);
  auto s = Session::from_graph(g, tiered());
  ASSERT_EQ(s->plan().regions.size(), 2u);
  for (int64_t batch : {2, 7}) {
    NamedTensors in{{"x", random_tensor({batch, 3, 4}, uint64_t(batch))}};
    for (int i = 0; i < 6; ++i) {
      expect_reference(g, *s, in);
      s->wait_for_compiles();
    }
  }
  for (const RegionReport& r : s->region_reports()) {
    EXPECT_EQ(r.tier, Tier::Cpu) << r.ops;
    EXPECT_EQ(r.validation, "passed") << r.ops;
  }
}

TEST(CompileTimeValues, a_value_guard_passes_on_equal_contents_and_names_the_first_difference) {
  std::vector<Tensor> in{random_tensor({2, 3}, 1), Tensor::from_vector<int64_t>({2}, {4, -1})};
  GuardSet guards = GuardSet::exact(in, {1});
  EXPECT_FALSE(guards.check(in));
  std::vector<Tensor> same{in[0], Tensor::from_vector<int64_t>({2}, {4, -1})};
  EXPECT_FALSE(guards.check(same));
  std::vector<Tensor> other{in[0], Tensor::from_vector<int64_t>({2}, {4, 6})};
  std::optional<GuardFailure> f = guards.check(other);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->guard.kind, Guard::Kind::Value);
  EXPECT_EQ(f->seen, 1);
  EXPECT_NE(f->describe().find("input 1 value"), std::string::npos) << f->describe();
  // Where the signature is known to match, only the value guards are asked, with the same answer.
  EXPECT_FALSE(guards.check_values(same));
  std::optional<GuardFailure> v = guards.check_values(other);
  ASSERT_TRUE(v);
  EXPECT_EQ(v->describe(), f->describe());
  EXPECT_FALSE(guards.check_values({Tensor::from_vector<int64_t>({1}, {9}), in[1]}))
      << "check_values leaves dtypes and shapes to Signature::matches";
}

}  // namespace
}  // namespace terrace
