// Data movement in tier 1's regions: small graphs whose movement ops (kernels/lower_movement*.cpp)
// join the elementwise ops around them in one compiled region, run through a Session on tier cpu
// and compared with the interpreter; a Gather's bad run-time index is InvalidArgument everywhere.
#include <gtest/gtest.h>

#include <cstring>

#include "interp/compare.h"
#include "tests/support/graph_builder.h"
#include "tiers/session.h"

namespace terrace {
namespace {

using testing::GraphBuilder;
using testing::random_tensor;

Tensor ints(std::vector<int64_t> v) { return Tensor::from_vector<int64_t>({int64_t(v.size())}, v); }

Options on_tier(Tier t) {
  Options o;
  o.max_tier = t;
  return o;
}

NamedTensors reference(const std::shared_ptr<Graph>& g, const NamedTensors& in) {
  return Session::from_graph(g, on_tier(Tier::Interp))->run(in);
}

bool ran_cpu(const Session& s) {
  for (const auto& t : s.last_call().tiers)
    if (t == "cpu") return true;
  return false;
}

// Promotes the session's regions (two calls make a signature hot), then checks that the plan is
// one region with no graph break, that the next calls run on tier 1, and that they agree with
// the interpreter (movement is exact; the elementwise ops within DESIGN.md's tolerance).
void expect_one_compiled_region_matching_interpreter(const std::shared_ptr<Graph>& g, const NamedTensors& in,
                                                     const std::string& ops) {
  auto s = Session::from_graph(g, on_tier(Tier::Cpu));
  ASSERT_EQ(s->plan().regions.size(), 1u);
  EXPECT_EQ(s->plan().regions[0].ops(), ops);
  for (const Step& st : s->plan().steps) EXPECT_GE(st.region, 0) << "graph break: " << st.reason;
  for (int i = 0; i < 3; ++i) {
    s->run(in);
    s->wait_for_compiles();
  }
  NamedTensors want = reference(g, in);
  for (int i = 0; i < 4; ++i) {  // validated calls, then unvalidated ones
    NamedTensors got = s->run(in);
    EXPECT_TRUE(ran_cpu(*s)) << s->report_json();
    ASSERT_EQ(got.size(), want.size());
    for (size_t j = 0; j < got.size(); ++j) {
      Comparison c = compare_tensors(want[j].second, got[j].second, Tolerance::for_dtype(want[j].second.dtype()));
      EXPECT_TRUE(c.equal) << got[j].first << ": " << c.message;
    }
  }
  EXPECT_EQ(s->report_json().find("demoted"), std::string::npos) << s->report_json();
}

// An attention-style reshuffle: Reshape to heads, Transpose, scale, Slice, Concat, Relu.
TEST(MovementRegions, reshape_transpose_slice_concat_with_elementwise_compile_as_one_region) {
  GraphBuilder g;
  int x = g.input("x", DType::Float32, {2, 8, 16});
  int heads = g.node(Op::Reshape, {x, g.constant("shape", ints({2, 8, 4, 4}))});
  int t = g.node(Op::Transpose, {heads}, {{"perm", GraphBuilder::attr_ints({0, 2, 1, 3})}});
  int scaled = g.node(Op::Mul, {t, g.constant("scale", Tensor::scalar<float>(0.25f))});
  int half = g.node(Op::Slice, {scaled, g.constant("starts", ints({2})), g.constant("ends", ints({100})),
                                g.constant("axes", ints({-1}))});
  int both = g.node(Op::Concat, {half, half}, {{"axis", GraphBuilder::attr_int(-1)}});
  g.output(g.node(Op::Relu, {both}));
  expect_one_compiled_region_matching_interpreter(g.build(), {{"x", random_tensor({2, 8, 16}, 1)}},
                                                  "Reshape,Transpose,Mul,Slice,Concat,Relu");
}

// A decoder-style upsampling: Pad (reflect), Resize (nearest x2), a residual Add, DepthToSpace.
TEST(MovementRegions, pad_resize_depth_to_space_with_elementwise_compile_as_one_region) {
  GraphBuilder g;
  int x = g.input("x", DType::Float32, {1, 4, 6, 6});
  int skip = g.input("skip", DType::Float32, {1, 4, 16, 16});
  int padded = g.node(Op::Pad, {x, g.constant("pads", ints({0, 0, 1, 1, 0, 0, 1, 1}))},
                      {{"mode", testing::str_attr("reflect")}});
  int up = g.node(Op::Resize, {padded, -1, g.constant("scales", Tensor::from_vector<float>({4}, {1, 1, 2, 2}))},
                  {{"mode", testing::str_attr("nearest")}});
  int sum = g.node(Op::Add, {up, skip});
  g.output(g.node(Op::DepthToSpace, {sum}, {{"blocksize", GraphBuilder::attr_int(2)}}));
  expect_one_compiled_region_matching_interpreter(
      g.build(), {{"x", random_tensor({1, 4, 6, 6}, 2)}, {"skip", random_tensor({1, 4, 16, 16}, 3)}},
      "Pad,Resize,Add,DepthToSpace");
}

// Split, Expand, Tile and GatherElements between elementwise ops.
TEST(MovementRegions, split_expand_tile_gather_elements_compile_as_one_region) {
  GraphBuilder g;
  int x = g.input("x", DType::Float32, {4, 6});
  int idx = g.input("idx", DType::Int64, {4, 3});
  int parts = g.node(Op::Split, {x, g.constant("split", ints({2, 4}))}, {{"axis", GraphBuilder::attr_int(1)}}, 2);
  int second = parts + 1;  // Split's outputs are consecutive values
  int picked = g.node(Op::GatherElements, {second, idx}, {{"axis", GraphBuilder::attr_int(1)}});
  int wide = g.node(Op::Expand, {g.node(Op::Neg, {parts}), g.constant("to", ints({3, 4, 2}))});
  int tiled = g.node(Op::Tile, {picked, g.constant("reps", ints({1, 2}))});
  g.output(g.node(Op::Exp, {tiled}));
  g.output(wide);
  Tensor iv = Tensor::from_vector<int64_t>({4, 3}, {0, 3, -1, 2, 2, 1, -4, 0, 3, 1, 1, 1});
  expect_one_compiled_region_matching_interpreter(g.build(), {{"x", random_tensor({4, 6}, 4)}, {"idx", iv}},
                                                  "Split,GatherElements,Neg,Expand,Tile,Exp");
}

// Embedding lookup: a Gather whose indices arrive with the call.
std::shared_ptr<Graph> embedding_model() {
  GraphBuilder g;
  int table = g.input("table", DType::Float32, {10, 4});
  int idx = g.input("idx", DType::Int64, {3});
  int rows = g.node(Op::Gather, {table, idx});
  g.output(g.node(Op::Add, {rows, g.constant("one", Tensor::scalar<float>(1.0f))}));
  return g.build();
}

TEST(MovementRegions, gather_with_run_time_indices_compiles_and_matches_interpreter) {
  expect_one_compiled_region_matching_interpreter(
      embedding_model(), {{"table", random_tensor({10, 4}, 5)}, {"idx", ints({9, -10, 3})}}, "Gather,Add");
}

TEST(MovementRegions, gather_with_a_bad_run_time_index_is_invalid_argument_on_every_tier) {
  auto g = embedding_model();
  NamedTensors good = {{"table", random_tensor({10, 4}, 6)}, {"idx", ints({1, 2, 3})}};
  NamedTensors bad = {{"table", good[0].second}, {"idx", ints({1, 10, 3})}};
  auto expect_invalid = [&](Session& s, const char* when) {
    try {
      s.run(bad);
      ADD_FAILURE() << when << ": no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << when << ": " << e.what();
      EXPECT_NE(e.message().find("Gather"), std::string::npos) << when << ": " << e.message();
      EXPECT_NE(e.message().find("10"), std::string::npos) << when << ": " << e.message();
    }
  };
  auto interp = Session::from_graph(g, on_tier(Tier::Interp));
  expect_invalid(*interp, "interpreter");
  auto s = Session::from_graph(g, on_tier(Tier::Cpu));
  expect_invalid(*s, "before promotion");
  auto promote = [&](Session& session) {
    for (int i = 0; i < 3; ++i) {
      session.run(good);
      session.wait_for_compiles();
    }
  };
  promote(*s);
  s->run(good);
  ASSERT_TRUE(ran_cpu(*s)) << s->report_json();
  expect_invalid(*s, "compiled, validated call");
  // A second session whose compiled version is past its validated calls, where the kernel's own
  // check is all that stands between the index and the table.
  auto late = Session::from_graph(g, on_tier(Tier::Cpu));
  promote(*late);
  for (int i = 0; i < 5; ++i) late->run(good);
  ASSERT_TRUE(ran_cpu(*late)) << late->report_json();
  expect_invalid(*late, "compiled call");
  // The good calls after it are still answered right, by the compiled version: the caller's bad
  // index is no fault of the compiled code, which stays.
  for (Session* session : {s.get(), late.get()}) {
    NamedTensors got = session->run(good), want = reference(g, good);
    Comparison c = compare_tensors(want[0].second, got[0].second, Tolerance::for_dtype(DType::Float32));
    EXPECT_TRUE(c.equal) << c.message;
    EXPECT_TRUE(ran_cpu(*session)) << session->report_json();
    EXPECT_EQ(session->report_json().find("demoted"), std::string::npos) << session->report_json();
  }
}

// The other index paths of tier 1's lowering with a bad run-time index, past the validated calls
// (the kernel's own check is all that stands between the index and the data): a Gather of single
// elements (a 1-D table) and GatherElements. Each is InvalidArgument naming the op and the index.
TEST(MovementRegions, single_element_gather_and_gather_elements_check_run_time_indices_on_tier1) {
  struct Case {
    const char* op;
    std::shared_ptr<Graph> graph;
    NamedTensors good, bad;
  };
  std::vector<Case> cases;
  {
    GraphBuilder g;
    int table = g.input("table", DType::Float32, {10});
    int idx = g.input("idx", DType::Int64, {3});
    g.output(g.node(Op::Add, {g.node(Op::Gather, {table, idx}), g.constant("one", Tensor::scalar<float>(1.0f))}));
    Tensor t = random_tensor({10}, 7);
    cases.push_back({"Gather", g.build(), {{"table", t}, {"idx", ints({0, -10, 9})}}, {{"table", t}, {"idx", ints({0, -11, 9})}}});
  }
  {
    GraphBuilder g;
    int data = g.input("data", DType::Float32, {4, 5});
    int idx = g.input("idx", DType::Int64, {4, 2});
    g.output(g.node(Op::Add, {g.node(Op::GatherElements, {data, idx}, {{"axis", GraphBuilder::attr_int(1)}}),
                              g.constant("one", Tensor::scalar<float>(1.0f))}));
    Tensor d = random_tensor({4, 5}, 8);
    Tensor ok = Tensor::from_vector<int64_t>({4, 2}, {0, 4, -5, 1, 2, 3, 4, -1});
    Tensor bad = Tensor::from_vector<int64_t>({4, 2}, {0, 4, -5, 1, 2, 5, 4, -1});
    cases.push_back({"GatherElements", g.build(), {{"data", d}, {"idx", ok}}, {{"data", d}, {"idx", bad}}});
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.op);
    auto s = Session::from_graph(c.graph, on_tier(Tier::Cpu));
    for (int i = 0; i < 3; ++i) {
      s->run(c.good);
      s->wait_for_compiles();
    }
    for (int i = 0; i < 5; ++i) s->run(c.good);
    ASSERT_TRUE(ran_cpu(*s)) << s->report_json();
    try {
      s->run(c.bad);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
      EXPECT_NE(e.message().find(c.op), std::string::npos) << e.message();
    }
    NamedTensors got = s->run(c.good), want = reference(c.graph, c.good);
    EXPECT_TRUE(compare_tensors(want[0].second, got[0].second, Tolerance::for_dtype(DType::Float32)).equal);
  }
}

}  // namespace
}  // namespace terrace

namespace terrace {
namespace {

// Transposes whose tiled copy has every kind of edge (K and J multiples of its 8 x 8 block or not,
// an outer dim around them): each block is a parallel item, the narrow last ones moved one by one.
TEST(MovementRegions, transposes_with_every_edge_of_the_tiled_copy_match_the_interpreter) {
  for (const Shape& shape : {Shape{16, 24}, Shape{13, 24}, Shape{16, 21}, Shape{13, 21}, Shape{3, 9, 17}, Shape{2, 8, 8}}) {
    GraphBuilder g;
    int x = g.input("x", DType::Float32, shape);
    std::vector<int64_t> perm(shape.size());
    for (size_t d = 0; d < perm.size(); ++d) perm[d] = int64_t(d);
    std::swap(perm[perm.size() - 2], perm.back());
    g.output(g.node(Op::Neg, {g.node(Op::Transpose, {x}, {{"perm", GraphBuilder::attr_ints(perm)}})}));
    SCOPED_TRACE(shape_str(shape));
    expect_one_compiled_region_matching_interpreter(g.build(), {{"x", random_tensor(shape, 41)}}, "Transpose,Neg");
  }
}

}  // namespace
}  // namespace terrace
