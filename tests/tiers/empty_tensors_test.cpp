// Empty tensors on every tier: one op with a zero-sized dimension in each position of each
// operand, run through a Session until tier 1 has taken every region it can, and compared with
// the interpreter call by call. oneDNN kills the process (SIGFPE) on such shapes on AVX-512
// machines if it is ever handed one; ctest runs this suite again with DNNL_MAX_CPU_ISA=AVX2 so
// that the AVX2 path is covered on an AVX-512 machine too.
#include <gtest/gtest.h>

#include <map>

#include "interp/compare.h"
#include "tests/support/graph_builder.h"
#include "tiers/session.h"

namespace terrace {
namespace {

using testing::GraphBuilder;
using testing::random_tensor;
using Ints = std::vector<int64_t>;

struct Case {
  std::string name;
  Op op;
  std::vector<Shape> inputs;
  std::map<std::string, Attribute> attrs;
  bool relu_after = false;  // a Relu reading the op's result (fused into a oneDNN primitive)
  std::vector<Ints> constant_inputs = {};  // int64 inputs after the float ones (axes)
};

Attribute ints(Ints v) { return GraphBuilder::attr_ints(std::move(v)); }
Attribute one(int64_t v) { return GraphBuilder::attr_int(v); }

std::vector<Case> cases() {
  return {
      {"matmul_M0", Op::MatMul, {{0, 5}, {5, 3}}, {}},
      {"matmul_K0", Op::MatMul, {{4, 0}, {0, 3}}, {}, true},
      {"matmul_N0", Op::MatMul, {{4, 5}, {5, 0}}, {}, true},
      {"matmul_batch0", Op::MatMul, {{0, 4, 5}, {5, 3}}, {}},
      {"gemm_M0", Op::Gemm, {{0, 5}, {5, 3}, {3}}, {}, true},
      {"gemm_transA_K0", Op::Gemm, {{0, 4}, {0, 3}, {4, 3}}, {{"transA", one(1)}}},
      {"gemm_transB_N0", Op::Gemm, {{4, 5}, {0, 5}}, {{"transB", one(1)}}},
      {"gemm_transB_M0_N0", Op::Gemm, {{0, 5}, {0, 5}}, {{"transB", one(1)}}},
      {"conv_batch0", Op::Conv, {{0, 3, 8, 8}, {4, 3, 3, 3}, {4}}, {}, true},
      {"conv_cin0", Op::Conv, {{1, 0, 8, 8}, {4, 0, 3, 3}, {4}}, {}, true},
      {"conv_cout0", Op::Conv, {{1, 3, 8, 8}, {0, 3, 3, 3}}, {}},
      {"conv_height0_padded", Op::Conv, {{1, 3, 0, 4}, {4, 3, 1, 1}, {4}}, {{"pads", ints({1, 0, 1, 0})}}},
      {"maxpool_batch0", Op::MaxPool, {{0, 3, 8, 8}}, {{"kernel_shape", ints({2, 2})}}},
      {"maxpool_channels0", Op::MaxPool, {{1, 0, 8, 8}}, {{"kernel_shape", ints({2, 2})}}},
      {"averagepool_batch0", Op::AveragePool, {{0, 3, 8, 8}}, {{"kernel_shape", ints({3, 3})}}},
      {"globalaveragepool_channels0", Op::GlobalAveragePool, {{2, 0, 4, 4}}, {}},
      {"reducesum_rows0", Op::ReduceSum, {{0, 4}}, {{"keepdims", one(0)}}, false, {{0}}},
      {"reducesum_cols0", Op::ReduceSum, {{4, 0}}, {}, false, {{1}}},
      {"reducemean_all_of_empty", Op::ReduceMean, {{3, 0}}, {{"keepdims", one(0)}}, false, {{0}}},
      {"softmax_rows0", Op::Softmax, {{0, 5}}, {}},
      {"softmax_axis_len0", Op::Softmax, {{4, 0}}, {}},
      {"layernorm_rows0", Op::LayerNormalization, {{0, 8}, {8}, {8}}, {{"axis", one(-1)}}},
      {"layernorm_features0", Op::LayerNormalization, {{4, 0}, {0}, {0}}, {{"axis", one(-1)}}},
      {"concat_first_empty", Op::Concat, {{0, 3}, {2, 3}}, {{"axis", one(0)}}},
      {"concat_second_empty", Op::Concat, {{2, 3}, {2, 0}}, {{"axis", one(1)}}},
      {"concat_all_empty", Op::Concat, {{2, 0}, {2, 0}}, {{"axis", one(0)}}},
      {"add_broadcast_empty", Op::Add, {{0, 3}, {3}}, {}, true},
      {"add_empty_against_one", Op::Add, {{4, 0}, {4, 1}}, {}},
      {"sigmoid_empty", Op::Sigmoid, {{2, 0, 3}}, {}},
  };
}

std::shared_ptr<Graph> model_of(const Case& c) {
  GraphBuilder g;
  std::vector<int> in;
  for (size_t i = 0; i < c.inputs.size(); ++i) in.push_back(g.input("x" + std::to_string(i), DType::Float32, c.inputs[i]));
  for (size_t i = 0; i < c.constant_inputs.size(); ++i) {
    const Ints& v = c.constant_inputs[i];
    in.push_back(g.constant("axes" + std::to_string(i), Tensor::from_vector<int64_t>({int64_t(v.size())}, v)));
  }
  int y = g.node(c.op, in, c.attrs);
  if (c.relu_after) y = g.node(Op::Relu, {y});
  g.output(y);
  auto graph = g.build();
  return graph;
}

Options with_tier(Tier t) {
  Options o;
  o.max_tier = t;
  o.cache_dir = "";
  return o;
}

TEST(EmptyTensors, every_op_with_a_zero_dim_gives_the_interpreters_answer_on_every_tier) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    auto graph = model_of(c);
    NamedTensors in;
    for (size_t i = 0; i < c.inputs.size(); ++i)
      in.emplace_back("x" + std::to_string(i), random_tensor(c.inputs[i], 7 + i));
    NamedTensors want = Session::from_graph(graph, with_tier(Tier::Interp))->run(in);
    auto s = Session::from_graph(graph, with_tier(Tier::Cpu));
    for (int call = 0; call < 6; ++call) {
      NamedTensors got;
      ASSERT_NO_THROW(got = s->run(in));
      ASSERT_EQ(got.size(), want.size());
      EXPECT_EQ(got[0].second.shape(), want[0].second.shape());
      Comparison cmp = compare_tensors(want[0].second, got[0].second, Tolerance::for_dtype(DType::Float32));
      EXPECT_TRUE(cmp.equal) << "call " << call << ": " << cmp.message;
      s->wait_for_compiles();
    }
    // Every region tier 1 can take ran there (nothing fell back because of the empty shapes).
    const std::string json = s->report_json();
    EXPECT_EQ(json.find("compile failed"), std::string::npos) << json;
    EXPECT_EQ(json.find("validation\":\"failed"), std::string::npos) << json;
    if (c.op == Op::MatMul || c.op == Op::Gemm || c.op == Op::Conv || c.op == Op::Add || c.op == Op::Sigmoid)
      EXPECT_NE(json.find("\"tier\":\"cpu\""), std::string::npos) << "no region reached tier 1: " << json;
  }
}

// What ONNX defines, checked against the spec rather than the interpreter: an empty sum is 0, a
// Gemm with K = 0 is beta * C, a Conv without input channels is its bias, and a Relu after them
// sees those values. (The test above holds every tier to the interpreter; this one holds the
// interpreter to ONNX on the cases where the interpreter's own answer is not obvious.)
TEST(EmptyTensors, empty_sums_are_what_onnx_defines) {
  auto run_on_cpu = [](const Case& c, const NamedTensors& in) {
    auto s = Session::from_graph(model_of(c), with_tier(Tier::Cpu));
    NamedTensors out;
    for (int call = 0; call < 4; ++call) {
      out = s->run(in);
      s->wait_for_compiles();
    }
    return out[0].second;
  };
  Tensor c3 = Tensor::from_vector<float>({3}, {1.0f, -2.0f, 3.0f});
  Tensor y = run_on_cpu({"gemm", Op::Gemm, {{2, 0}, {0, 3}, {3}}, {{"beta", GraphBuilder::attr_float(2.0f)}}},
                        {{"x0", Tensor::empty(DType::Float32, {2, 0})},
                         {"x1", Tensor::empty(DType::Float32, {0, 3})}, {"x2", c3}});
  ASSERT_EQ(y.shape(), (Shape{2, 3}));
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(y.data<float>()[i], 2.0f * c3.data<float>()[i % 3]);
  Tensor bias = Tensor::from_vector<float>({2}, {0.5f, -0.25f});
  y = run_on_cpu({"conv", Op::Conv, {{1, 0, 3, 3}, {2, 0, 1, 1}, {2}}, {}, true},
                 {{"x0", Tensor::empty(DType::Float32, {1, 0, 3, 3})},
                  {"x1", Tensor::empty(DType::Float32, {2, 0, 1, 1})}, {"x2", bias}});
  ASSERT_EQ(y.shape(), (Shape{1, 2, 3, 3}));
  for (int64_t i = 0; i < 9; ++i) {
    EXPECT_EQ(y.data<float>()[i], 0.5f);
    EXPECT_EQ(y.data<float>()[9 + i], 0.0f);  // Relu(-0.25)
  }
  y = run_on_cpu({"reducesum", Op::ReduceSum, {{4, 0}}, {{"keepdims", one(0)}}, false, {{1}}},
                 {{"x0", Tensor::empty(DType::Float32, {4, 0})}});
  ASSERT_EQ(y.shape(), (Shape{4}));
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(y.data<float>()[i], 0.0f);
}

}  // namespace
}  // namespace terrace
