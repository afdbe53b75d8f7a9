// NaN, infinities, -0.0 and subnormals through tier 1, compared exactly with the interpreter (issue
// 9, point 3): not within a tolerance, which would take a subnormal flushed to zero (MXCSR's FTZ/DAZ,
// or -ffast-math's denormal mode) for the right answer, nor -0.0 for +0.0.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "tests/support/graph_builder.h"
#include "tiers/session.h"

namespace terrace {
namespace {

using testing::GraphBuilder;

// Ops whose every result is one correctly rounded IEEE operation (x * 2 is exact, so the add after
// it gives the same bits fused into an FMA or not): the same inputs must give the same bits on
// every tier.
std::shared_ptr<Graph> exact_ops_model() {
  GraphBuilder g;
  int x = g.input("x", DType::Float32, {-1});
  int y = g.input("y", DType::Float32, {-1});
  int two = g.constant("two", Tensor::scalar<float>(2.0f));
  int four = g.constant("four", Tensor::scalar<float>(4.0f));
  g.output(g.node(Op::Add, {g.node(Op::Mul, {x, two}), y}));  // 2x + y
  g.output(g.node(Op::Div, {x, four}));                       // x / 4: rounds inside the subnormals
  g.output(g.node(Op::Sub, {y, x}));                          // y - x: -0 when both are equal
  g.output(g.node(Op::Neg, {g.node(Op::Abs, {x})}));          // -|x|
  return g.build();
}

std::vector<float> special_values() {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float tiny = std::numeric_limits<float>::denorm_min();
  const float min = std::numeric_limits<float>::min();
  const float max = std::numeric_limits<float>::max();
  return {0.0f, -0.0f, tiny, -tiny, 3 * tiny, -7 * tiny, min / 2, -min / 4, min, -min, min * 3 / 4,
          nan, -nan, inf, -inf, max, -max, 1.5f, -2.25f, 1e-30f, 5 * tiny, -0.0f, tiny * 1001, 0.75f};
}

// n values: the special ones in turn, paired so that every x meets every y.
NamedTensors inputs(size_t n) {
  const std::vector<float> v = special_values();
  std::vector<float> x(n), y(n);
  for (size_t i = 0; i < n; ++i) {
    x[i] = v[i % v.size()];
    y[i] = v[(i / v.size() + i) % v.size()];
  }
  const int64_t len = int64_t(n);
  return {{"x", Tensor::from_vector<float>({len}, x)}, {"y", Tensor::from_vector<float>({len}, y)}};
}

// Equal bits, or NaN in both (a NaN's payload and sign are not specified by ONNX).
void expect_same_values(const Tensor& want, const Tensor& got, const std::string& what) {
  ASSERT_EQ(want.shape(), got.shape()) << what;
  const float* w = want.data<float>();
  const float* g = got.data<float>();
  int reported = 0;
  for (int64_t i = 0; i < want.numel() && reported < 5; ++i) {
    const bool same = std::isnan(w[i]) ? std::isnan(g[i]) : std::memcmp(&w[i], &g[i], sizeof(float)) == 0;
    if (!same) {  // bits in hex: printing a subnormal under a flush-to-zero mode would say 0
      ++reported;
      uint32_t wb, gb;
      std::memcpy(&wb, &w[i], 4);
      std::memcpy(&gb, &g[i], 4);
      ADD_FAILURE() << what << "[" << i << "]: the interpreter gives " << w[i] << std::hex << " (bits 0x" << wb
                    << "), tier 1 " << g[i] << " (bits 0x" << gb << ")" << std::dec;
    }
  }
}

void check(size_t n) {
  auto g = exact_ops_model();
  NamedTensors in = inputs(n);
  Options interp;
  interp.max_tier = Tier::Interp;
  interp.cache_dir = "";
  NamedTensors want = Session::from_graph(g, interp)->run(in);
  Options cpu;
  cpu.max_tier = Tier::Cpu;
  cpu.cache_dir = "";
  auto s = Session::from_graph(g, cpu);
  for (int i = 0; i < 6; ++i) {  // promotion, then the validated calls, then calls tier 1 serves alone
    s->run(in);
    s->wait_for_compiles();
  }
  NamedTensors got = s->run(in);
  const CallRecord last = s->last_call();
  ASSERT_NE(std::find(last.tiers.begin(), last.tiers.end(), "cpu"), last.tiers.end()) << s->report_json();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) expect_same_values(want[i].second, got[i].second, got[i].first);
}

TEST(SpecialValues, nan_infinities_negative_zero_and_subnormals_give_the_interpreters_bits_on_tier1) {
  check(24 * 24);  // one task: the kernel runs on the calling thread
}

TEST(SpecialValues, the_same_holds_for_kernels_split_across_threads) {
  check(24 * 24 * 512);  // large enough to be split into parallel pieces
}

// What each activation and pool gives for NaN, as ONNX's reference computes it, on the interpreter
// and on tier 1: NaN stays NaN (HardSigmoid's clip and Celu's np.maximum included), but for
// ThresholdedRelu and Shrink, whose np.where picks 0; MaxPool passes over a window's NaN (the
// reference drops them before np.max; a window of NaN only gives NaN), GlobalMaxPool's np.max and
// AveragePool's sum propagate it.
TEST(SpecialValues, every_activation_and_pool_meets_nan_as_onnxs_reference_on_every_tier) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  GraphBuilder g;
  int x = g.input("x", DType::Float32, {4});
  std::vector<std::pair<Op, bool>> activations = {  // op, NaN gives NaN
      {Op::Relu, true},      {Op::LeakyRelu, true}, {Op::Elu, true},      {Op::Selu, true},
      {Op::Celu, true},      {Op::HardSigmoid, true}, {Op::HardSwish, true}, {Op::Sigmoid, true},
      {Op::Tanh, true},      {Op::Softplus, true},  {Op::Softsign, true},  {Op::Mish, true},
      {Op::Gelu, true},      {Op::ThresholdedRelu, false}, {Op::Shrink, false}};
  for (auto [op, _] : activations) g.output(g.node(op, {x}));
  int p = g.input("p", DType::Float32, {1, 1, 1, 8});
  const auto k12 = GraphBuilder::attr_ints({1, 2});
  g.output(g.node(Op::MaxPool, {p}, {{"kernel_shape", k12}, {"strides", k12}}));
  g.output(g.node(Op::GlobalMaxPool, {p}));
  g.output(g.node(Op::AveragePool, {p}, {{"kernel_shape", k12}, {"strides", k12}}));
  auto graph = g.build();
  // x: NaN, then values every op handles in its usual way; p: windows {NaN,1} {2,NaN} {NaN,NaN} {-1,-2}.
  const NamedTensors in = {{"x", Tensor::from_vector<float>({4}, {nan, 0.5f, -0.5f, 2.0f})},
                           {"p", Tensor::from_vector<float>({1, 1, 1, 8}, {nan, 1, 2, nan, nan, nan, -1, -2})}};
  auto expect_reference = [&](const NamedTensors& out, const std::string& tier) {
    ASSERT_EQ(out.size(), activations.size() + 3);
    for (size_t i = 0; i < activations.size(); ++i) {
      const float y = out[i].second.data<float>()[0];
      const std::string what = std::string(op_name(activations[i].first)) + "(NaN) on " + tier;
      if (activations[i].second) EXPECT_TRUE(std::isnan(y)) << what << " gives " << y;
      else EXPECT_EQ(y, 0.0f) << what;
    }
    const float* max = out[activations.size()].second.data<float>();
    EXPECT_EQ(max[0], 1.0f) << "MaxPool on " << tier;
    EXPECT_EQ(max[1], 2.0f) << "MaxPool on " << tier;
    EXPECT_TRUE(std::isnan(max[2])) << "MaxPool of NaN only on " << tier << " gives " << max[2];
    EXPECT_EQ(max[3], -1.0f) << "MaxPool on " << tier;
    EXPECT_TRUE(std::isnan(out[activations.size() + 1].second.data<float>()[0])) << "GlobalMaxPool on " << tier;
    const float* avg = out[activations.size() + 2].second.data<float>();
    EXPECT_TRUE(std::isnan(avg[0]) && std::isnan(avg[1]) && std::isnan(avg[2])) << "AveragePool on " << tier;
    EXPECT_EQ(avg[3], -1.5f) << "AveragePool on " << tier;
  };
  Options interp;
  interp.max_tier = Tier::Interp;
  interp.cache_dir = "";
  expect_reference(Session::from_graph(graph, interp)->run(in), "interp");
  Options cpu;
  cpu.max_tier = Tier::Cpu;
  cpu.cache_dir = "";
  auto s = Session::from_graph(graph, cpu);
  for (int i = 0; i < 6; ++i) {  // promotion, then the validated calls
    s->run(in);
    s->wait_for_compiles();
  }
  NamedTensors got = s->run(in);
  const CallRecord last = s->last_call();
  ASSERT_NE(std::find(last.tiers.begin(), last.tiers.end(), "cpu"), last.tiers.end()) << s->report_json();
  expect_reference(got, "tier 1");
}

}  // namespace
}  // namespace terrace
