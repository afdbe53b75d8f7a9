// Reshape targets on symbolic dims (tiers/passes/reshape_targets.cpp): the exporters' run-time
// target Concat(Unsqueeze(Gather(Shape(s), 0)), [16], [4], [16]) becomes [0, 16, 4, 16] where the
// gathered dim is the reshaped input's own dim by name; elsewhere the Shape arithmetic stays.
#include "tests/passes/helpers.h"
#include "tiers/passes/passes.h"

namespace terrace {
namespace {

using testing::GraphBuilder;
using testing::count_ops;
using testing::expect_same_outputs;
using testing::int_attr;
using testing::optimized;
using testing::random_tensor;

Tensor i64(std::vector<int64_t> v) { return Tensor::from_vector<int64_t>({int64_t(v.size())}, v); }

void name_dims(Graph& g, int v, Shape shape, std::vector<std::string> names) {
  g.values[size_t(v)].info.shape = std::move(shape);
  g.values[size_t(v)].info.dim_names = std::move(names);
}

struct Form {
  bool unsqueeze = true;          // Unsqueeze(Gather(shape, scalar 0)); false: Gather(shape, [0])
  bool batch_first = true;        // the batch piece first in the target; false: second
  bool second_input_named_batch = false;
  int64_t allowzero = 0;
};

// x: [batch, 16, 64] -> Relu -> Reshape to [batch, 16, 4, 16] through Shape(x).
std::shared_ptr<Graph> build(const Form& f) {
  GraphBuilder b;
  int x = b.input("x", DType::Float32, {-1, 16, 64});
  if (f.second_input_named_batch) {
    int z = b.input("z", DType::Float32, {-1});
    b.output(b.node(Op::Relu, {z}));
    name_dims(*b.build(), z, {-1}, {"batch"});
  }
  int y = b.node(Op::Relu, {x});
  int shape = b.node(Op::Shape, {x}, {}, 1, DType::Int64);
  int piece = f.unsqueeze ? b.node(Op::Unsqueeze, {b.node(Op::Gather, {shape, b.constant("zero", Tensor::scalar<int64_t>(0))},
                                                          {{"axis", int_attr(0)}}),
                                                   b.constant("axes", i64({0}))})
                          : b.node(Op::Gather, {shape, b.constant("zero", i64({0}))}, {{"axis", int_attr(0)}});
  std::vector<int> pieces = {piece, b.constant("sixteen", i64({16})), b.constant("rest", i64({4, 16}))};
  if (!f.batch_first) std::swap(pieces[0], pieces[1]);
  int cat = b.node(Op::Concat, pieces, {{"axis", int_attr(0)}});
  int r = b.node(Op::Reshape, {y, cat}, {{"allowzero", int_attr(f.allowzero)}});
  b.output(r);
  auto g = b.build();
  // The dims as the import's shape inference names them.
  name_dims(*g, x, {-1, 16, 64}, {"batch", "", ""});
  name_dims(*g, y, {-1, 16, 64}, {"batch", "", ""});
  return g;
}

std::vector<RValue> inputs(int64_t batch, bool with_z) {
  std::vector<RValue> in = {RValue(random_tensor({batch, 16, 64}, 1))};
  if (with_z) in.push_back(RValue(random_tensor({batch}, 2)));  // z comes after x
  return in;
}

const Node& reshape_of(const Graph& g) {
  for (const Node& n : g.nodes)
    if (n.op == Op::Reshape) return n;
  throw std::runtime_error("no Reshape");
}

TEST(ReshapeTargets, a_batch_taken_from_shape_becomes_a_zero_in_a_constant_target) {
  for (bool unsqueeze : {true, false}) {
    Form f;
    f.unsqueeze = unsqueeze;
    auto g = build(f);
    auto opt = optimized(g, OptimizeLevel::Basic);
    EXPECT_EQ(count_ops(*opt, Op::Shape), 0) << passes::graph_text(*opt);
    EXPECT_EQ(count_ops(*opt, Op::Concat), 0);
    const Node& r = reshape_of(*opt);
    ASSERT_TRUE(passes::is_constant(*opt, r.inputs[1]));
    EXPECT_EQ(passes::constant(*opt, r.inputs[1]).to_int64_vector(), (std::vector<int64_t>{0, 16, 4, 16}));
    // Shape inference then knows the result: [batch, 16, 4, 16].
    const ValueInfo& info = opt->value(r.outputs[0]).info;
    ASSERT_TRUE(info.shape.has_value());
    EXPECT_EQ(*info.shape, (Shape{-1, 16, 4, 16}));
    EXPECT_EQ(info.dim_names.at(0), "batch");
    for (int64_t batch : {1, 3}) expect_same_outputs(*g, *opt, inputs(batch, false));
  }
}

TEST(ReshapeTargets, a_dim_landing_where_the_input_has_another_dim_stays_computed) {
  Form f;
  f.batch_first = false;  // [16, batch, 4, 16]: the batch is not x's dim 1
  auto g = build(f);
  auto opt = optimized(g, OptimizeLevel::Basic);
  EXPECT_EQ(count_ops(*opt, Op::Shape), 1) << passes::graph_text(*opt);
  EXPECT_FALSE(passes::is_constant(*opt, reshape_of(*opt).inputs[1]));
  expect_same_outputs(*g, *opt, inputs(16, false));
}

TEST(ReshapeTargets, a_name_two_graph_inputs_share_is_not_trusted) {
  Form f;
  f.second_input_named_batch = true;  // z[batch]: nothing checks at run time that z's batch is x's
  auto g = build(f);
  auto opt = optimized(g, OptimizeLevel::Basic);
  EXPECT_EQ(count_ops(*opt, Op::Shape), 1) << passes::graph_text(*opt);
  expect_same_outputs(*g, *opt, inputs(2, true));
}

TEST(ReshapeTargets, allowzero_targets_are_left_alone) {
  Form f;
  f.allowzero = 1;  // a 0 would mean an empty dim, not a copy
  auto g = build(f);
  auto opt = optimized(g, OptimizeLevel::Basic);
  EXPECT_EQ(count_ops(*opt, Op::Shape), 1) << passes::graph_text(*opt);
  expect_same_outputs(*g, *opt, inputs(2, false));
}

}  // namespace
}  // namespace terrace
