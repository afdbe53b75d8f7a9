// Tier 1's library regions (MatMul, Gemm, Conv through oneDNN): each MatMul and Gemm is a region by
// itself (with its activation), each chain of convolutions with their activations and residual
// Adds one region; promoted and validated like any region, against the interpreter within the
// tolerance of ARCHITECTURE.md's "Rules the code keeps" plus the fp32 rounding bound of its own
// arithmetic, op by op; a wrong result is still caught.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <filesystem>
#include <cstdlib>

#include "interp/compare.h"
#include "interp/omp_threads.h"
#include "jit/cpu/winograd_conv.h"
#include "tests/support/graph_builder.h"
#include "tests/support/session_helpers.h"
#include "tiers/session.h"

namespace terrace {
namespace {

using testing::GraphBuilder;
using testing::random_tensor;
using testing::warm_up;

// x [1,3,12,12] -> Conv(8 filters 3x3, bias, pad 1) -> Relu -> Flatten (a region of tier 1's
// generated code) -> Gemm(transB, bias) -> Softplus. The Relu runs inside the Conv's primitive; the
// Softplus, not an activation tier 1 fuses (oneDNN's soft_relu is not the interpreter's), is a
// region of its own.
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
  g.output(g.node(Op::Softplus, {fc}));
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
  EXPECT_EQ(regions, (std::vector<std::string>{"Conv,Relu", "Flatten", "Gemm", "Softplus"}));
  NamedTensors in = {{"x", random_tensor({1, 3, 12, 12}, 1)}};
  warm_up(*s, in);
  for (int i = 0; i < 4; ++i) {  // 3 validated calls, then one more
    NamedTensors out = s->run(in);
    NamedTensors want = reference(g, in);
    Comparison c = compare_tensors(want[0].second, out[0].second, Tolerance::for_dtype(DType::Float32));
    EXPECT_TRUE(c.equal) << c.message;
  }
  const std::string json = s->report_json();
  EXPECT_EQ(count(json, "\"tier\":\"cpu\""), 4u) << json;
  EXPECT_EQ(count(json, "\"validation\":\"passed\""), 4u) << json;
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
  EXPECT_EQ(count(json, "\"validation\":\"failed: output"), 4u) << json;
  EXPECT_EQ(count(json, "\"tier\":\"cpu\""), 0u) << json;
}

// Sets the static shape of value v, as the ONNX loader's shape inference would.
void set_shape(Graph& g, int v, Shape s) { g.values[size_t(v)].info.shape = std::move(s); }

// ResNet's bottleneck (Conv-Relu-Conv-Relu-Conv, residual Add, Relu) twice, then MobileNetV2's
// inverted residual (Conv-Clip(0,6)-depthwise Conv-Clip-Conv, residual Add): all run in one
// library region, oneDNN primitives in blocked layouts, each block's Add reading the block's
// input (the region's input, then values the region computed).
std::shared_ptr<Graph> residual_blocks_model() {
  GraphBuilder g;
  const Shape x_shape{1, 16, 10, 10};
  int x = g.input("x", DType::Float32, x_shape);
  auto conv = [&](int in, Shape w, std::map<std::string, Attribute> attrs, uint64_t seed) {
    int wv = g.constant("w" + std::to_string(seed), random_tensor(w, seed, -0.3f, 0.3f));
    int bv = g.constant("b" + std::to_string(seed), random_tensor({w[0]}, seed + 100, -0.3f, 0.3f));
    return g.node(Op::Conv, {in, wv, bv}, std::move(attrs));
  };
  auto pads = GraphBuilder::attr_ints({1, 1, 1, 1});
  int cur = x;
  for (uint64_t block = 0; block < 2; ++block) {
    int a = g.node(Op::Relu, {conv(cur, {8, 16, 1, 1}, {}, 10 * block + 1)});
    int b = g.node(Op::Relu, {conv(a, {8, 8, 3, 3}, {{"pads", pads}}, 10 * block + 2)});
    int c = conv(b, {16, 8, 1, 1}, {}, 10 * block + 3);
    cur = g.node(Op::Relu, {g.node(Op::Add, {c, cur})});
  }
  int lo = g.constant("lo", Tensor::scalar(0.0f)), hi = g.constant("hi", Tensor::scalar(6.0f));
  int e = g.node(Op::Clip, {conv(cur, {64, 16, 1, 1}, {}, 31), lo, hi});
  int d = g.node(Op::Clip, {conv(e, {64, 1, 3, 3}, {{"pads", pads}, {"group", GraphBuilder::attr_int(64)}}, 32), lo, hi});
  int p = conv(d, {16, 64, 1, 1}, {}, 33);
  g.output(g.node(Op::Add, {cur, p}));  // the residual first: either operand order fuses
  auto graph = g.build();
  for (const Node& n : graph->nodes)  // every Add here adds two [1,16,10,10] tensors
    if (n.op == Op::Add)
      for (int v : {n.inputs[0], n.inputs[1], n.outputs[0]}) set_shape(*graph, v, x_shape);
  return graph;
}

// Warms `s` up, then 3 validated calls and one more, each the interpreter's answer; its one region
// ends on tier 1 with its validation passed.
void expect_one_region_on_tier1_validated(const std::shared_ptr<Graph>& g, Session& s, const NamedTensors& in) {
  warm_up(s, in);
  for (int i = 0; i < 4; ++i) {
    NamedTensors out = s.run(in);
    Comparison c = compare_tensors(reference(g, in)[0].second, out[0].second, Tolerance::for_dtype(DType::Float32));
    EXPECT_TRUE(c.equal) << c.message;
  }
  const std::string json = s.report_json();
  EXPECT_EQ(count(json, "\"tier\":\"cpu\""), 1u) << json;
  EXPECT_EQ(count(json, "\"validation\":\"passed\""), 1u) << json;
}

TEST(LibraryRegions, residual_blocks_run_as_one_region_validated) {
  auto g = residual_blocks_model();
  auto s = Session::from_graph(g, tiered());
  std::vector<std::string> regions;
  for (const Region& r : s->plan().regions) regions.push_back(r.ops());
  EXPECT_EQ(regions, (std::vector<std::string>{"Conv,Relu,Conv,Relu,Conv,Add,Relu,Conv,Relu,Conv,Relu,Conv,Add,Relu,"
                                               "Conv,Clip,Conv,Clip,Conv,Add"}));
  expect_one_region_on_tier1_validated(g, *s, {{"x", random_tensor({1, 16, 10, 10}, 5)}});
}

// ResNet's stem and first block: Conv, Relu, MaxPool and the block whose main path and shortcut
// both read the pool, then an AveragePool, as one region (the pools in the chain's blocked layout,
// no reorder around them), validated against the interpreter within the chain's allowance (a max
// passes the bound on, an average adds its rounding);
// a miscompiled chain with the pool inside is still caught.
std::shared_ptr<Graph> stem_and_block_model() {
  GraphBuilder g;
  int x = g.input("x", DType::Float32, {1, 3, 32, 32});
  auto conv = [&](int in, Shape w, std::map<std::string, Attribute> attrs, uint64_t seed) {
    int wv = g.constant("w" + std::to_string(seed), random_tensor(w, seed, -0.3f, 0.3f));
    int bv = g.constant("b" + std::to_string(seed), random_tensor({w[0]}, seed + 100, -0.3f, 0.3f));
    return g.node(Op::Conv, {in, wv, bv}, std::move(attrs));
  };
  auto pads = GraphBuilder::attr_ints({1, 1, 1, 1});
  int stem = g.node(Op::Relu, {conv(x, {16, 3, 7, 7}, {{"pads", GraphBuilder::attr_ints({3, 3, 3, 3})},
                                                      {"strides", GraphBuilder::attr_ints({2, 2})}}, 1)});
  int pool = g.node(Op::MaxPool, {stem}, {{"kernel_shape", GraphBuilder::attr_ints({3, 3})},
                                          {"strides", GraphBuilder::attr_ints({2, 2})}, {"pads", pads}});
  int a = g.node(Op::Relu, {conv(pool, {8, 16, 1, 1}, {}, 2)});
  int b = conv(a, {32, 8, 3, 3}, {{"pads", pads}}, 3);
  int shortcut = conv(pool, {32, 16, 1, 1}, {}, 4);
  int block = g.node(Op::Relu, {g.node(Op::Add, {b, shortcut})});
  int avg = g.node(Op::AveragePool, {block}, {{"kernel_shape", GraphBuilder::attr_ints({2, 2})},
                                              {"strides", GraphBuilder::attr_ints({2, 2})}});
  // The head of a CNN: a last Conv, then GlobalAveragePool, the chain's last step.
  g.output(g.node(Op::GlobalAveragePool, {g.node(Op::Relu, {conv(avg, {24, 32, 1, 1}, {}, 5)})}));
  return g.build();
}

TEST(LibraryRegions, a_pool_between_convolutions_runs_inside_their_chain_validated) {
  auto g = stem_and_block_model();
  auto s = Session::from_graph(g, tiered());
  ASSERT_EQ(s->plan().regions.size(), 1u);
  EXPECT_EQ(s->plan().regions[0].ops(),
            "Conv,Relu,MaxPool,Conv,Relu,Conv,Conv,Add,Relu,AveragePool,Conv,Relu,GlobalAveragePool");
  NamedTensors in = {{"x", random_tensor({1, 3, 32, 32}, 5)}};
  expect_one_region_on_tier1_validated(g, *s, in);

  const std::string bad = testing::report_after_a_miscompiled_call(g, in);
  EXPECT_NE(bad.find("\"validation\":\"failed: output"), std::string::npos) << bad;
  EXPECT_EQ(count(bad, "\"tier\":\"cpu\""), 0u) << bad;
}

// A compile packs constant weights on its background thread: with one OpenMP thread there, so that
// it starts no OpenMP team of its own. A second team's workers push libgomp's count of managed
// threads past the cores, and libgomp then cuts every team's spin-wait short: the callers' workers
// slept between primitives (MobileNetV2 on 2 cores, 5.1 -> 2.4 ms a call without it). The session
// adds its two job threads and nothing else.
TEST(LibraryRegions, compiles_start_no_openmp_threads_of_their_own) {
  ScopedOmpThreads two(2);
#pragma omp parallel
  { (void)omp_get_thread_num(); }  // the calling thread's own team exists before the count
  auto threads = [] {
    size_t n = 0;
    for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
    return n;
  };
  const size_t before = threads();
  {
    GraphBuilder b;  // two 64-channel 3x3 convolutions over 16x16: large enough for 2 threads
    int x = b.input("x", DType::Float32, {1, 64, 16, 16});
    for (uint64_t i = 0; i < 2; ++i)
      x = b.node(Op::Relu, {b.node(Op::Conv, {x, b.constant("w" + std::to_string(i), random_tensor({64, 64, 3, 3}, i, -0.1f, 0.1f)),
                                              b.constant("b" + std::to_string(i), random_tensor({64}, i + 9))},
                                   {{"pads", GraphBuilder::attr_ints({1, 1, 1, 1})}})});
    b.output(x);
    auto g = b.build();
    auto s = Session::from_graph(g, tiered());
    NamedTensors in = {{"x", random_tensor({1, 64, 16, 16}, 5)}};
    warm_up(*s, in);
    for (int i = 0; i < 4; ++i) s->run(in);
    ASSERT_NE(s->report_json().find("\"tier\":\"cpu\""), std::string::npos) << s->report();
    EXPECT_EQ(threads(), before + 2) << "threads before the session: " << before;
  }
}

// The chain's allowance grows op by op, but stays far below a wrong result: a chain that is off
// by 1 in one element is caught and demoted.
TEST(LibraryRegions, miscompiled_chain_is_caught_within_its_allowance) {
  setenv("TERRACE_FAULT", "miscompile:cpu", 1);
  auto g = residual_blocks_model();
  auto s = Session::from_graph(g, tiered());
  NamedTensors in = {{"x", random_tensor({1, 16, 10, 10}, 6)}};
  warm_up(*s, in);
  NamedTensors out = s->run(in);
  unsetenv("TERRACE_FAULT");
  EXPECT_TRUE(compare_tensors(reference(g, in)[0].second, out[0].second, Tolerance::for_dtype(DType::Float32)).equal)
      << "the caller got a perturbed result";
  const std::string json = s->report_json();
  EXPECT_EQ(count(json, "\"validation\":\"failed: output"), 1u) << json;
  EXPECT_EQ(count(json, "\"tier\":\"cpu\""), 0u) << json;
}

// Winograd's rounding grows with its tile's inputs, not only with the output's own terms: odd rows
// of the input near 1e3, even rows near 1e-2, and a kernel whose top and bottom rows are zero, so an
// even output row reads small values only while F(2x2, 3x3) (jit/cpu/winograd_conv.h, where this
// machine runs it) sums huge ones that cancel. Validation allows what winograd_rounding_bound
// proves on top of the direct sum's bound: the region stays on tier 1 with its validation passed,
// and its answers are the interpreter's within that allowance.
TEST(LibraryRegions, a_winograd_step_is_validated_within_its_own_rounding_bound) {
  GraphBuilder gb;
  const Shape xs{1, 64, 12, 12};
  const int x = gb.input("x", DType::Float32, xs);
  Tensor w = random_tensor({64, 64, 3, 3}, 21, -0.3f, 0.3f);
  for (int64_t i = 0; i < w.numel(); ++i)
    if (i / 3 % 3 != 1) w.data<float>()[i] = 0.0f;  // kernel rows 0 and 2
  const int conv = gb.node(Op::Conv, {x, gb.constant("w", w), gb.constant("b", random_tensor({64}, 22, -0.01f, 0.01f))},
                           {{"pads", GraphBuilder::attr_ints({1, 1, 1, 1})}});
  gb.output(gb.node(Op::Relu, {conv}));
  auto g = gb.build();
  Tensor in = random_tensor(xs, 23, -0.01f, 0.01f);
  for (int64_t i = 0; i < in.numel(); ++i)
    if (i / 12 % 2 == 1) in.data<float>()[i] *= 1e5f;  // odd rows
  auto s = Session::from_graph(g, tiered());
  warm_up(*s, {{"x", in}});
  Tensor magnitude = in.cast(DType::Float64);
  for (int64_t i = 0; i < magnitude.numel(); ++i) magnitude.data<double>()[i] = std::abs(magnitude.data<double>()[i]);
  const Tensor allowance = jit::winograd_rounding_bound(magnitude, w);
  const Tensor want = reference(g, {{"x", in}})[0].second;
  for (int call = 0; call < 4; ++call) {
    const Tensor got = s->run({{"x", in}})[0].second;
    for (int64_t i = 0; i < got.numel(); ++i) {
      const double err = std::abs(double(got.data<float>()[i]) - want.data<float>()[i]);
      ASSERT_LE(err, 1e-5 + 1e-3 * std::abs(want.data<float>()[i]) + allowance.data<double>()[i]) << "element " << i;
    }
  }
  const std::string json = s->report_json();
  EXPECT_EQ(count(json, "\"tier\":\"cpu\""), 1u) << json;
  EXPECT_EQ(count(json, "\"validation\":\"passed\""), 1u) << json;
}

// A value the region computes and a node outside reads (here a graph output) is one more output
// of the region, and the Relu before it cannot be a post-op of a Conv whose raw result is also
// read; an Add whose operands' shapes are not known to be equal (broadcasting) is not fused.
TEST(LibraryRegions, values_read_outside_are_region_outputs_and_broadcasting_adds_stay_out) {
  GraphBuilder gb;
  int x = gb.input("x", DType::Float32, {1, 4, 6, 6});
  int w = gb.constant("w", random_tensor({4, 4, 1, 1}, 1));
  int w2 = gb.constant("w2", random_tensor({4, 4, 1, 1}, 2));
  int bias = gb.constant("bias", random_tensor({4, 1, 1}, 3));
  int a = gb.node(Op::Conv, {x, w});
  int r = gb.node(Op::Relu, {a});
  int b = gb.node(Op::Conv, {r, w2});
  gb.output(gb.node(Op::Add, {b, bias}));  // broadcast: not a residual
  gb.output(r);                            // r has two readers
  auto g = gb.build();
  auto s = Session::from_graph(g, tiered());
  std::vector<std::string> regions;
  for (const Region& reg : s->plan().regions) regions.push_back(reg.ops());
  EXPECT_EQ(regions, (std::vector<std::string>{"Conv,Relu,Conv", "Add"}));
  EXPECT_EQ(s->plan().regions[0].outputs.size(), 2u);
  NamedTensors in = {{"x", random_tensor({1, 4, 6, 6}, 4)}};
  warm_up(*s, in);
  for (int call = 0; call < 4; ++call) {
    NamedTensors out = s->run(in);
    NamedTensors want = reference(g, in);
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_TRUE(compare_tensors(want[i].second, out[i].second, Tolerance::for_dtype(DType::Float32)).equal);
  }
  const std::string json = s->report_json();
  EXPECT_EQ(count(json, "\"tier\":\"cpu\""), 2u) << json;
  EXPECT_EQ(count(json, "\"validation\":\"passed\""), 2u) << json;
}

#else
TEST(LibraryRegions, Skipped) { GTEST_SKIP() << "built without oneDNN"; }
#endif

}  // namespace
}  // namespace terrace
