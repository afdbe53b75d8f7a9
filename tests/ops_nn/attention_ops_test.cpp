// Opset 23's RMSNormalization, RotaryEmbedding and Attention: formulas on small inputs worked by
// hand, the reference's conventions (3-D reshapes, grouped heads), and errors naming the node.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/support/node_runner.h"

namespace terrace::testing {
namespace {

TEST(RMSNormalization, divides_by_the_root_mean_square_of_the_trailing_axes) {
  Tensor x = Tensor::from_vector<float>({2, 2}, {3, 4, 1, -1});
  Tensor scale = Tensor::from_vector<float>({2}, {1, 2});
  std::vector<float> y = values_of<float>(run1(Op::RMSNormalization, {x, scale}, {{"epsilon", 0.0f}}));
  const float r0 = std::sqrt(12.5f), r1 = 1.0f;  // mean(9, 16), mean(1, 1)
  EXPECT_FLOAT_EQ(y[0], 3 / r0);
  EXPECT_FLOAT_EQ(y[1], 2 * 4 / r0);
  EXPECT_FLOAT_EQ(y[2], 1 / r1);
  EXPECT_FLOAT_EQ(y[3], -2 / r1);
  // axis 0: one group over every element, mean(9, 16, 1, 1) = 6.75; scale [2, 2] per element.
  Tensor s2 = Tensor::from_vector<float>({2, 2}, {1, 1, 1, 1});
  std::vector<float> all = values_of<float>(run1(Op::RMSNormalization, {x, s2}, {{"axis", 0}, {"epsilon", 0.0f}}));
  EXPECT_FLOAT_EQ(all[1], 4 / std::sqrt(6.75f));
}

// One head of 4 features at positions 0 and 1: angle 0 leaves x alone, angle pi/2 rotates.
TEST(RotaryEmbedding, rotates_halves_or_interleaved_pairs_by_position) {
  Tensor x = Tensor::from_vector<float>({1, 1, 2, 4}, {1, 2, 3, 4, 1, 2, 3, 4});  // [b, heads, seq, head]
  Tensor cos = Tensor::from_vector<float>({2, 2}, {1, 1, 0, 0});
  Tensor sin = Tensor::from_vector<float>({2, 2}, {0, 0, 1, 1});
  Tensor pos = Tensor::from_vector<int64_t>({1, 2}, {0, 1});
  std::vector<float> halves = values_of<float>(run1(Op::RotaryEmbedding, {x, cos, sin, pos}));
  // position 1, halves (1, 2) and (3, 4): real = -x2, imag = x1.
  EXPECT_EQ(halves, (std::vector<float>{1, 2, 3, 4, -3, -4, 1, 2}));
  std::vector<float> pairs = values_of<float>(run1(Op::RotaryEmbedding, {x, cos, sin, pos}, {{"interleaved", 1}}));
  // pairs (1, 2) and (3, 4): (x1, x2) -> (-x2, x1).
  EXPECT_EQ(pairs, (std::vector<float>{1, 2, 3, 4, -2, 1, -4, 3}));
}

TEST(RotaryEmbedding, a_position_past_the_cache_is_an_error_naming_the_node) {
  Tensor x = Tensor::from_vector<float>({1, 1, 1, 2}, {1, 2});
  Tensor c = Tensor::from_vector<float>({1, 1}, {1});
  Tensor pos = Tensor::from_vector<int64_t>({1, 1}, {5});
  Error e = error_of([&] { run1(Op::RotaryEmbedding, {x, c, c, pos}); });
  EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(e.message().find("node_under_test"), std::string::npos);
  EXPECT_NE(e.message().find("position id 5"), std::string::npos);
}

// Q, K, V of one batch and head, two positions, head size 1.
TEST(Attention, causal_rows_attend_to_earlier_positions_only) {
  Tensor q = Tensor::from_vector<float>({1, 1, 2, 1}, {1, 1});
  Tensor k = Tensor::from_vector<float>({1, 1, 2, 1}, {0, 0});
  Tensor v = Tensor::from_vector<float>({1, 1, 2, 1}, {10, 20});
  std::vector<float> full = values_of<float>(run1(Op::Attention, {q, k, v}));
  EXPECT_FLOAT_EQ(full[0], 15) << "equal scores: the mean of V";
  std::vector<float> causal = values_of<float>(run1(Op::Attention, {q, k, v}, {{"is_causal", 1}}));
  EXPECT_FLOAT_EQ(causal[0], 10) << "position 0 sees only itself";
  EXPECT_FLOAT_EQ(causal[1], 15);
  Tensor mask = Tensor::from_vector<bool>({2, 2}, {false, true, true, true});
  std::vector<float> masked = values_of<float>(run1(Op::Attention, {q, k, v, mask}));
  EXPECT_FLOAT_EQ(masked[0], 20) << "a false mask entry removes the key";
}

TEST(Attention, query_head_h_reads_key_value_head_h_mod_kv_heads_and_returns_the_cache) {
  // 4 query heads, 2 key/value heads; one position, head size 1; scores all 0.
  Tensor q = Tensor::from_vector<float>({1, 4, 1, 1}, {0, 0, 0, 0});
  Tensor k = Tensor::from_vector<float>({1, 2, 1, 1}, {0, 0});
  Tensor v = Tensor::from_vector<float>({1, 2, 1, 1}, {10, 20});
  Tensor past_k = Tensor::from_vector<float>({1, 2, 1, 1}, {0, 0});
  Tensor past_v = Tensor::from_vector<float>({1, 2, 1, 1}, {30, 40});
  std::vector<Tensor> out = run_op(Op::Attention, {q, k, v, Tensor(), past_k, past_v}, {}, 3);
  // head h reads kv head h % 2: means of (30, 10), (40, 20), (30, 10), (40, 20).
  EXPECT_EQ(values_of<float>(out[0]), (std::vector<float>{20, 30, 20, 30}));
  EXPECT_EQ(out[2].shape(), Shape({1, 2, 2, 1}));
  EXPECT_EQ(values_of<float>(out[2]), (std::vector<float>{30, 10, 40, 20}));
}

TEST(Attention, three_d_inputs_need_head_counts_naming_the_node) {
  Tensor q = Tensor::from_vector<float>({1, 2, 4}, {0, 0, 0, 0, 0, 0, 0, 0});
  Error e = error_of([&] { run1(Op::Attention, {q, q, q}); });
  EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(e.message().find("node_under_test"), std::string::npos);
  EXPECT_NE(e.message().find("q_num_heads"), std::string::npos);
}

}  // namespace
}  // namespace terrace::testing
