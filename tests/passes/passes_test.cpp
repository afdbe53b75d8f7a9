// Each graph pass on small hand-built graphs: what it rewrites, what it must leave alone, and that
// the optimized graph's outputs are the original's on the interpreter (bitwise, except after
// BatchNormalization folding: within the dtype's tolerance).
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "tests/passes/helpers.h"
#include "tiers/passes/passes.h"
#include "tiers/session.h"

namespace terrace {
namespace {

using testing::GraphBuilder;
using testing::count_ops;
using testing::expect_same_outputs;
using testing::ints_attr;
using testing::int_attr;
using testing::float_attr;
using testing::graph_attr;
using testing::optimized;
using testing::random_tensor;
using testing::set_shape;
using testing::tensor_attr;

Tensor i64(std::vector<int64_t> v) { return Tensor::from_vector<int64_t>({int64_t(v.size())}, v); }

// ---- constant folding ----

TEST(ConstantFolding, folds_chains_of_constants_into_one_initializer) {
  GraphBuilder b;
  int x = b.input("x", DType::Float32, {2, 3});
  int c1 = b.constant("c1", random_tensor({2, 3}, 1));
  int c2 = b.constant("c2", random_tensor({2, 3}, 2));
  int s = b.node(Op::Add, {c1, c2});
  int e = b.node(Op::Exp, {s});
  b.output(b.node(Op::Mul, {x, e}));
  auto g = b.build();
  auto opt = optimized(g);
  ASSERT_EQ(opt->nodes.size(), 1u);
  EXPECT_EQ(opt->nodes[0].op, Op::Mul);
  EXPECT_TRUE(passes::is_constant(*opt, opt->nodes[0].inputs[1]));
  EXPECT_EQ(opt->initializers.size(), 1u);  // c1 and c2 are gone with the nodes that read them
  expect_same_outputs(*g, *opt, {RValue(random_tensor({2, 3}, 3))});
}

TEST(ConstantFolding, a_constant_node_that_is_a_graph_output_becomes_an_initializer_of_that_name) {
  GraphBuilder b;
  b.input("x", DType::Float32, {2});
  int c = b.node(Op::Constant, {}, {{"value", tensor_attr(random_tensor({4}, 5))}}, 1, DType::Float32);
  b.output(c);
  auto g = b.build();
  auto opt = optimized(g);
  EXPECT_TRUE(opt->nodes.empty());
  expect_same_outputs(*g, *opt, {RValue(random_tensor({2}, 1))});
  // A session runs a graph that has no node left.
  Options o;
  o.max_tier = Tier::Interp;
  auto session = Session::from_graph(g, o);
  auto out = session->run({{"x", random_tensor({2}, 1)}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].first, g->value(c).name);
  EXPECT_EQ(out[0].second.get_as_double(2), random_tensor({4}, 5).get_as_double(2));
}

TEST(ConstantFolding, keeps_results_over_the_size_cap_unless_its_inputs_are_as_large) {
  GraphBuilder b;
  int x = b.input("x", DType::Float32, {1});
  int shape = b.constant("shape", i64({512, 1024}));  // 2 MiB of float32 zeros
  int z = b.node(Op::ConstantOfShape, {shape}, {{"value", tensor_attr(Tensor::from_vector<float>({1}, {0.5f}))}}, 1,
                 DType::Float32);
  b.output(b.node(Op::Add, {z, x}));
  auto g = b.build();
  auto opt = optimized(g);
  EXPECT_EQ(count_ops(*opt, Op::ConstantOfShape), 1);
  passes::PassConfig big;
  big.fold_max_bytes = size_t(4) << 20;
  EXPECT_EQ(count_ops(*optimized(g, OptimizeLevel::Basic, big), Op::ConstantOfShape), 0);
  // A Transpose of a 2 MiB weight folds: its result is no larger than what it reads.
  GraphBuilder t;
  int y = t.input("y", DType::Float32, {1024, 512});
  int w = t.constant("w", random_tensor({512, 1024}, 4));
  int wt = t.node(Op::Transpose, {w}, {{"perm", ints_attr({1, 0})}});
  t.output(t.node(Op::Add, {y, wt}));
  auto tg = t.build();
  auto topt = optimized(tg);
  EXPECT_EQ(count_ops(*topt, Op::Transpose), 0);
  expect_same_outputs(*tg, *topt, {RValue(random_tensor({1024, 512}, 6))});
}

TEST(ConstantFolding, never_folds_random_ops_or_nodes_with_bodies) {
  GraphBuilder b;
  int x = b.input("x", DType::Float32, {3});
  int r = b.node(Op::RandomUniform, {}, {{"shape", ints_attr({3})}, {"dtype", int_attr(1)}}, 1, DType::Float32);
  // If(true) with branches of one Constant each: constant condition, but a body.
  auto branch = [](float v) {
    GraphBuilder body;
    int c = body.node(Op::Constant, {}, {{"value", tensor_attr(Tensor::from_vector<float>({3}, {v, v, v}))}}, 1,
                      DType::Float32);
    body.output(c);
    return body.build();
  };
  int cond = b.constant("cond", Tensor::scalar<bool>(true));
  int f = b.node(Op::If, {cond}, {{"then_branch", graph_attr(branch(1))}, {"else_branch", graph_attr(branch(2))}}, 1,
                 DType::Float32);
  int s = b.node(Op::Add, {r, f});
  b.output(b.node(Op::Mul, {s, x}));
  auto opt = optimized(b.build());
  EXPECT_EQ(count_ops(*opt, Op::RandomUniform), 1);
  EXPECT_EQ(count_ops(*opt, Op::If), 1);
}

TEST(ConstantFolding, leaves_a_node_that_fails_to_fail_at_run_time) {
  GraphBuilder b;
  int x = b.input("x", DType::Float32, {6});
  int c = b.constant("c", random_tensor({6}, 1));
  int bad = b.node(Op::Reshape, {c, b.constant("shape", i64({4, 2}))});
  b.output(b.node(Op::Add, {x, bad}));
  auto g = b.build();
  auto opt = optimized(g);
  EXPECT_EQ(count_ops(*opt, Op::Reshape), 1);
  EXPECT_THROW(interpret(*opt, {RValue(random_tensor({6}, 2))}), Error);
}

// ---- shape folding ----

TEST(ShapeFolding, static_shape_arithmetic_becomes_a_constant_reshape_target) {
  // Flatten as exporters write it: Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1])).
  GraphBuilder b;
  int x = b.input("x", DType::Float32, {2, 3, 4});
  int shape = b.node(Op::Shape, {x}, {}, 1, DType::Int64);
  int d0 = b.node(Op::Gather, {shape, b.constant("zero", Tensor::scalar<int64_t>(0))}, {{"axis", int_attr(0)}});
  int u = b.node(Op::Unsqueeze, {d0, b.constant("axes", i64({0}))});
  int cat = b.node(Op::Concat, {u, b.constant("minus1", i64({-1}))}, {{"axis", int_attr(0)}});
  int r = b.node(Op::Reshape, {x, cat});
  // Size(x) * 0.5, as a float.
  int size = b.node(Op::Size, {x}, {}, 1, DType::Int64);
  int sf = b.node(Op::Cast, {size}, {{"to", int_attr(1)}}, 1, DType::Float32);
  int half = b.node(Op::Mul, {sf, b.constant("half", Tensor::scalar<float>(0.5f))});
  b.output(b.node(Op::Mul, {r, half}));
  auto g = b.build();
  auto opt = optimized(g);
  ASSERT_EQ(opt->nodes.size(), 2u) << passes::graph_text(*opt);
  EXPECT_EQ(opt->nodes[0].op, Op::Reshape);
  ASSERT_TRUE(passes::is_constant(*opt, opt->nodes[0].inputs[1]));
  EXPECT_EQ(passes::constant(*opt, opt->nodes[0].inputs[1]).to_int64_vector(), (std::vector<int64_t>{2, -1}));
  expect_same_outputs(*g, *opt, {RValue(random_tensor({2, 3, 4}, 1))});
}

TEST(ShapeFolding, known_dims_of_a_dynamic_shape_fold_and_the_unknown_ones_stay) {
  GraphBuilder b;
  int x = b.input("x", DType::Float32, {-1, 3, 4});
  int shape = b.node(Op::Shape, {x}, {}, 1, DType::Int64);
  // shape[1:] is [3, 4]; shape[0] is the batch, known only at run time.
  int tail = b.node(Op::Slice, {shape, b.constant("s", i64({1})), b.constant("e", i64({3}))});
  int batch = b.node(Op::Gather, {shape, b.constant("i0", i64({0}))}, {{"axis", int_attr(0)}});
  int cat = b.node(Op::Concat, {batch, b.constant("m1", i64({-1}))}, {{"axis", int_attr(0)}});
  int r = b.node(Op::Reshape, {x, cat});
  // Shape with start=-1 (opset 15): [4].
  int last = b.node(Op::Shape, {x}, {{"start", int_attr(-1)}}, 1, DType::Int64);
  int prod = b.node(Op::Mul, {tail, last});
  int f = b.node(Op::Cast, {prod}, {{"to", int_attr(1)}}, 1, DType::Float32);
  b.output(r);
  b.output(f);
  auto g = b.build();
  auto opt = optimized(g);
  EXPECT_EQ(count_ops(*opt, Op::Shape), 1) << passes::graph_text(*opt);  // the batch's
  EXPECT_EQ(count_ops(*opt, Op::Slice), 0);
  EXPECT_EQ(count_ops(*opt, Op::Mul), 0);
  EXPECT_EQ(count_ops(*opt, Op::Cast), 0);
  EXPECT_EQ(count_ops(*opt, Op::Gather), 1);
  for (int64_t batch_size : {1, 5})
    expect_same_outputs(*g, *opt, {RValue(random_tensor({batch_size, 3, 4}, 7))});
}

TEST(ShapeFolding, constant_of_shape_of_a_static_shape_folds) {
  GraphBuilder b;
  int x = b.input("x", DType::Float32, {2, 3});
  int shape = b.node(Op::Shape, {x}, {}, 1, DType::Int64);
  int ones = b.node(Op::ConstantOfShape, {shape}, {{"value", tensor_attr(Tensor::from_vector<float>({1}, {1.f}))}},
                    1, DType::Float32);
  set_shape(*b.build(), ones, {2, 3});
  b.output(b.node(Op::Add, {x, ones}));
  auto g = b.build();
  auto opt = optimized(g);
  ASSERT_EQ(opt->nodes.size(), 1u);
  EXPECT_EQ(opt->nodes[0].op, Op::Add);
  expect_same_outputs(*g, *opt, {RValue(random_tensor({2, 3}, 2))});
}

// ---- no-op elimination ----

TEST(NoopElimination, identity_and_inference_dropout_go_and_the_output_keeps_its_name) {
  GraphBuilder b;
  int x = b.input("x", DType::Float32, {4});
  int i1 = b.node(Op::Identity, {x});
  int r = b.node(Op::Relu, {i1});
  int d = b.node(Op::Dropout, {r, b.constant("ratio", Tensor::scalar<float>(0.3f))}, {}, 2);
  int i2 = b.node(Op::Identity, {d});
  b.output(i2);
  auto g = b.build();
  auto opt = optimized(g);
  ASSERT_EQ(opt->nodes.size(), 1u) << passes::graph_text(*opt);
  EXPECT_EQ(opt->nodes[0].op, Op::Relu);
  EXPECT_EQ(opt->value(opt->nodes[0].outputs[0]).name, g->value(i2).name);  // Relu writes the output
  expect_same_outputs(*g, *opt, {RValue(random_tensor({4}, 1))});
}

TEST(NoopElimination, keeps_what_cannot_be_removed_without_renaming_inputs_or_outputs) {
  GraphBuilder b;
  int x = b.input("x", DType::Float32, {4});
  int passthrough = b.node(Op::Identity, {x});  // graph input -> graph output
  int r = b.node(Op::Relu, {x});
  int copy = b.node(Op::Identity, {r});  // both r and its copy are outputs
  b.output(passthrough);
  b.output(r);
  b.output(copy);
  auto g = b.build();
  auto opt = optimized(g);
  EXPECT_EQ(count_ops(*opt, Op::Identity), 2);
  expect_same_outputs(*g, *opt, {RValue(random_tensor({4}, 1))});
}

TEST(NoopElimination, training_dropout_and_a_read_mask_stay) {
  GraphBuilder b;
  int x = b.input("x", DType::Float32, {16});
  int t = b.constant("training", Tensor::scalar<bool>(true));
  int d = b.node(Op::Dropout, {x, b.constant("ratio", Tensor::scalar<float>(0.5f)), t}, {}, 1);
  int d2 = b.node(Op::Dropout, {d}, {}, 2);
  int mask = d2 + 1;
  b.output(d2);
  b.output(mask);
  auto g = b.build();
  g->values[size_t(mask)].info.dtype = DType::Bool;
  auto opt = optimized(g);
  EXPECT_EQ(count_ops(*opt, Op::Dropout), 2);
  expect_same_outputs(*g, *opt, {RValue(random_tensor({16}, 1))});
}

TEST(NoopElimination, same_shape_reshapes_same_type_casts_and_identity_transposes_go) {
  GraphBuilder b;
  int x = b.input("x", DType::Float32, {-1, 3, 4});
  int r1 = b.node(Op::Reshape, {x, b.constant("keep", i64({0, 3, -1}))});  // keeps a dynamic shape
  int c1 = b.node(Op::Cast, {r1}, {{"to", int_attr(1)}});                // float32 to float32
  int t1 = b.node(Op::Transpose, {c1}, {{"perm", ints_attr({0, 1, 2})}});
  int s = b.node(Op::Sigmoid, {t1});
  int r2 = b.node(Op::Reshape, {s, b.constant("flat", i64({0, -1}))});  // changes the shape: stays
  int c2 = b.node(Op::Cast, {r2}, {{"to", int_attr(11)}}, 1, DType::Float64);  // changes the type: stays
  b.output(c2);
  auto g = b.build();
  set_shape(*g, t1, {-1, 3, 4});
  auto opt = optimized(g);
  EXPECT_EQ(count_ops(*opt, Op::Reshape), 1) << passes::graph_text(*opt);
  EXPECT_EQ(count_ops(*opt, Op::Cast), 1);
  EXPECT_EQ(count_ops(*opt, Op::Transpose), 0);
  expect_same_outputs(*g, *opt, {RValue(random_tensor({2, 3, 4}, 1))});

  // Static shapes: Unsqueeze/Squeeze/Expand/Flatten whose result has the input's shape.
  GraphBuilder s2;
  int y = s2.input("y", DType::Float32, {2, 3});
  int sq = s2.node(Op::Squeeze, {y});  // no dim of 1: nothing squeezed
  int ex = s2.node(Op::Expand, {sq, s2.constant("to", i64({3}))});
  int fl = s2.node(Op::Flatten, {ex}, {{"axis", int_attr(1)}});
  s2.output(s2.node(Op::Neg, {fl}));
  auto g2 = s2.build();
  for (int v : {sq, ex, fl}) set_shape(*g2, v, {2, 3});
  auto opt2 = optimized(g2);
  ASSERT_EQ(opt2->nodes.size(), 1u) << passes::graph_text(*opt2);
  expect_same_outputs(*g2, *opt2, {RValue(random_tensor({2, 3}, 2))});
}

// A body (If branch) reads an Identity's result by name: the name must survive.
TEST(NoopElimination, a_value_a_body_reads_by_name_keeps_its_name) {
  GraphBuilder b;
  int x = b.input("x", DType::Float32, {3});
  int cond = b.input("cond", DType::Bool, {});
  int r = b.node(Op::Relu, {x});
  int id = b.node(Op::Identity, {r});
  const std::string captured = b.build()->value(id).name;
  auto branch = [&](Op op) {
    auto body = std::make_shared<Graph>();
    int c = body->add_value(captured);
    body->captures.push_back(c);
    Node n;
    n.op = op;
    n.name = "body_op";
    n.inputs = {c};
    n.outputs = {body->add_value("body_out")};
    body->values[size_t(n.outputs[0])].producer = 0;
    body->nodes.push_back(n);
    body->outputs.push_back(n.outputs[0]);
    return body;
  };
  int f = b.node(Op::If, {cond}, {{"then_branch", graph_attr(branch(Op::Neg))},
                                  {"else_branch", graph_attr(branch(Op::Abs))}}, 1, DType::Float32);
  b.output(f);
  auto g = b.build();
  auto opt = optimized(g);
  EXPECT_GE(opt->find_value(captured), 0);
  for (bool c : {true, false})
    expect_same_outputs(*g, *opt, {RValue(random_tensor({3}, 1)), RValue(Tensor::scalar<bool>(c))});
}

// ---- BatchNormalization folding ----

struct BnCase {
  int64_t groups;
  bool bias;
};

std::shared_ptr<Graph> conv_bn_graph(const BnCase& c, int* bn_input = nullptr) {
  GraphBuilder b;
  const int64_t cin = 4, cout = 4;
  int x = b.input("x", DType::Float32, {2, cin, 6, 6});
  std::vector<int> conv_in = {x, b.constant("w", random_tensor({cout, cin / c.groups, 3, 3}, 1))};
  if (c.bias) conv_in.push_back(b.constant("b", random_tensor({cout}, 2)));
  int y = b.node(Op::Conv, conv_in, {{"group", int_attr(c.groups)}, {"pads", ints_attr({1, 1, 1, 1})}});
  int bn = b.node(Op::BatchNormalization,
                  {y, b.constant("scale", random_tensor({cout}, 3, 0.5, 2)), b.constant("shift", random_tensor({cout}, 4)),
                   b.constant("mean", random_tensor({cout}, 5)), b.constant("var", random_tensor({cout}, 6, 0.1, 2))},
                  {{"epsilon", float_attr(1e-3f)}});
  b.output(b.node(Op::Relu, {bn}));
  if (bn_input) *bn_input = y;
  return b.build();
}

TEST(BatchNormFolding, folds_into_the_conv_before_it) {
  for (BnCase c : {BnCase{1, true}, BnCase{1, false}, BnCase{4, true}}) {
    auto g = conv_bn_graph(c);
    auto opt = optimized(g);
    EXPECT_EQ(count_ops(*opt, Op::BatchNormalization), 0);
    ASSERT_EQ(opt->nodes.size(), 2u);
    EXPECT_EQ(opt->nodes[0].inputs.size(), 3u);  // a bias now
    expect_same_outputs(*g, *opt, {RValue(random_tensor({2, 4, 6, 6}, 9))}, /*exact=*/false);
    // Basic keeps it: its answers are bitwise the original's.
    EXPECT_EQ(count_ops(*optimized(g, OptimizeLevel::Basic), Op::BatchNormalization), 1);
  }
}

TEST(BatchNormFolding, not_when_the_conv_result_is_read_elsewhere_or_is_an_output) {
  int y = -1;
  auto g = conv_bn_graph({1, true}, &y);
  g->outputs.push_back(y);
  auto opt = optimized(g);
  // The Conv keeps its weights (its result is an output); the BN becomes a per-channel Mul, Add.
  EXPECT_EQ(count_ops(*opt, Op::BatchNormalization), 0);
  EXPECT_EQ(count_ops(*opt, Op::Mul), 1);
  EXPECT_EQ(count_ops(*opt, Op::Add), 1);
  expect_same_outputs(*g, *opt, {RValue(random_tensor({2, 4, 6, 6}, 9))}, /*exact=*/false);
}

// A BN after a Relu (PaddleOCR's detector, openWakeWord's embedding) folds into no producer: it
// becomes x * s + shift per channel, which tier 1 compiles, where it was a graph break.
TEST(BatchNormFolding, one_no_producer_takes_becomes_a_per_channel_mul_and_add) {
  for (Shape shape : {Shape{2, 3, 4, 5}, Shape{2, 3}, Shape{1, 3, 7}}) {
    GraphBuilder b;
    int x = b.input("x", DType::Float32, shape);
    int bn = b.node(Op::BatchNormalization,
                    {b.node(Op::Relu, {x}), b.constant("scale", random_tensor({3}, 3, 0.5, 2)),
                     b.constant("shift", random_tensor({3}, 4)), b.constant("mean", random_tensor({3}, 5)),
                     b.constant("var", random_tensor({3}, 6, 0.1, 2))},
                    {{"epsilon", float_attr(1e-3f)}});
    b.output(b.node(Op::Sigmoid, {bn}));
    auto g = b.build();
    auto opt = optimized(g);
    EXPECT_EQ(count_ops(*opt, Op::BatchNormalization), 0) << passes::graph_text(*opt);
    ASSERT_EQ(opt->nodes.size(), 4u) << passes::graph_text(*opt);  // Relu, Mul, Add, Sigmoid, in order
    EXPECT_EQ(opt->nodes[1].op, Op::Mul);
    EXPECT_EQ(opt->nodes[2].op, Op::Add);
    for (size_t n = 0; n < opt->nodes.size(); ++n)
      for (int v : opt->nodes[n].outputs) EXPECT_EQ(opt->value(v).producer, int(n)) << passes::graph_text(*opt);
    expect_same_outputs(*g, *opt, {RValue(random_tensor(shape, 9))}, /*exact=*/false);
    EXPECT_EQ(count_ops(*optimized(g, OptimizeLevel::Basic), Op::BatchNormalization), 1);
  }
}

TEST(BatchNormFolding, a_bn_whose_parameters_are_not_constants_stays) {
  GraphBuilder b;
  int x = b.input("x", DType::Float32, {2, 3, 4});
  int scale = b.input("scale", DType::Float32, {3});
  b.output(b.node(Op::BatchNormalization, {x, scale, b.constant("shift", random_tensor({3}, 4)),
                                           b.constant("mean", random_tensor({3}, 5)),
                                           b.constant("var", random_tensor({3}, 6, 0.1, 2))}));
  EXPECT_EQ(count_ops(*optimized(b.build()), Op::BatchNormalization), 1);
}

TEST(BatchNormFolding, folds_into_a_gemm_with_either_weight_layout) {
  for (int64_t trans_b : {0, 1})
    for (bool with_c : {false, true}) {
      GraphBuilder b;
      int a = b.input("a", DType::Float32, {3, 5});
      Shape wshape = trans_b ? Shape{4, 5} : Shape{5, 4};
      std::vector<int> in = {a, b.constant("w", random_tensor(wshape, 1))};
      if (with_c) in.push_back(b.constant("c", random_tensor({1, 4}, 2)));
      int y = b.node(Op::Gemm, in, {{"transB", int_attr(trans_b)}, {"alpha", float_attr(0.7f)}, {"beta", float_attr(1.3f)}});
      int bn = b.node(Op::BatchNormalization,
                      {y, b.constant("scale", random_tensor({4}, 3)), b.constant("shift", random_tensor({4}, 4)),
                       b.constant("mean", random_tensor({4}, 5)), b.constant("var", random_tensor({4}, 6, 0.1, 2))});
      b.output(bn);
      auto g = b.build();
      auto opt = optimized(g);
      ASSERT_EQ(opt->nodes.size(), 1u) << passes::graph_text(*opt);
      EXPECT_EQ(opt->nodes[0].op, Op::Gemm);
      EXPECT_EQ(opt->value(opt->nodes[0].outputs[0]).name, g->value(bn).name);
      expect_same_outputs(*g, *opt, {RValue(random_tensor({3, 5}, 7))}, /*exact=*/false);
    }
}

// ---- the pipeline ----

TEST(Pipeline, none_returns_the_graph_itself_and_the_original_is_never_changed) {
  auto g = conv_bn_graph({1, true});
  const std::string before = passes::graph_text(*g);
  EXPECT_EQ(optimize_graph(g, OptimizeLevel::None).get(), g.get());
  auto opt = optimize_graph(g, OptimizeLevel::Extended);
  EXPECT_NE(opt.get(), g.get());
  EXPECT_EQ(passes::graph_text(*g), before);
}

TEST(Pipeline, dumps_the_graph_after_each_pass) {
  auto dir = std::filesystem::temp_directory_path() / ("terrace_passes_dump_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  ::setenv("TERRACE_DUMP_DIR", dir.c_str(), 1);
  std::vector<PassRecord> records;
  optimize_graph(conv_bn_graph({1, true}), OptimizeLevel::Extended, {}, &records);
  ::unsetenv("TERRACE_DUMP_DIR");
  ASSERT_FALSE(records.empty());
  EXPECT_TRUE(std::filesystem::exists(dir / "passes" / "00_input.txt"));
  int files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir / "passes")) files += e.is_regular_file();
  EXPECT_EQ(files, int(records.size()) + 1);
  std::ifstream last(dir / "passes" / "00_input.txt");
  std::string text((std::istreambuf_iterator<char>(last)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("BatchNormalization"), std::string::npos);
  bool folded = false;
  for (const PassRecord& r : records) folded = folded || (r.pass == "batchnorm_folding" && r.rewrites == 1);
  EXPECT_TRUE(folded);
  std::filesystem::remove_all(dir);
}

TEST(Pipeline, a_session_runs_the_optimized_graph_and_answers_as_the_original) {
  auto g = conv_bn_graph({1, true});
  for (Tier tier : {Tier::Interp, Tier::Cpu}) {
    Options o;
    o.max_tier = tier;
    o.hot_threshold = 1;
    auto session = Session::from_graph(g, o);
    EXPECT_EQ(count_ops(session->graph(), Op::BatchNormalization), 0);
    Options none = o;
    none.optimize = OptimizeLevel::None;
    EXPECT_EQ(count_ops(Session::from_graph(g, none)->graph(), Op::BatchNormalization), 1);
    Tensor x = random_tensor({2, 4, 6, 6}, 3);
    Tensor want = interpret(*g, {RValue(x)})[0].tensor;
    for (int call = 0; call < 3; ++call) {
      auto out = session->run({{"x", x}});
      session->wait_for_compiles();
      Comparison c = compare_tensors(want, out[0].second, Tolerance::for_dtype(DType::Float32));
      EXPECT_TRUE(c.equal) << tier_name(tier) << " call " << call << ": " << c.message;
    }
  }
}

TEST(Pipeline, terrace_optimize_sets_the_level) {
  ::setenv("TERRACE_OPTIMIZE", "none", 1);
  EXPECT_EQ(Options::from_env().optimize, OptimizeLevel::None);
  ::setenv("TERRACE_OPTIMIZE", "basic", 1);
  EXPECT_EQ(Options::from_env().optimize, OptimizeLevel::Basic);
  ::setenv("TERRACE_OPTIMIZE", "fast", 1);
  EXPECT_THROW(Options::from_env(), Error);
  ::unsetenv("TERRACE_OPTIMIZE");
  EXPECT_EQ(Options::from_env().optimize, OptimizeLevel::Extended);
}

}  // namespace
}  // namespace terrace
