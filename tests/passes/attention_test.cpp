// Attention detection (tiers/passes/attention.cpp): the blocks exporters write are found with their
// Q, K^T, V, scale and mask; near misses are not; the optimizer leaves them as they are until
// the interpreter has Attention.
#include <cmath>
#include <limits>

#include "tests/passes/helpers.h"
#include "tiers/passes/passes.h"

namespace terrace {
namespace {

using testing::GraphBuilder;
using testing::count_ops;
using testing::int_attr;
using testing::optimized;
using testing::random_tensor;

enum class Mask { None, Where, Additive };

struct AttentionForm {
  Mask mask = Mask::Where;
  bool divide = true;           // Div(scores, 4); false: Mul(scores, 0.25)
  bool scaled = true;
  float fill = -std::numeric_limits<float>::infinity();
  int64_t softmax_axis = -1;
  bool scores_are_output = false;
  bool probs_are_output = false;
  int64_t q_batch = 1;          // K^T and V have batch 1: more broadcasts them in the MatMuls
  Shape mask_shape = {1, 1, 4, 4};  // the additive mask's
  bool where_mask_input = false;    // the Where's condition a graph input, not a constant
};

struct Built {
  std::shared_ptr<Graph> g;
  int q, kt, v, mask;
};

Built build_attention(const AttentionForm& f) {
  GraphBuilder b;
  Built r{};
  r.q = b.input("q", DType::Float32, {f.q_batch, 2, 4, 8});
  r.kt = b.input("kt", DType::Float32, {1, 2, 8, 4});
  r.v = b.input("v", DType::Float32, {1, 2, 4, 8});
  r.mask = -1;
  int s = b.node(Op::MatMul, {r.q, r.kt});
  const int raw = s;
  if (f.scaled)
    s = f.divide ? b.node(Op::Div, {s, b.constant("c", Tensor::scalar<float>(4))})
                 : b.node(Op::Mul, {b.constant("c", Tensor::scalar<float>(0.25f)), s});
  if (f.mask == Mask::Where) {
    std::vector<bool> above(16);
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) above[size_t(i * 4 + j)] = j > i;
    Tensor m = Tensor::empty(DType::Bool, {4, 4});
    for (size_t k = 0; k < 16; ++k) m.data<bool>()[k] = above[k];
    r.mask = f.where_mask_input ? b.input("cond", DType::Bool, {4, 4}) : b.constant("causal", m);
    s = b.node(Op::Where, {r.mask, b.constant("fill", Tensor::scalar<float>(f.fill)), s});
  } else if (f.mask == Mask::Additive) {
    r.mask = b.input("mask", DType::Float32, f.mask_shape);
    s = b.node(Op::Add, {s, r.mask});
  }
  int probs = b.node(Op::Softmax, {s}, {{"axis", int_attr(f.softmax_axis)}});
  b.output(b.node(Op::MatMul, {probs, r.v}));
  if (f.scores_are_output) b.output(raw);
  if (f.probs_are_output) b.output(probs);
  r.g = b.build();
  return r;
}

TEST(AttentionDetection, a_causal_gpt2_block_is_found_with_its_scale_and_mask) {
  Built b = build_attention({});
  auto found = passes::find_attention(*b.g);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].q, b.q);
  EXPECT_EQ(found[0].k_transposed, b.kt);
  EXPECT_EQ(found[0].v, b.v);
  EXPECT_EQ(found[0].mask, b.mask);
  EXPECT_EQ(found[0].mask_kind, passes::AttentionBlock::MaskKind::WhereNegInf);
  EXPECT_DOUBLE_EQ(found[0].scale, 0.25);
  EXPECT_EQ(found[0].nodes, (std::vector<int>{0, 1, 2, 3, 4}));
}

TEST(AttentionDetection, bert_blocks_with_a_product_scale_or_an_additive_mask_are_found) {
  AttentionForm f;
  f.mask = Mask::None;
  f.divide = false;
  Built b = build_attention(f);
  auto found = passes::find_attention(*b.g);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_DOUBLE_EQ(found[0].scale, 0.25);
  EXPECT_EQ(found[0].mask, -1);
  f.mask = Mask::Additive;
  f.scaled = false;
  b = build_attention(f);
  found = passes::find_attention(*b.g);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].mask, b.mask);
  EXPECT_EQ(found[0].mask_kind, passes::AttentionBlock::MaskKind::Additive);
  EXPECT_DOUBLE_EQ(found[0].scale, 1.0);
}

TEST(AttentionDetection, scores_or_probabilities_read_elsewhere_are_no_block) {
  AttentionForm f;
  f.scores_are_output = true;
  EXPECT_TRUE(passes::find_attention(*build_attention(f).g).empty());
  f = {};
  f.probs_are_output = true;
  EXPECT_TRUE(passes::find_attention(*build_attention(f).g).empty());
}

TEST(AttentionDetection, a_softmax_over_another_axis_or_a_finite_fill_is_no_block) {
  AttentionForm f;
  f.softmax_axis = 2;
  EXPECT_TRUE(passes::find_attention(*build_attention(f).g).empty());
  f = {};
  f.fill = 0;  // Where(mask, 0, scores) is not masking before a softmax
  EXPECT_TRUE(passes::find_attention(*build_attention(f).g).empty());
}

TEST(AttentionDetection, the_optimizer_leaves_the_block_as_it_is_for_now) {
  Built b = build_attention({});
  auto opt = optimized(b.g);
  EXPECT_EQ(count_ops(*opt, Op::Softmax), 1);
  EXPECT_EQ(count_ops(*opt, Op::MatMul), 2);
  EXPECT_EQ(passes::find_attention(*opt).size(), 1u);
  testing::expect_same_outputs(*b.g, *opt,
                               {RValue(random_tensor({1, 2, 4, 8}, 1)), RValue(random_tensor({1, 2, 8, 4}, 2)),
                                RValue(random_tensor({1, 2, 4, 8}, 3))});
}

// ---- the rewrite (PassConfig::fuse_attention) ----

std::shared_ptr<Graph> fused(const std::shared_ptr<Graph>& g) {
  passes::PassConfig config;
  config.fuse_attention = true;
  return optimized(g, OptimizeLevel::Extended, config);
}

std::vector<RValue> attention_inputs(const AttentionForm& f) {
  std::vector<RValue> in = {RValue(random_tensor({f.q_batch, 2, 4, 8}, 1, -2, 2)),
                            RValue(random_tensor({1, 2, 8, 4}, 2, -2, 2)), RValue(random_tensor({1, 2, 4, 8}, 3))};
  if (f.mask == Mask::Additive) in.push_back(RValue(random_tensor(f.mask_shape, 4, -3, 0)));
  if (f.mask == Mask::Where && f.where_mask_input) {
    Tensor c = Tensor::empty(DType::Bool, {4, 4});
    for (int64_t e = 0; e < 16; ++e) c.data<bool>()[e] = (e * 7) % 3 == 1;  // never a whole row
    in.push_back(RValue(c));
  }
  return in;
}

void expect_fused(const AttentionForm& f) {
  Built b = build_attention(f);
  auto opt = fused(b.g);
  ASSERT_EQ(count_ops(*opt, Op::Attention), 1) << passes::graph_text(*opt);
  EXPECT_EQ(count_ops(*opt, Op::MatMul), 0);
  EXPECT_EQ(count_ops(*opt, Op::Softmax), 0);
  EXPECT_EQ(count_ops(*opt, Op::Where), 0);
  EXPECT_EQ(count_ops(*opt, Op::Transpose), 1);  // K from K^T
  testing::expect_same_outputs(*b.g, *opt, attention_inputs(f), /*exact=*/false);
}

TEST(AttentionFusion, a_causal_block_becomes_one_attention_with_the_interpreters_answer) {
  expect_fused({});
  Built b = build_attention({});
  auto opt = fused(b.g);  // held: a range-for over fused(...)->nodes would read a freed graph
  for (const Node& n : opt->nodes) {
    if (n.op == Op::Attention) {
      EXPECT_FLOAT_EQ(n.attr_float("scale", 0), 0.25f);
    }
  }
}

TEST(AttentionFusion, additive_masks_unscaled_scores_and_computed_conditions_fuse) {
  AttentionForm f;
  f.mask = Mask::Additive;
  f.scaled = false;  // scale 1, not Attention's default 1/sqrt(8)
  expect_fused(f);
  f = {};
  f.where_mask_input = true;  // negated by a Not
  Built b = build_attention(f);
  auto opt = fused(b.g);
  EXPECT_EQ(count_ops(*opt, Op::Not), 1) << passes::graph_text(*opt);
  EXPECT_EQ(count_ops(*opt, Op::Attention), 1);
  testing::expect_same_outputs(*b.g, *opt, attention_inputs(f), /*exact=*/false);
}

TEST(AttentionFusion, broadcasting_between_q_and_k_or_a_widening_mask_keeps_the_block) {
  AttentionForm f;
  f.q_batch = 3;  // K^T and V broadcast over Q's batch: Attention does not broadcast
  Built b = build_attention(f);
  auto opt = fused(b.g);
  EXPECT_EQ(count_ops(*opt, Op::Attention), 0) << passes::graph_text(*opt);
  testing::expect_same_outputs(*b.g, *opt, attention_inputs(f));
  f = {};
  f.mask = Mask::Additive;
  f.mask_shape = {2, 1, 4, 4};  // widens the scores to batch 2
  b = build_attention(f);
  opt = fused(b.g);
  EXPECT_EQ(count_ops(*opt, Op::Attention), 0) << passes::graph_text(*opt);
  testing::expect_same_outputs(*b.g, *opt, attention_inputs(f));
}

}  // namespace
}  // namespace terrace
