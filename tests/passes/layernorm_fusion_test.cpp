// LayerNorm fusion (tiers/passes/layernorm_fusion.cpp) on hand-built decomposed layer norms: the
// forms exporters write become one LayerNormalization with the interpreter's answer (within the
// dtype's tolerance: the fused op computes in double), and near misses are left alone.
#include "tests/passes/helpers.h"
#include "tiers/passes/passes.h"

namespace terrace {
namespace {

using testing::GraphBuilder;
using testing::count_ops;
using testing::expect_same_outputs;
using testing::ints_attr;
using testing::int_attr;
using testing::optimized;
using testing::random_tensor;

// The knobs of one decomposed layer norm: y = (x - mean) / sqrt(var + eps) * gamma + beta.
struct LayerNormForm {
  Shape x_shape = {2, 3, 8};
  DType dtype = DType::Float32;
  std::vector<int64_t> axes = {-1};
  std::vector<int64_t> var_axes = {};  // empty: the same as `axes`
  int64_t keepdims = 1;
  bool square_by_mul = false;   // Mul(d, d) instead of Pow(d, 2)
  float exponent = 2.0f;
  bool reciprocal = false;      // Mul(d, Reciprocal(s)) instead of Div(d, s)
  bool eps_first = false;       // Add(eps, var)
  bool eps_as_input = false;    // epsilon a graph input, not a constant
  Shape gamma_shape = {8};      // empty: no gamma
  bool beta = true;
  bool gamma_first = false;     // Mul(gamma, n)
  bool sub_is_output = false;   // x - mean also a graph output
};

struct Built {
  std::shared_ptr<Graph> graph;
  std::vector<RValue> inputs;
};

Built build_layernorm(const LayerNormForm& f) {
  GraphBuilder b;
  int x = b.input("x", f.dtype, f.x_shape);
  int m = b.node(Op::ReduceMean, {x}, {{"axes", ints_attr(f.axes)}, {"keepdims", int_attr(f.keepdims)}});
  int d = b.node(Op::Sub, {x, m});
  int q = f.square_by_mul ? b.node(Op::Mul, {d, d})
                          : b.node(Op::Pow, {d, b.constant("two", Tensor::scalar<float>(f.exponent))});
  int v = b.node(Op::ReduceMean, {q}, {{"axes", ints_attr(f.var_axes.empty() ? f.axes : f.var_axes)},
                                       {"keepdims", int_attr(f.keepdims)}});
  int eps = f.eps_as_input ? b.input("eps", DType::Float32, {}) : b.constant("eps", Tensor::scalar<float>(1e-5f));
  int ve = f.eps_first ? b.node(Op::Add, {eps, v}) : b.node(Op::Add, {v, eps});
  int s = b.node(Op::Sqrt, {ve});
  int n = f.reciprocal ? b.node(Op::Mul, {d, b.node(Op::Reciprocal, {s})}) : b.node(Op::Div, {d, s});
  int y = n;
  if (!f.gamma_shape.empty()) {
    int gamma = b.constant("gamma", random_tensor(f.gamma_shape, 11, 0.5f, 1.5f));
    y = f.gamma_first ? b.node(Op::Mul, {gamma, n}) : b.node(Op::Mul, {n, gamma});
  }
  if (f.beta) y = b.node(Op::Add, {y, b.constant("beta", random_tensor({f.x_shape.back()}, 12))});
  b.output(y);
  if (f.sub_is_output) b.output(d);
  Built built{b.build(), {RValue(random_tensor(f.x_shape, 13, -3, 5))}};
  if (f.eps_as_input) built.inputs.push_back(RValue(Tensor::scalar<float>(1e-5f)));
  return built;
}

// Fused: one LayerNormalization is all that is left, with the original's answer.
void expect_fused(const LayerNormForm& f, int64_t axis, size_t nodes = 1) {
  Built b = build_layernorm(f);
  auto opt = optimized(b.graph);
  ASSERT_EQ(count_ops(*opt, Op::LayerNormalization), 1) << passes::graph_text(*opt);
  EXPECT_EQ(opt->nodes.size(), nodes) << passes::graph_text(*opt);
  for (const Node& n : opt->nodes)
    if (n.op == Op::LayerNormalization) {
      EXPECT_EQ(n.attr_int("axis"), axis);
      EXPECT_FLOAT_EQ(n.attr_float("epsilon", 0), 1e-5f);
    }
  expect_same_outputs(*b.graph, *opt, b.inputs, /*exact=*/false);
}

// Not fused: no LayerNormalization, and still the original's answer.
void expect_not_fused(const LayerNormForm& f) {
  Built b = build_layernorm(f);
  auto opt = optimized(b.graph);
  EXPECT_EQ(count_ops(*opt, Op::LayerNormalization), 0) << passes::graph_text(*opt);
  expect_same_outputs(*b.graph, *opt, b.inputs);
}

TEST(LayerNormFusion, torchs_decomposed_layernorm_becomes_one_op_with_the_interpreters_answer) {
  expect_fused({}, -1);
  // Only at the extended level: basic keeps answers bitwise.
  Built b = build_layernorm({});
  EXPECT_EQ(count_ops(*optimized(b.graph, OptimizeLevel::Basic), Op::LayerNormalization), 0);
}

TEST(LayerNormFusion, the_exporters_other_spellings_fuse_too) {
  LayerNormForm f;
  f.square_by_mul = true;
  expect_fused(f, -1);
  f = {};
  f.reciprocal = true;
  expect_fused(f, -1);
  f = {};
  f.eps_first = true;
  f.gamma_first = true;
  expect_fused(f, -1);
}

TEST(LayerNormFusion, trailing_axes_given_either_way_fuse_over_several_dims) {
  LayerNormForm f;
  f.axes = {-2, -1};
  f.gamma_shape = {3, 8};
  expect_fused(f, -2);
  f.axes = {2, 1};  // non-negative and unordered, on a known rank
  expect_fused(f, -2);
}

TEST(LayerNormFusion, without_gamma_or_beta_the_scale_is_one) {
  LayerNormForm f;
  f.gamma_shape = {};
  f.beta = false;
  expect_fused(f, -1);
  f.beta = true;
  expect_fused(f, -1);
}

TEST(LayerNormFusion, a_gamma_reaching_beyond_the_normalized_dims_stays_a_mul) {
  // gamma [3, 8] over one normalized axis also scales the middle axis: the normalization fuses,
  // the affine tail does not.
  LayerNormForm f;
  f.gamma_shape = {3, 8};
  Built b = build_layernorm(f);
  auto opt = optimized(b.graph);
  EXPECT_EQ(count_ops(*opt, Op::LayerNormalization), 1) << passes::graph_text(*opt);
  EXPECT_EQ(count_ops(*opt, Op::Mul), 1);
  EXPECT_EQ(count_ops(*opt, Op::Add), 1);
  expect_same_outputs(*b.graph, *opt, b.inputs, /*exact=*/false);
}

TEST(LayerNormFusion, a_value_of_the_pattern_read_elsewhere_keeps_it_decomposed) {
  LayerNormForm f;
  f.sub_is_output = true;
  expect_not_fused(f);
}

TEST(LayerNormFusion, wrong_constants_or_axes_keep_it_decomposed) {
  LayerNormForm f;
  f.exponent = 3;
  expect_not_fused(f);
  f = {};
  f.eps_as_input = true;  // epsilon known only at run time
  expect_not_fused(f);
  f = {};
  f.axes = {1};  // the middle axis, not a trailing one
  f.gamma_shape = {};
  f.beta = false;
  expect_not_fused(f);
  f = {};
  f.var_axes = {-2, -1};  // the variance over other axes than the mean
  f.gamma_shape = {};
  f.beta = false;
  expect_not_fused(f);
  f = {};
  f.keepdims = 0;
  f.x_shape = {2, 8};
  f.gamma_shape = {};
  f.beta = false;
  f.axes = {0};  // keepdims 0 on the leading axis still broadcasts; not a layer norm
  expect_not_fused(f);
}

TEST(LayerNormFusion, sixteen_bit_floats_stay_decomposed) {
  GraphBuilder b;
  int x = b.input("x", DType::Float16, {2, 8});
  int m = b.node(Op::ReduceMean, {x}, {{"axes", ints_attr({-1})}});
  int d = b.node(Op::Sub, {x, m});
  int v = b.node(Op::ReduceMean, {b.node(Op::Mul, {d, d})}, {{"axes", ints_attr({-1})}});
  int s = b.node(Op::Sqrt, {b.node(Op::Add, {v, b.constant("eps", Tensor::scalar<Half>(Half(1e-5f)))})});
  b.output(b.node(Op::Div, {d, s}));
  auto opt = optimized(b.build());
  EXPECT_EQ(count_ops(*opt, Op::LayerNormalization), 0) << passes::graph_text(*opt);
}

TEST(LayerNormFusion, the_deliberately_wrong_rewrite_for_validate_tests_changes_the_answer) {
  Built b = build_layernorm({});
  Graph g = *b.graph;
  passes::PassConfig wrong;
  wrong.deliberately_wrong = true;
  ASSERT_EQ(passes::fuse_layernorm(g, wrong), 1);
  std::vector<RValue> want = interpret(*b.graph, b.inputs), got = interpret(g, b.inputs);
  EXPECT_FALSE(compare_tensors(want[0].tensor, got[0].tensor, Tolerance::for_dtype(DType::Float32)).equal);
}

}  // namespace
}  // namespace terrace
