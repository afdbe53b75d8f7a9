// Sequence and optional reference kernels, one node at a time.
#include <gtest/gtest.h>

#include "interp/interpreter.h"

namespace terrace {
namespace {

Node make_node(Op op, int n_in, std::map<std::string, int64_t> int_attrs = {}) {
  Node n;
  n.op = op;
  n.name = "n";
  for (int i = 0; i < n_in; ++i) n.inputs.push_back(i);
  n.outputs = {n_in};
  for (auto& [k, v] : int_attrs) {
    Attribute a;
    a.i = v;
    n.attrs[k] = a;
  }
  return n;
}

RValue run1(const Node& n, const std::vector<RValue>& in) {
  std::vector<const RValue*> p;
  for (auto& v : in) p.push_back(v.defined() ? &v : nullptr);
  return interpret_node(n, p)[0];
}

RValue i64(int64_t v) { return RValue(Tensor::scalar<int64_t>(v)); }

TEST(Sequence, insert_at_and_erase_follow_positions_including_negative_ones) {
  RValue s = RValue::sequence({Tensor::scalar<int64_t>(1), Tensor::scalar<int64_t>(3)});
  s = run1(make_node(Op::SequenceInsert, 3), {s, i64(2), i64(-1)});  // before the last
  ASSERT_EQ(s.seq.size(), 3u);
  EXPECT_EQ(s.seq[1].get_as_int64(0), 2);
  EXPECT_EQ(run1(make_node(Op::SequenceAt, 2), {s, i64(-1)}).tensor.get_as_int64(0), 3);
  s = run1(make_node(Op::SequenceErase, 2), {s, i64(0)});
  EXPECT_EQ(run1(make_node(Op::SequenceLength, 1), {s}).tensor.get_as_int64(0), 2);
  EXPECT_THROW(run1(make_node(Op::SequenceAt, 2), {s, i64(2)}), Error);
}

TEST(Sequence, split_then_concat_restores_the_tensor) {
  Tensor x = Tensor::from_vector<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  RValue parts = run1(make_node(Op::SplitToSequence, 2, {{"axis", 1}}),
                      {RValue(x), RValue(Tensor::from_vector<int64_t>({2}, {1, 2}))});
  ASSERT_EQ(parts.seq.size(), 2u);
  EXPECT_EQ(parts.seq[1].shape(), (Shape{2, 2}));
  Tensor back = run1(make_node(Op::ConcatFromSequence, 1, {{"axis", 1}}), {parts}).tensor;
  ASSERT_EQ(back.shape(), x.shape());
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(back.get_as_double(i), x.get_as_double(i));
}

TEST(Sequence, split_without_keepdims_drops_the_axis_and_new_axis_stacks) {
  Tensor x = Tensor::from_vector<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  RValue parts = run1(make_node(Op::SplitToSequence, 1, {{"axis", 0}, {"keepdims", 0}}), {RValue(x)});
  ASSERT_EQ(parts.seq.size(), 2u);
  EXPECT_EQ(parts.seq[0].shape(), (Shape{3}));
  Tensor stacked =
      run1(make_node(Op::ConcatFromSequence, 1, {{"axis", -1}, {"new_axis", 1}}), {parts}).tensor;
  EXPECT_EQ(stacked.shape(), (Shape{3, 2}));
  EXPECT_EQ(stacked.get_as_double(1), 4);
}

TEST(Optional, wraps_reports_and_unwraps_elements) {
  RValue empty = run1(make_node(Op::Optional, 0), {});
  EXPECT_EQ(empty.kind, ValueKind::Optional);
  EXPECT_FALSE(run1(make_node(Op::OptionalHasElement, 1), {empty}).tensor.data<bool>()[0]);
  EXPECT_THROW(run1(make_node(Op::OptionalGetElement, 1), {empty}), Error);
  RValue full = run1(make_node(Op::Optional, 1), {RValue::sequence({Tensor::scalar<float>(1)})});
  EXPECT_TRUE(run1(make_node(Op::OptionalHasElement, 1), {full}).tensor.data<bool>()[0]);
  EXPECT_EQ(run1(make_node(Op::OptionalGetElement, 1), {full}).kind, ValueKind::Sequence);
}

}  // namespace
}  // namespace terrace
