// Symbolic dims on tier 1 (issue 36): a region fed many sizes of one dim ends with one symbolic
// version serving them (no interpreter after it is published, every answer the interpreter's),
// its guards as data, a broken dim equality not served by it, and regions that cannot be made
// symbolic refusing cleanly.
#include <gtest/gtest.h>

#include "interp/compare.h"
#include "tests/support/graph_builder.h"
#include "tests/support/session_helpers.h"
#include "tiers/session.h"
#include "tiers/symbolic_lowering.h"
#include "tiers/tier_manager.h"

namespace terrace {
namespace {

using testing::GraphBuilder;
using testing::random_tensor;

// softmax(a * b + 1, last axis) + relu(a): elementwise ops and a reduction over rows of `cols`,
// `a` and `b` both [rows, cols] (the code indexes both by one row count).
std::shared_ptr<Graph> rows_model(int64_t cols) {
  GraphBuilder g;
  int a = g.input("a", DType::Float32, {-1, cols});
  int b = g.input("b", DType::Float32, {-1, cols});
  int one = g.constant("one", Tensor::scalar<float>(1.0f));
  int sm = g.node(Op::Softmax, {g.node(Op::Add, {g.node(Op::Mul, {a, b}), one})}, {{"axis", GraphBuilder::attr_int(-1)}});
  g.output(g.node(Op::Add, {sm, g.node(Op::Relu, {a})}));
  return g.build();
}

NamedTensors rows_inputs(int64_t rows_a, int64_t rows_b, int64_t cols, uint64_t seed) {
  return {{"a", random_tensor({rows_a, cols}, seed, -3, 3)}, {"b", random_tensor({rows_b, cols}, seed + 1, -3, 3)}};
}

void expect_interpreters_answer(const std::shared_ptr<Graph>& g, const NamedTensors& in, const NamedTensors& got) {
  const NamedTensors want = Session::from_graph(g, testing::on_tier(Tier::Interp))->run(in);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    Comparison c = compare_tensors(want[i].second, got[i].second, Tolerance::for_dtype(DType::Float32));
    EXPECT_TRUE(c.equal) << want[i].first << ": " << c.message;
  }
}

// The one region's report.
RegionReport only_region(const Session& s) {
  std::vector<RegionReport> r = s.region_reports();
  EXPECT_EQ(r.size(), 1u);
  return r.empty() ? RegionReport{} : r.front();
}

TEST(SymbolicDims, many_row_counts_end_with_one_symbolic_version_and_no_interpreter) {
  if (!testing::have_tier1()) GTEST_SKIP() << "no tier-1 JIT in this build";
  auto g = rows_model(24);
  auto s = Session::from_graph(g, testing::on_tier(Tier::Cpu));
  for (int64_t rows : {3, 4, 5}) {  // the third size makes the region compile its symbolic version
    s->run(rows_inputs(rows, rows, 24, uint64_t(rows)));
    s->wait_for_compiles();
  }
  ASSERT_EQ(only_region(*s).symbolic, "published") << s->report_json();
  // Size 1 lowers to another program (its strides folded away): the symbolic version takes 2 and up.
  for (int64_t rows = 2; rows <= 40; ++rows) {
    const NamedTensors in = rows_inputs(rows, rows, 24, uint64_t(100 + rows));
    const NamedTensors got = s->run(in);
    expect_interpreters_answer(g, in, got);
    EXPECT_EQ(s->last_call().tiers, std::vector<std::string>{"cpu"}) << "rows " << rows;
    s->wait_for_compiles();
  }
  const RegionReport r = only_region(*s);
  EXPECT_LE(r.versions, 3) << s->report_json();  // the exact versions of before, and the symbolic one
  int symbolic = 0;
  for (const RegionReport::VersionInfo& v : r.version_list)
    if (v.kind == "symbolic") {
      ++symbolic;
      EXPECT_NE(v.guards.find("input 0 dim 0 in [2, "), std::string::npos) << v.guards;
      EXPECT_NE(v.guards.find("input 1 dim 0 == input 0 dim 0"), std::string::npos) << v.guards;
      EXPECT_NE(v.signature.find("float32[d,24]"), std::string::npos) << v.signature;
      EXPECT_GE(v.calls, 35);
    }
  EXPECT_EQ(symbolic, 1) << s->report_json();
  EXPECT_EQ(r.validation, "passed");
  // Size 1, outside its range, gets an exact version once hot, as before symbolic versions.
  const NamedTensors one = rows_inputs(1, 1, 24, 7);
  for (int call = 0; call < 3; ++call) {
    expect_interpreters_answer(g, one, s->run(one));
    s->wait_for_compiles();
  }
  expect_interpreters_answer(g, one, s->run(one));
  EXPECT_EQ(s->last_call().tiers, std::vector<std::string>{"cpu"}) << s->report_json();
}

TEST(SymbolicDims, a_broken_dim_equality_is_not_served_by_the_symbolic_version) {
  if (!testing::have_tier1()) GTEST_SKIP() << "no tier-1 JIT in this build";
  auto g = rows_model(8);
  auto s = Session::from_graph(g, testing::on_tier(Tier::Cpu));
  for (int64_t rows : {3, 4, 5, 6}) {
    s->run(rows_inputs(rows, rows, 8, uint64_t(rows)));
    s->wait_for_compiles();
  }
  ASSERT_EQ(only_region(*s).symbolic, "published") << s->report_json();
  auto symbolic_calls = [&] {
    for (const RegionReport::VersionInfo& v : only_region(*s).version_list)
      if (v.kind == "symbolic") return v.calls;
    return int64_t(-1);
  };
  const int64_t before = symbolic_calls();
  // b broadcast along rows: valid ONNX, but not the equal row counts the symbolic code indexes by.
  const NamedTensors in = rows_inputs(7, 1, 8, 77);
  expect_interpreters_answer(g, in, s->run(in));
  EXPECT_EQ(symbolic_calls(), before) << s->report_json();
  const RegionReport r = only_region(*s);
  ASSERT_FALSE(r.guard_failures.empty());
  EXPECT_NE(r.guard_failures.front().find("input 1 dim 0 == input 0 dim 0: saw 1"), std::string::npos)
      << r.guard_failures.front();
}

TEST(SymbolicDims, guards_as_data_check_range_and_equality) {
  const std::vector<Tensor> in = {Tensor::empty(DType::Float32, {5, 3}), Tensor::empty(DType::Float32, {5, 3})};
  const GuardSet g = GuardSet::symbolic(in, {{0, 0}, {1, 0}}, 2, 64);
  EXPECT_FALSE(g.check(in));
  EXPECT_FALSE(g.check({Tensor::empty(DType::Float32, {64, 3}), Tensor::empty(DType::Float32, {64, 3})}));
  auto fails = [&](Shape a, Shape b) {
    return g.check({Tensor::empty(DType::Float32, a), Tensor::empty(DType::Float32, b)}).value_or(GuardFailure{}).describe();
  };
  EXPECT_EQ(fails({1, 3}, {1, 3}), "input 0 dim 0 in [2, 64]: saw 1");
  EXPECT_EQ(fails({65, 3}, {65, 3}), "input 0 dim 0 in [2, 64]: saw 65");
  EXPECT_EQ(fails({5, 3}, {6, 3}), "input 1 dim 0 == input 0 dim 0: saw 6");
  EXPECT_EQ(fails({5, 4}, {5, 3}), "input 0 dim 1: expected 3, saw 4");  // the other dims stay exact
  // A tiled schedule's class: sizes not divisible by 8 only.
  const GuardSet tiled = GuardSet::symbolic(in, {{0, 0}, {1, 0}}, 2, 64, {}, {}, 8, false);
  EXPECT_FALSE(tiled.check(in));
  const std::vector<Tensor> sixteen = {Tensor::empty(DType::Float32, {16, 3}), Tensor::empty(DType::Float32, {16, 3})};
  EXPECT_EQ(tiled.check(sixteen).value_or(GuardFailure{}).describe(), "input 0 dim 0 % 8 != 0: saw 16");
}

TEST(SymbolicDims, a_hot_size_gets_an_exact_version_beside_the_symbolic_one) {
  if (!testing::have_tier1()) GTEST_SKIP() << "no tier-1 JIT in this build";
  auto g = rows_model(8);
  auto s = Session::from_graph(g, testing::on_tier(Tier::Cpu));
  for (int64_t rows : {3, 4, 5}) {
    s->run(rows_inputs(rows, rows, 8, uint64_t(rows)));
    s->wait_for_compiles();
  }
  ASSERT_EQ(only_region(*s).symbolic, "published") << s->report_json();
  const NamedTensors seven = rows_inputs(7, 7, 8, 70);
  for (int call = 0; call < int(20); ++call) {  // 20 of the 23 counted calls: hot (kHotCalls 16, a quarter)
    expect_interpreters_answer(g, seven, s->run(seven));
    s->wait_for_compiles();
  }
  bool exact = false;
  for (const RegionReport::VersionInfo& v : only_region(*s).version_list)
    exact = exact || (v.kind == "static" && v.signature == "float32[7,8],float32[7,8],float32[]" && v.calls > 0);
  EXPECT_TRUE(exact) << s->report_json();
  EXPECT_EQ(only_region(*s).versions, 2) << s->report_json();
}

TEST(SymbolicDims, two_dims_varying_apart_refuse) {
  std::string why;
  const auto sig = [](Shape a) { return Signature({Tensor::empty(DType::Float32, a)}); };
  EXPECT_FALSE(find_symbolic_dim({sig({2, 3}), sig({3, 3}), sig({3, 4})}, why));
  EXPECT_NE(why.find("two dims vary independently"), std::string::npos) << why;
  std::optional<SymbolicDim> one = find_symbolic_dim({sig({2, 3}), sig({3, 3}), sig({9, 3})}, why);
  ASSERT_TRUE(one);
  EXPECT_EQ(one->describe(), "input 0 dim 0");
}

TEST(SymbolicDims, with_validation_off_a_region_keeps_static_versions) {
  if (!testing::have_tier1()) GTEST_SKIP() << "no tier-1 JIT in this build";
  Options o = testing::on_tier(Tier::Cpu);
  o.validate = ValidateMode::Off;
  auto s = Session::from_graph(rows_model(8), o);
  for (int64_t rows : {3, 4, 5}) s->run(rows_inputs(rows, rows, 8, uint64_t(rows)));
  EXPECT_NE(only_region(*s).symbolic.find("refused: validation is off"), std::string::npos) << s->report_json();
}

// x [rows, 16] . W (+ Relu when `relu`): a library (oneDNN) region.
std::shared_ptr<Graph> product_model(bool relu) {
  GraphBuilder b;
  int x = b.input("x", DType::Float32, {-1, 16});
  int y = b.node(Op::MatMul, {x, b.constant("w", random_tensor({16, 4}, 3))});
  b.output(relu ? b.node(Op::Relu, {y}) : y);
  return b.build();
}

TEST(SymbolicDims, a_product_takes_its_rows_at_run_time_and_one_with_an_activation_stays_static) {
  if (!testing::have_tier1()) GTEST_SKIP() << "no tier-1 JIT in this build";
  for (bool relu : {false, true}) {
    auto g = product_model(relu);
    auto s = Session::from_graph(g, testing::on_tier(Tier::Cpu));
    for (int64_t rows : {2, 3, 4}) {
      s->run({{"x", random_tensor({rows, 16}, uint64_t(rows))}});
      s->wait_for_compiles();
    }
    const std::string state = only_region(*s).symbolic;
    if (relu) {
      EXPECT_NE(state.find("refused: a MatMul region with an activation"), std::string::npos) << state;
      continue;
    }
    ASSERT_EQ(state, "published") << s->report_json();
    for (int64_t rows : {5, 1, 17, 300}) {
      const NamedTensors in = {{"x", random_tensor({rows, 16}, uint64_t(rows))}};
      expect_interpreters_answer(g, in, s->run(in));
      EXPECT_EQ(s->last_call().tiers, std::vector<std::string>{"cpu"}) << "rows " << rows;
    }
    EXPECT_EQ(only_region(*s).versions, 1) << s->report_json();
  }
}

// An attention's product: a [2, rows, 8] . b [2, 8, rows], both computed.
TEST(SymbolicDims, a_batched_product_of_computed_operands_takes_its_dims_at_run_time) {
  if (!testing::have_tier1()) GTEST_SKIP() << "no tier-1 JIT in this build";
  GraphBuilder b;
  int x = b.input("a", DType::Float32, {2, -1, 8});
  int y = b.input("b", DType::Float32, {2, 8, -1});
  b.output(b.node(Op::MatMul, {x, y}));
  auto g = b.build();
  auto s = Session::from_graph(g, testing::on_tier(Tier::Cpu));
  auto inputs = [](int64_t rows) {
    return NamedTensors{{"a", random_tensor({2, rows, 8}, uint64_t(rows))}, {"b", random_tensor({2, 8, rows}, 9)}};
  };
  for (int64_t rows : {2, 3, 4}) {
    s->run(inputs(rows));
    s->wait_for_compiles();
  }
  ASSERT_EQ(only_region(*s).symbolic, "published") << s->report_json();
  for (int64_t rows : {1, 5, 33, 130}) {
    expect_interpreters_answer(g, inputs(rows), s->run(inputs(rows)));
    EXPECT_EQ(s->last_call().tiers, std::vector<std::string>{"cpu"}) << "rows " << rows;
  }
  EXPECT_EQ(only_region(*s).versions, 1) << s->report_json();
}

}  // namespace
}  // namespace terrace
