// Tier 1's library regions (MatMul, Gemm, Conv through oneDNN): each is a region by itself,
// promoted and validated like any region, against the interpreter within the tolerance of ARCHITECTURE.md's "Rules the code keeps"
// plus the fp32 rounding bound of its own reduction; a wrong result is still caught.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "interp/compare.h"
#include "tests/support/graph_builder.h"
#include "tiers/session.h"

namespace terrace {
namespace {

using testing::GraphBuilder;
using testing::random_tensor;

// x [1,3,12,12] -> Conv(8 filters 3x3, bias, pad 1) -> Relu -> Flatten (a graph break) ->
// Gemm(transB, bias) -> Sigmoid. The Relu runs inside the Conv's primitive; the Sigmoid, not an
// activation tier 1 fuses, is a region of its own.
std::shared_ptr<Graph> conv_gemm_model() {
  GraphBuilder g;
  int x = g.input("x", DType::Float32, {1, 3, 12, 12});
  int w = g.constant("w", random_tensor({8, 3, 3, 3}, 11));
  int b = g.constant("b", random_tensor({8}, 12));
  int w2 = g.constant("w2", random_tensor({10, 8 * 12 * 12}, 13, -0.05f, 0.05f));
  int b2 = g.constant("b2", random_tensor({10}, 14));
  int conv = g.node(Op::Conv, {x, w, b}, {{"pads", GraphBuilder::attr_ints({1, 1, 1, 1})}});
  int flat = g.node(Op::Flatten, {g.node(Op::Relu, {conv})});
  int fc = g.node(Op::Gemm, {flat, w2, b2}, {{"transB", GraphBuilder::attr_int(1)}});
  g.output(g.node(Op::Sigmoid, {fc}));
  return g.build();
}

Options tiered() {
  Options o;
  o.max_tier = Tier::Cpu;
  return o;
}

NamedTensors reference(const std::shared_ptr<Graph>& g, const NamedTensors& in) {
  Options o;
  o.max_tier = Tier::Interp;
  return Session::from_graph(g, o)->run(in);
}

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

void warm_up(Session& s, const NamedTensors& in) {
  for (int i = 0; i < 3; ++i) {
    s.run(in);
    s.wait_for_compiles();
  }
}

TEST(LibraryRegions, compare_tensors_adds_the_allowance_per_element) {
  Tensor want = Tensor::from_vector<float>({3}, {1.0f, 0.0f, 5.0f});
  Tensor got = Tensor::from_vector<float>({3}, {1.0f, 0.5f, 5.0f});
  Tolerance tol = Tolerance::for_dtype(DType::Float32);
  EXPECT_FALSE(compare_tensors(want, got, tol).equal);
  EXPECT_TRUE(compare_tensors(want, got, tol, Tensor::from_vector<double>({3}, {0.0, 0.6, 0.0})).equal);
  EXPECT_FALSE(compare_tensors(want, got, tol, Tensor::from_vector<double>({3}, {0.6, 0.4, 0.6})).equal)
      << "the allowance is per element";
  Tensor nan = Tensor::from_vector<float>({3}, {1.0f, NAN, 5.0f});
  EXPECT_FALSE(compare_tensors(want, nan, tol, Tensor::from_vector<double>({3}, {1e30, 1e30, 1e30})).equal)
      << "no allowance excuses a NaN";
}

#ifdef TERRACE_HAVE_DNNL

TEST(LibraryRegions, conv_and_gemm_each_get_a_region_and_run_on_tier1_validated) {
  auto g = conv_gemm_model();
  auto s = Session::from_graph(g, tiered());
  std::vector<std::string> regions;
  for (const Region& r : s->plan().regions) regions.push_back(r.ops());
  // The Relu, the Conv's only reader, runs inside the Conv's primitive.
  EXPECT_EQ(regions, (std::vector<std::string>{"Conv,Relu", "Gemm", "Sigmoid"}));
  NamedTensors in = {{"x", random_tensor({1, 3, 12, 12}, 1)}};
  warm_up(*s, in);
  for (int i = 0; i < 4; ++i) {  // 3 validated calls, then one more
    NamedTensors out = s->run(in);
    NamedTensors want = reference(g, in);
    Comparison c = compare_tensors(want[0].second, out[0].second, Tolerance::for_dtype(DType::Float32));
    EXPECT_TRUE(c.equal) << c.message;
  }
  const std::string json = s->report_json();
  EXPECT_EQ(count(json, "\"tier\":\"cpu\""), 3u) << json;
  EXPECT_EQ(count(json, "\"validation\":\"passed\""), 3u) << json;
}

// (1e8 + 1) - 1e8 is 0 in float32 summed left to right and 1 in double: a long or cancelling
// reduction may differ from the interpreter by much more than rtol 1e-3 / atol 1e-5, within
// gamma_K times the sum of |products|. Validation allows that bound and nothing more.
TEST(LibraryRegions, cancelling_reduction_passes_validation_within_its_rounding_bound) {
  GraphBuilder gb;
  int a = gb.input("a", DType::Float32, {2, 3});
  int b = gb.constant("b", Tensor::from_vector<float>({3, 1}, {1, 1, 1}));
  gb.output(gb.node(Op::MatMul, {a, b}));
  auto g = gb.build();
  auto s = Session::from_graph(g, tiered());
  NamedTensors in = {{"a", Tensor::from_vector<float>({2, 3}, {1e8f, 1.0f, -1e8f, 0.5f, 0.25f, 2.0f})}};
  warm_up(*s, in);
  for (int i = 0; i < 3; ++i) {
    NamedTensors out = s->run(in);
    EXPECT_EQ(out[0].second.data<float>()[1], 2.75f);  // the row without cancellation is exact
  }
  const std::string json = s->report_json();
  EXPECT_EQ(count(json, "\"tier\":\"cpu\""), 1u) << json;
  EXPECT_EQ(count(json, "\"validation\":\"passed\""), 1u) << json;
}

TEST(LibraryRegions, miscompiled_conv_is_caught_and_demoted) {
  setenv("TERRACE_FAULT", "miscompile:cpu", 1);
  auto g = conv_gemm_model();
  auto s = Session::from_graph(g, tiered());
  NamedTensors in = {{"x", random_tensor({1, 3, 12, 12}, 2)}};
  warm_up(*s, in);
  NamedTensors out = s->run(in);
  unsetenv("TERRACE_FAULT");
  NamedTensors want = reference(g, in);
  EXPECT_TRUE(compare_tensors(want[0].second, out[0].second, Tolerance::for_dtype(DType::Float32)).equal)
      << "the caller got a perturbed result";
  const std::string json = s->report_json();
  EXPECT_EQ(count(json, "\"validation\":\"failed: output"), 3u) << json;
  EXPECT_EQ(count(json, "\"tier\":\"cpu\""), 0u) << json;
}

#else
TEST(LibraryRegions, Skipped) { GTEST_SKIP() << "built without oneDNN"; }
#endif

}  // namespace
}  // namespace terrace
