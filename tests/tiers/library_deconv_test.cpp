// ConvTranspose on tier 1 (jit/cpu/dnnl_deconv.h) through a Session: a library region of its own,
// with the Relu or Clip after it fused, promoted and validated against the interpreter within its
// rounding allowance (cpu_library::error_allowance), zero-sized inputs, refused forms with their
// reason, and a wrong result still caught. In the LibraryRegions suite, so that the ctests
// library_regions_on_AVX2 / _SSE41 run it on those instruction sets too.
#include <gtest/gtest.h>

#include <cstdlib>

#include "interp/compare.h"
#include "tests/support/graph_builder.h"
#include "tests/support/session_helpers.h"
#include "tiers/session.h"

namespace terrace {
namespace {

using testing::GraphBuilder;
using testing::random_tensor;
using testing::on_tier;
using testing::occurrences;
using testing::expect_calls_match_and_regions_validated_on_tier1;
using testing::region_ops;
using testing::warm_up;
using testing::report_after_a_miscompiled_call;

#ifdef TERRACE_HAVE_DNNL

// The graph breaks of a session's plan, as `terrace explain` lists them: "Op: reason".
std::vector<std::string> graph_breaks(const Session& s, const Graph& g) {
  std::vector<std::string> breaks;
  for (const Step& step : s.plan().steps)
    if (step.region < 0) breaks.push_back(std::string(op_name(g.nodes[size_t(step.node)].op)) + ": " + step.reason);
  return breaks;
}

// x [batch, 8, 6, 7] -> ConvTranspose (a U-Net's upsampling: k 3, stride 2, pads 1,
// output_padding 1, bias) -> Relu -> ConvTranspose (groups 2, no bias, output_shape larger than
// the full result: negative pads) -> Clip(0, 6) -> Sigmoid. Each ConvTranspose takes the activation after it.
std::shared_ptr<Graph> upsampling_model(int64_t batch = 1) {
  GraphBuilder g;
  int x = g.input("x", DType::Float32, {batch, 8, 6, 7});
  int w1 = g.constant("w1", random_tensor({8, 4, 3, 3}, 21, -0.5f, 0.5f));
  int b1 = g.constant("b1", random_tensor({4}, 22));
  int w2 = g.constant("w2", random_tensor({4, 3, 2, 2}, 23, -0.5f, 0.5f));
  int up = g.node(Op::ConvTranspose, {x, w1, b1},
                  {{"strides", GraphBuilder::attr_ints({2, 2})}, {"pads", GraphBuilder::attr_ints({1, 1, 1, 1})},
                   {"output_padding", GraphBuilder::attr_ints({1, 1})}});
  int r = g.node(Op::Relu, {up});
  int up2 = g.node(Op::ConvTranspose, {r, w2},
                   {{"strides", GraphBuilder::attr_ints({2, 2})}, {"group", GraphBuilder::attr_int(2)},
                    {"output_shape", GraphBuilder::attr_ints({27, 30})}});
  int lo = g.constant("lo", Tensor::scalar(0.0f)), hi = g.constant("hi", Tensor::scalar(6.0f));
  g.output(g.node(Op::Sigmoid, {g.node(Op::Clip, {up2, lo, hi})}));
  return g.build();
}

// TERRACE_FAULT set for a scope, unset when it ends (also when an assertion leaves the test early).
TEST(LibraryRegions, conv_transpose_runs_on_tier1_validated_with_its_activation) {
  auto g = upsampling_model();
  auto s = Session::from_graph(g, on_tier(Tier::Cpu));
  EXPECT_EQ(region_ops(*s), (std::vector<std::string>{"ConvTranspose,Relu", "ConvTranspose,Clip", "Sigmoid"}));
  EXPECT_TRUE(graph_breaks(*s, *g).empty()) << ::testing::PrintToString(graph_breaks(*s, *g));
  NamedTensors in = {{"x", random_tensor({1, 8, 6, 7}, 3)}};
  const NamedTensors want = Session::from_graph(g, on_tier(Tier::Interp))->run(in);
  ASSERT_EQ(want[0].second.shape(), (Shape{1, 6, 27, 30}));
  warm_up(*s, in);
  expect_calls_match_and_regions_validated_on_tier1(*s, in, want, 3);
}

// The allowance bounds rounding, not a wrong kernel: a ConvTranspose region off by 1 in one
// element fails validation and the caller gets the interpreter's answer.
TEST(LibraryRegions, miscompiled_conv_transpose_is_caught_and_demoted) {
  const std::string json = report_after_a_miscompiled_call(upsampling_model(), {{"x", random_tensor({1, 8, 6, 7}, 4)}});
  EXPECT_EQ(occurrences(json, "\"validation\":\"failed: output"), 3u) << json;
  EXPECT_EQ(occurrences(json, "\"tier\":\"cpu\""), 0u) << json;
}

// A batch of 0: tier 1 compiles the regions for it, calls no library and
// answers as the interpreter does (an empty result).
TEST(LibraryRegions, conv_transpose_of_an_empty_batch_is_the_interpreters) {
  auto g = upsampling_model(0);
  auto s = Session::from_graph(g, on_tier(Tier::Cpu));
  NamedTensors in = {{"x", Tensor::empty(DType::Float32, {0, 8, 6, 7})}};
  for (int call = 0; call < 5; ++call) {
    NamedTensors got;
    ASSERT_NO_THROW(got = s->run(in));
    EXPECT_EQ(got[0].second.shape(), (Shape{0, 6, 27, 30}));
    s->wait_for_compiles();
  }
  const std::string json = s->report_json();
  EXPECT_EQ(json.find("compile failed"), std::string::npos) << json;
  EXPECT_EQ(json.find("validation\":\"failed"), std::string::npos) << json;
  EXPECT_EQ(occurrences(json, "\"tier\":\"cpu\""), 3u) << json;
}

// No input channels: the result is the bias everywhere (then the activation), without oneDNN.
TEST(LibraryRegions, conv_transpose_without_input_channels_is_its_bias) {
  GraphBuilder gb;
  int x = gb.input("x", DType::Float32, {1, 0, 3, 3});
  int w = gb.input("w", DType::Float32, {0, 2, 2, 2});
  int b = gb.constant("b", Tensor::from_vector<float>({2}, {0.5f, -0.25f}));
  gb.output(gb.node(Op::Relu, {gb.node(Op::ConvTranspose, {x, w, b}, {{"strides", GraphBuilder::attr_ints({2, 2})}})}));
  auto g = gb.build();
  auto s = Session::from_graph(g, on_tier(Tier::Cpu));
  EXPECT_EQ(region_ops(*s), (std::vector<std::string>{"ConvTranspose,Relu"}));
  NamedTensors in = {{"x", Tensor::empty(DType::Float32, {1, 0, 3, 3})}, {"w", Tensor::empty(DType::Float32, {0, 2, 2, 2})}};
  Tensor y;
  for (int call = 0; call < 5; ++call) {
    y = s->run(in)[0].second;
    s->wait_for_compiles();
  }
  ASSERT_EQ(y.shape(), (Shape{1, 2, 6, 6}));
  for (int64_t i = 0; i < 36; ++i) {
    EXPECT_EQ(y.data<float>()[i], 0.5f);
    EXPECT_EQ(y.data<float>()[36 + i], 0.0f);  // Relu(-0.25)
  }
  EXPECT_EQ(occurrences(s->report_json(), "\"tier\":\"cpu\""), 1u) << s->report_json();
}

// (1e8 + 1) - 1e8 summed in float32 is 0 or 2, in double 1: a ConvTranspose's fp32 sums may differ
// from the interpreter by far more than rtol 1e-3 / atol 1e-5, within gamma_K times the sum of
// |products| (K: input channels per group times kernel taps). Validation allows that and passes.
TEST(LibraryRegions, cancelling_conv_transpose_passes_validation_within_its_rounding_bound) {
  GraphBuilder gb;
  int x = gb.input("x", DType::Float32, {1, 3, 1});
  int w = gb.constant("w", Tensor::from_vector<float>({3, 1, 2}, {1, 1, 1, 0, 1, 1}));
  gb.output(gb.node(Op::ConvTranspose, {x, w}));
  auto g = gb.build();
  auto s = Session::from_graph(g, on_tier(Tier::Cpu));
  NamedTensors in = {{"x", Tensor::from_vector<float>({1, 3, 1}, {1e8f, 1.0f, -1e8f})}};
  warm_up(*s, in);
  for (int call = 0; call < 3; ++call) {
    Tensor y = s->run(in)[0].second;
    EXPECT_EQ(y.data<float>()[1], 0.0f);  // 1e8 + 0 - 1e8: exact in any order
  }
  const std::string json = s->report_json();
  EXPECT_EQ(occurrences(json, "\"tier\":\"cpu\""), 1u) << json;
  EXPECT_EQ(occurrences(json, "\"validation\":\"passed\""), 1u) << json;
}

// Forms tier 1 does not run stay graph breaks whose reason names what is missing.
TEST(LibraryRegions, refused_conv_transpose_names_the_reason) {
  GraphBuilder gb;
  int x = gb.input("x", DType::Float64, {1, 2, 3, 3});
  int w = gb.constant("w", Tensor::zeros(DType::Float64, {2, 2, 2, 2}));
  gb.output(gb.node(Op::ConvTranspose, {x, w}));
  auto g = gb.build();
  auto s = Session::from_graph(g, on_tier(Tier::Cpu));
  const std::vector<std::string> breaks = graph_breaks(*s, *g);
  ASSERT_EQ(breaks.size(), 1u);
  EXPECT_NE(breaks[0].find("ConvTranspose: tier 1 runs ConvTranspose in float32 only"), std::string::npos) << breaks[0];
}

#endif  // TERRACE_HAVE_DNNL

}  // namespace
}  // namespace terrace
