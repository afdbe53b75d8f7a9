// Shape inference after the rewrites (tiers/passes/shape_inference.cpp): values whose shapes only
// folding made computable get them in the optimized graph.
#include "tests/passes/helpers.h"
#include "tiers/passes/passes.h"

namespace terrace {
namespace {

using testing::GraphBuilder;
using testing::graph_attr;
using testing::int_attr;
using testing::optimized;
using testing::random_tensor;
using testing::tensor_attr;

Tensor i64(std::vector<int64_t> v) { return Tensor::from_vector<int64_t>({int64_t(v.size())}, v); }

const std::optional<Shape>& shape_of(const Graph& g, const std::string& name) {
  const int v = g.find_value(name);
  EXPECT_GE(v, 0) << name;
  return g.values[size_t(v)].info.shape;
}

// Flatten as exporters write it: Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1])), then a
// Relu of the result.
std::shared_ptr<Graph> exported_flatten(Shape x_shape) {
  GraphBuilder b;
  int x = b.input("x", DType::Float32, std::move(x_shape));
  int shape = b.node(Op::Shape, {x}, {}, 1, DType::Int64);
  int d0 = b.node(Op::Gather, {shape, b.constant("zero", Tensor::scalar<int64_t>(0))}, {{"axis", int_attr(0)}});
  int u = b.node(Op::Unsqueeze, {d0, b.constant("axes", i64({0}))});
  int cat = b.node(Op::Concat, {u, b.constant("minus1", i64({-1}))}, {{"axis", int_attr(0)}});
  int r = b.node(Op::Reshape, {x, cat});
  b.output(b.node(Op::Relu, {r}));
  return b.build();
}

TEST(ShapeInference, a_reshape_whose_target_folding_made_constant_gets_its_static_shape) {
  auto g = exported_flatten({2, 3, 4});
  const std::string reshaped = g->value(g->nodes[4].outputs[0]).name, relu = g->value(g->outputs[0]).name;
  // What inference knows before folding (as the import's): nothing, not even the rank (ONNX 1.12
  // reads a Reshape's target only when it is a constant).
  auto before = std::make_shared<Graph>(*g);
  passes::infer_static_shapes(*before);
  EXPECT_FALSE(shape_of(*before, reshaped).has_value());
  EXPECT_FALSE(shape_of(*before, relu).has_value());
  auto opt = optimized(before, OptimizeLevel::Basic);
  ASSERT_EQ(opt->nodes.size(), 2u) << passes::graph_text(*opt);
  ASSERT_TRUE(shape_of(*opt, reshaped).has_value()) << passes::graph_text(*opt);
  EXPECT_EQ(*shape_of(*opt, reshaped), (Shape{2, 12}));
  ASSERT_TRUE(shape_of(*opt, relu).has_value());
  EXPECT_EQ(*shape_of(*opt, relu), (Shape{2, 12}));
  testing::expect_same_outputs(*g, *opt, {RValue(random_tensor({2, 3, 4}, 1))});
}

TEST(ShapeInference, a_symbolic_batch_keeps_its_name_and_the_known_dims_are_filled_in) {
  GraphBuilder b;
  int x = b.input("x", DType::Float32, {-1, 3, 4});
  b.build()->values[size_t(x)].info.dim_names = {"batch", "", ""};
  // Reshape to [0, 12]: the batch copied (0), the rest constant.
  int r = b.node(Op::Reshape, {x, b.constant("target", i64({0, 12}))});
  b.output(b.node(Op::Relu, {r}));
  auto g = b.build();
  auto opt = optimized(g, OptimizeLevel::Basic);
  const int v = opt->find_value(g->value(r).name);
  ASSERT_GE(v, 0);
  const ValueInfo& info = opt->value(v).info;
  ASSERT_TRUE(info.shape.has_value()) << passes::graph_text(*opt);
  EXPECT_EQ(*info.shape, (Shape{-1, 12}));
  ASSERT_EQ(info.dim_names.size(), 2u);
  EXPECT_EQ(info.dim_names[0], "batch");
}

TEST(ShapeInference, nodes_with_bodies_are_left_out_and_the_rest_still_learns) {
  auto g = exported_flatten({2, 3, 4});
  // An If whose result nobody needs a shape for, beside the flatten.
  GraphBuilder then_b, else_b;
  then_b.output(then_b.node(Op::Constant, {}, {{"value", tensor_attr(random_tensor({2}, 1))}}, 1, DType::Float32));
  else_b.output(else_b.node(Op::Constant, {}, {{"value", tensor_attr(random_tensor({2}, 2))}}, 1, DType::Float32));
  ValueInfo cond_info;
  cond_info.dtype = DType::Bool;
  cond_info.shape = Shape{};
  int cond = g->add_value("cond", cond_info);
  g->inputs.push_back(cond);
  Node n;
  n.op = Op::If;
  n.name = "if";
  n.inputs = {cond};
  n.attrs["then_branch"] = graph_attr(then_b.build());
  n.attrs["else_branch"] = graph_attr(else_b.build());
  int out = g->add_value("if_out");
  g->values[size_t(out)].producer = int(g->nodes.size());
  n.outputs = {out};
  g->nodes.push_back(n);
  g->outputs.push_back(out);
  const std::string reshaped = g->value(g->nodes[4].outputs[0]).name;
  auto opt = optimized(g, OptimizeLevel::Basic);
  ASSERT_TRUE(shape_of(*opt, reshaped).has_value()) << passes::graph_text(*opt);
  EXPECT_EQ(*shape_of(*opt, reshaped), (Shape{2, 12}));
  testing::expect_same_outputs(*g, *opt, {RValue(random_tensor({2, 3, 4}, 1)), RValue(Tensor::scalar<bool>(true))});
}

TEST(ShapeInference, a_graph_of_opset_18_is_inferred_with_the_changed_ops_by_terrace) {
  // ReduceMean takes its axes as an input from opset 18: ONNX 1.12 knows only the attribute form.
  auto g = exported_flatten({2, 3, 4});
  g->opset = 18;
  const int relu = g->outputs[0];
  Node mean;
  mean.op = Op::ReduceMean;
  mean.name = "mean";
  const int axes = passes::add_constant(*g, "mean_axes", i64({1}));
  mean.inputs = {relu, axes};
  mean.attrs["keepdims"] = int_attr(0);
  const int out = g->add_value("mean_out");
  g->values[size_t(out)].producer = int(g->nodes.size());
  mean.outputs = {out};
  g->nodes.push_back(mean);
  g->outputs = {out};
  auto opt = optimized(g, OptimizeLevel::Basic);
  ASSERT_TRUE(shape_of(*opt, "mean_out").has_value()) << passes::graph_text(*opt);
  EXPECT_EQ(*shape_of(*opt, "mean_out"), (Shape{2}));
  testing::expect_same_outputs(*g, *opt, {RValue(random_tensor({2, 3, 4}, 1))});
}

TEST(ShapeInference, the_pass_counts_only_what_it_learnt) {
  auto g = exported_flatten({2, 3, 4});
  Graph copy = *g;
  EXPECT_EQ(passes::infer_static_shapes(copy), 4);  // Shape, Gather, Unsqueeze, Concat (not the Reshape's)
  EXPECT_EQ(passes::infer_static_shapes(copy), 0);  // nothing more to learn
}

}  // namespace
}  // namespace terrace
