// Tier 2's convolution and pooling regions (tiers/gpu/gpu_conv.h, jit/cuda/cudnn_ops.h). Here, without a
// GPU: how libcudnn is found (and refused, with the reason), and that the fixed kernels compile
// and render for sm_90. On a GPU with cuDNN 9: ResNet and MobileNetV2 blocks, pools, a grouped
// dilated conv with asymmetric pads, a 1-D conv and an empty batch, each through a Session whose
// regions climb to tier 2, checked against the interpreter and validated by the tier manager.
// Each failure message carries the session's report (regions, tiers, why a region is not on
// tier 2).
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>

#include "interp/compare.h"
#include "interp/error.h"
#include "jit/code_cache.h"
#include "jit/cuda/cuda_driver.h"
#include "jit/cuda/cudnn_ops.h"
#include "jit/cuda/nvrtc.h"
#include "interp/graph_builder.h"
#include "tests/support/graph_builder.h"
#include "tiers/gpu/gpu_backend.h"
#include "tiers/gpu/gpu_conv.h"
#include "tiers/session.h"
#include "tiers/tier_manager.h"

#ifdef TERRACE_HAVE_CUDA

namespace terrace {
namespace {

using testing::random_tensor;
using Builder = terrace::GraphBuilder;  // the public builder: build() infers shapes as import does
using I = std::vector<int64_t>;

#define SKIP_WITHOUT_CUDNN()                                                                  \
  do {                                                                                        \
    std::string why_;                                                                         \
    if (!jit::cuda::cudnn_available(&why_)) GTEST_SKIP() << "no GPU with cuDNN 9: " << why_; \
  } while (0)

// Sets an environment variable for one scope.
struct ScopedEnv {
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = ::getenv(name)) old_ = old;
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }
  const char* name_;
  std::optional<std::string> old_;
};

std::filesystem::path scratch(const std::string& leaf) {
  auto dir = std::filesystem::temp_directory_path() / ("terrace-cudnn-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir / leaf;
}

// --- Loading (no GPU needed) ---

TEST(CudnnLoading, an_override_that_is_no_library_is_refused_naming_it) {
  const auto file = scratch("not-a-library.so");
  std::ofstream(file) << "this is text, not an ELF shared object\n";
  ScopedEnv env("TERRACE_CUDNN_PATH", file.string());
  std::string path, version, why;
  EXPECT_FALSE(jit::cuda::cudnn_probe(&path, &version, &why));
  EXPECT_NE(why.find("TERRACE_CUDNN_PATH"), std::string::npos) << why;
  EXPECT_NE(why.find(file.string()), std::string::npos) << why;
  EXPECT_NE(why.find("no cuDNN 9"), std::string::npos) << why;
}

TEST(CudnnLoading, an_override_folder_without_libcudnn_is_refused_naming_the_soname) {
  const auto dir = scratch("empty-folder");
  std::filesystem::create_directories(dir);
  ScopedEnv env("TERRACE_CUDNN_PATH", dir.string());
  std::string path, version, why;
  EXPECT_FALSE(jit::cuda::cudnn_probe(&path, &version, &why));
  EXPECT_NE(why.find("libcudnn.so.9"), std::string::npos) << why;
  EXPECT_NE(why.find(dir.string()), std::string::npos) << why;
}

// The search order without an override: this machine's /usr/local/cuda/lib64 (the build host
// has it), the GPU host's PyTorch wheel. Every entry point resolves, the version is 9.x.
TEST(CudnnLoading, the_search_order_finds_cudnn_9_with_every_entry_point) {
  std::optional<ScopedEnv> unset;  // without the override (restored after)
  if (const char* v = ::getenv("TERRACE_CUDNN_PATH")) {
    unset.emplace("TERRACE_CUDNN_PATH", v);
    ::unsetenv("TERRACE_CUDNN_PATH");
  }
  std::string path, version, why;
  if (!jit::cuda::cudnn_probe(&path, &version, &why)) GTEST_SKIP() << "no libcudnn.so.9 on this machine: " << why;
  EXPECT_FALSE(path.empty());
  EXPECT_EQ(version.rfind("9.", 0), 0u) << version << " from " << path;
}

TEST(CudnnLoading, an_override_folder_holding_libcudnn_loads_it_from_there) {
  const std::string dir = "/usr/local/cuda/lib64";
  if (!std::filesystem::exists(dir + "/libcudnn.so.9")) GTEST_SKIP() << "no " << dir << "/libcudnn.so.9 here";
  ScopedEnv env("TERRACE_CUDNN_PATH", dir);
  std::string path, version, why;
  EXPECT_TRUE(jit::cuda::cudnn_probe(&path, &version, &why)) << why;
  EXPECT_EQ(path, dir + "/libcudnn.so.9");
}

TEST(CudnnLoading, without_a_gpu_cudnn_is_unavailable_with_the_reason_and_conv_stays_off_tier2) {
  std::string why;
  if (jit::cuda::gpu_available(&why)) GTEST_SKIP() << "this machine has a GPU";
  EXPECT_FALSE(jit::cuda::cudnn_available(&why));
  EXPECT_FALSE(why.empty());
  Builder b;
  b.output(b.op("Conv", {b.input("x", DType::Float32, {1, 2, 5, 5}), b.constant("w", random_tensor({3, 2, 3, 3}, 1))}));
  auto graph = b.build();
  const std::string reason = gpu_conv_can_compile(*graph, graph->nodes[0]);
  EXPECT_NE(reason.find("cuDNN"), std::string::npos) << reason;
}

// --- The fixed kernels and rendering (NVRTC, no GPU) ---

TEST(GpuConv, fixed_kernels_compile_to_an_sm90_cubin_without_a_gpu) {
  std::string why;
  if (!jit::nvrtc_available(&why)) GTEST_SKIP() << "no NVRTC: " << why;
  std::vector<char> cubin =
      jit::nvrtc_compile(gpu_conv_kernels_source(), "sm_90", "terrace_conv.cu", {"-default-device"});
  ASSERT_GT(cubin.size(), 4u);
  EXPECT_EQ(std::memcmp(cubin.data(), "\x7f" "ELF", 4), 0);
  const std::string bytes(cubin.begin(), cubin.end());
  for (const std::string& k : gpu_conv_kernel_names()) EXPECT_NE(bytes.find(k), std::string::npos) << k;
}

// The whole graph as one region.
Region whole(const Graph& g) {
  Region r;
  std::set<int> produced;
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    r.nodes.push_back(int(n));
    for (int v : g.nodes[n].outputs) produced.insert(v);
  }
  for (const Node& n : g.nodes)
    for (int v : n.inputs)
      if (v >= 0 && !produced.count(v) && std::find(r.inputs.begin(), r.inputs.end(), v) == r.inputs.end())
        r.inputs.push_back(v);
  r.outputs = g.outputs;
  return r;
}

std::vector<Tensor> region_inputs(const Graph& g, const Region& r) {
  std::vector<Tensor> in;
  uint64_t seed = 1;
  for (int v : r.inputs) {
    if (auto it = g.initializers.find(v); it != g.initializers.end()) in.push_back(it->second);
    else in.push_back(random_tensor(*g.values[size_t(v)].info.shape, seed++));
  }
  return in;
}

// `terrace compile --tier gpu` renders conv and pool regions as gpu_conv's fixed kernels: no
// GPU, no cuDNN, no lowering of Conv into the kernel IR.
TEST(GpuConv, a_conv_region_renders_as_the_fixed_kernels_without_a_gpu) {
  Builder b;
  const std::string x = b.input("x", DType::Float32, {1, 4, 6, 6}), w = b.constant("w", random_tensor({4, 4, 3, 3}, 2));
  b.output(b.op("Relu", {b.op("Conv", {x, w}, {{"pads", I{1, 1, 1, 1}}})}));
  auto graph = b.build();
  Region r = whole(*graph);
  GpuRegionCode code = render_gpu_region(*graph, r, region_inputs(*graph, r));
  EXPECT_EQ(code.kernels, gpu_conv_kernel_names());
  EXPECT_EQ(code.source, gpu_conv_kernels_source());
}

// --- Through a Session on the GPU ---

NamedTensors reference(const std::shared_ptr<Graph>& g, const NamedTensors& in) {
  Options o;
  o.max_tier = Tier::Interp;
  return Session::from_graph(g, o)->run(in);
}

Options gpu_options() {
  Options o;
  o.max_tier = Tier::Gpu;
  o.hot_threshold = 1;
  o.climb_threshold = 2;
  return o;
}

// Runs the model 10 times, waiting for compiles after each call, every answer checked against the
// interpreter's within rtol 1e-4 + atol 1e-4 (the convolutions' fp32 rounding is far smaller, a
// wrong kernel's error far larger; the tier manager's validation applies the exact bound). Then
// the last call must have run on tier 2 and every region be there, its validation passed.
void expect_runs_on_gpu(const std::shared_ptr<Graph>& g, const NamedTensors& in, const std::string& what,
                        const std::string& fused_ops = "") {
  const NamedTensors want = reference(g, in);
  auto s = Session::from_graph(g, gpu_options());
  for (int call = 0; call < 10; ++call) {
    NamedTensors got = s->run(in);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].second.shape(), want[i].second.shape())
          << what << ", call " << call << ": output " << got[i].first;
      Tolerance tol = Tolerance::for_dtype(DType::Float32);
      tol.rtol = 1e-4;
      tol.atol = 1e-4;
      Comparison c = compare_tensors(want[i].second, got[i].second, tol);
      EXPECT_TRUE(c.equal) << what << ", call " << call << ", output " << got[i].first << ": " << c.message << "\n"
                           << s->report();
    }
    s->wait_for_compiles();
  }
  const auto tiers = s->last_call().tiers;
  EXPECT_NE(std::find(tiers.begin(), tiers.end(), "gpu"), tiers.end()) << what << ": no region ran on tier 2\n"
                                                                        << s->report();
  if (!fused_ops.empty()) {  // the test is about this fusion: tier 1's partition must have formed it
    bool found = false;
    for (const RegionReport& r : s->region_reports()) found = found || r.ops == fused_ops;
    EXPECT_TRUE(found) << what << ": no region " << fused_ops << " (tier 1's partition changed?)\n" << s->report();
  }
  for (const RegionReport& r : s->region_reports()) {
    EXPECT_EQ(r.tier, Tier::Gpu) << what << ": region " << r.id << " (" << r.ops << ") is not on tier 2: " << r.climb
                                 << "\n" << s->report();
    EXPECT_EQ(r.validation, "passed") << what << ": region " << r.id << " (" << r.ops << ")\n" << s->report();
  }
}


// ResNet's basic block: Conv+Relu, Conv, the residual Add of the block's input, Relu; one region.
TEST(GpuConv, resnet_basic_block_runs_on_the_gpu) {
  SKIP_WITHOUT_CUDNN();
  Builder b;
  const std::string x = b.input("x", DType::Float32, {2, 16, 12, 12});
  const std::string w1 = b.constant("w1", random_tensor({16, 16, 3, 3}, 11, -0.2f, 0.2f));
  const std::string b1 = b.constant("b1", random_tensor({16}, 12));
  const std::string w2 = b.constant("w2", random_tensor({16, 16, 3, 3}, 13, -0.2f, 0.2f));
  const std::string b2 = b.constant("b2", random_tensor({16}, 14));
  const Attrs same = {{"pads", I{1, 1, 1, 1}}};
  const std::string h = b.op("Relu", {b.op("Conv", {x, w1, b1}, same)});
  b.output(b.op("Relu", {b.op("Add", {b.op("Conv", {h, w2, b2}, same), x})}));
  expect_runs_on_gpu(b.build(), {{"x", random_tensor({2, 16, 12, 12}, 15)}}, "ResNet basic block",
                     "Conv,Relu,Conv,Add,Relu");
}

// MobileNetV2: an expansion block with a stride-2 depthwise conv (no residual), then a stride-1
// block with its residual Add; Clip(0, 6) after the expansions and the depthwise convs.
TEST(GpuConv, mobilenetv2_blocks_run_on_the_gpu) {
  SKIP_WITHOUT_CUDNN();
  Builder b;
  const std::string x = b.input("x", DType::Float32, {2, 8, 14, 14});
  const std::string zero = b.constant("zero", Tensor::scalar<float>(0.0f));
  const std::string six = b.constant("six", Tensor::scalar<float>(6.0f));
  uint64_t seed = 20;
  auto constant = [&](const char* name, Shape shape, float range) {
    const uint64_t k = seed++;
    return b.constant(name + std::to_string(k), random_tensor(std::move(shape), k, -range, range));
  };
  auto block = [&](const std::string& in, int64_t cin, int64_t cout, int64_t stride, bool residual) {
    const int64_t hidden = cin * 6;
    std::string e = b.op("Conv", {in, constant("we", {hidden, cin, 1, 1}, 0.5f), constant("be", {hidden}, 1)});
    e = b.op("Clip", {e, zero, six});
    std::string d = b.op("Conv", {e, constant("wd", {hidden, 1, 3, 3}, 0.5f), constant("bd", {hidden}, 1)},
                         {{"group", hidden}, {"strides", I{stride, stride}}, {"pads", I{1, 1, 1, 1}}});
    d = b.op("Clip", {d, zero, six});
    const std::string p = b.op("Conv", {d, constant("wp", {cout, hidden, 1, 1}, 0.3f), constant("bp", {cout}, 1)});
    return residual ? b.op("Add", {p, in}) : p;
  };
  b.output(block(block(x, 8, 12, 2, false), 12, 12, 1, true));
  expect_runs_on_gpu(b.build(), {{"x", random_tensor({2, 8, 14, 14}, 16)}}, "MobileNetV2 blocks",
                     "Conv,Clip,Conv,Clip,Conv,Conv,Clip,Conv,Clip,Conv,Add");
}

TEST(GpuConv, maxpool_as_resnets_stem_runs_on_the_gpu) {
  SKIP_WITHOUT_CUDNN();
  Builder b;
  b.output(b.op("MaxPool", {b.input("x", DType::Float32, {2, 3, 17, 16})},
                {{"kernel_shape", I{3, 3}}, {"strides", I{2, 2}}, {"pads", I{1, 1, 1, 1}}}));
  expect_runs_on_gpu(b.build(), {{"x", random_tensor({2, 3, 17, 16}, 30)}}, "MaxPool 3x3 s2 p1");
}

TEST(GpuConv, maxpool_with_ceil_mode_dilation_and_asymmetric_pads_runs_on_the_gpu) {
  SKIP_WITHOUT_CUDNN();
  Builder b;
  b.output(b.op("MaxPool", {b.input("x", DType::Float32, {1, 4, 13, 11})},
                {{"kernel_shape", I{3, 2}}, {"strides", I{2, 3}}, {"dilations", I{2, 1}}, {"pads", I{1, 0, 2, 1}},
                 {"ceil_mode", 1}}));
  expect_runs_on_gpu(b.build(), {{"x", random_tensor({1, 4, 13, 11}, 31)}}, "MaxPool ceil_mode dilated");
}

// Excluding the pads: asymmetric pads and ceil_mode; counting them: symmetric pads (tier 1 has no
// version of a counting average whose windows pass its pads, so such a region never climbs to
// tier 2; GpuConvKernelsOnHost checks the kernel on those forms).
TEST(GpuConv, average_pools_with_and_without_counting_pads_run_on_the_gpu) {
  SKIP_WITHOUT_CUDNN();
  for (int64_t include : {0, 1}) {
    Builder b;
    const Shape shape = include ? Shape{2, 3, 11, 9} : Shape{2, 3, 10, 9};
    Attrs attrs = {{"kernel_shape", I{3, 3}}, {"strides", I{2, 2}}, {"count_include_pad", include}};
    if (include) {
      attrs.emplace("pads", I{1, 1, 1, 1});
    } else {
      attrs.emplace("pads", I{1, 2, 0, 1});
      attrs.emplace("ceil_mode", 1);
    }
    b.output(b.op("AveragePool", {b.input("x", DType::Float32, std::vector<Dim>(shape.begin(), shape.end()))}, attrs));
    expect_runs_on_gpu(b.build(), {{"x", random_tensor(shape, 32)}},
                       "AveragePool count_include_pad=" + std::to_string(include));
  }
}

TEST(GpuConv, global_average_pool_runs_on_the_gpu) {
  SKIP_WITHOUT_CUDNN();
  Builder b;
  b.output(b.op("GlobalAveragePool", {b.input("x", DType::Float32, {2, 64, 7, 7})}));
  expect_runs_on_gpu(b.build(), {{"x", random_tensor({2, 64, 7, 7}, 33)}}, "GlobalAveragePool");
}

// Groups, dilations, strides and pads that differ at the two ends of a dim (cuDNN's are
// symmetric: the difference is a zero-padded copy of the input), with a bias and a Relu.
TEST(GpuConv, grouped_dilated_conv_with_asymmetric_pads_runs_on_the_gpu) {
  SKIP_WITHOUT_CUDNN();
  Builder b;
  const std::string x = b.input("x", DType::Float32, {2, 8, 11, 13});
  const std::string w = b.constant("w", random_tensor({12, 4, 3, 3}, 40));
  const std::string bias = b.constant("b", random_tensor({12}, 41));
  b.output(b.op("Relu", {b.op("Conv", {x, w, bias},
                               {{"group", 2}, {"dilations", I{2, 1}}, {"strides", I{1, 2}},
                                {"pads", I{1, 0, 2, 1}}})}));
  expect_runs_on_gpu(b.build(), {{"x", random_tensor({2, 8, 11, 13}, 42)}}, "grouped dilated asymmetric conv");
}

// A 1-D convolution (cuDNN's 2-D over a unit height) with SAME_UPPER's uneven pads.
TEST(GpuConv, one_dimensional_conv_with_same_upper_runs_on_the_gpu) {
  SKIP_WITHOUT_CUDNN();
  Builder b;
  b.output(b.op("Conv", {b.input("x", DType::Float32, {3, 4, 17}), b.constant("w", random_tensor({6, 4, 4}, 50))},
                {{"auto_pad", "SAME_UPPER"}, {"strides", I{2}}}));
  expect_runs_on_gpu(b.build(), {{"x", random_tensor({3, 4, 17}, 51)}}, "1-D conv SAME_UPPER");
}

// An empty batch: the right empty output, on tier 2, and no cuDNN call (nothing is planned).
TEST(GpuConv, an_empty_batch_gives_the_empty_output_without_calling_cudnn) {
  SKIP_WITHOUT_CUDNN();
  Builder b;
  const std::string x = b.input("x", DType::Float32, {0, 4, 8, 8});
  const std::string w = b.constant("w", random_tensor({6, 4, 3, 3}, 60));
  const std::string bias = b.constant("b", random_tensor({6}, 61));
  b.output(b.op("Relu", {b.op("Conv", {x, w, bias}, {{"pads", I{1, 1, 1, 1}}})}));
  auto graph = b.build();
  Region r = whole(*graph);
  jit::CodeCache cache(scratch("cache"));
  GpuProgram p = build_gpu_conv_program(*graph, r, region_inputs(*graph, r), cache, jit::cuda::device().arch());
  ASSERT_EQ(p.steps.size(), 1u);
  ASSERT_TRUE(p.steps[0].work);
  EXPECT_NE(p.steps[0].work->name.find("empty output: no call"), std::string::npos) << p.steps[0].work->name;
  ASSERT_EQ(p.slots.size(), 4u);  // x, w, b, y
  EXPECT_EQ(p.slots[3].shape, (Shape{0, 6, 8, 8}));
  const CUdeviceptr none[5] = {0, 0, 0, 0, 0};
  p.steps[0].work->library(none, nullptr);  // nothing to do: no pointer is touched
  Tensor empty = Tensor::empty(DType::Float32, {0, 4, 8, 8});
  expect_runs_on_gpu(graph, {{"x", empty}}, "empty batch");
}

// An op tier 2 does not fuse after a Conv, or a fused intermediate read outside the region:
// refused by name (no GPU needed: the plan refuses it), so that the region keeps its tier-1
// version.
TEST(GpuConv, an_unsupported_op_in_a_conv_region_is_refused_naming_the_node) {
  Builder b;
  const std::string x = b.input("x", DType::Float32, {1, 2, 5, 5});
  b.output(b.op("Sigmoid", {b.op("Conv", {x, b.constant("w", random_tensor({3, 2, 3, 3}, 70))})}));
  auto graph = b.build();
  Region r = whole(*graph);
  try {
    plan_gpu_conv_program(*graph, r, region_inputs(*graph, r));
    FAIL() << "a Conv+Sigmoid region was planned";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::CompileFailed) << e.what();
    EXPECT_NE(e.message().find("Sigmoid"), std::string::npos) << e.message();
  }
}

TEST(GpuConv, a_fused_intermediate_read_outside_the_region_is_refused) {
  Builder b;
  const std::string x = b.input("x", DType::Float32, {1, 2, 5, 5});
  const std::string c = b.op("Conv", {x, b.constant("w", random_tensor({3, 2, 3, 3}, 71))});
  b.output(b.op("Relu", {c}));
  b.output(c);
  auto graph = b.build();
  Region r = whole(*graph);
  EXPECT_THROW(plan_gpu_conv_program(*graph, r, region_inputs(*graph, r)), Error);
}

// The regions of ResNet-50 (a bottleneck, its downsampling Conv and the residual Add of the two
// branches) and MobileNetV2 planned without a GPU: one step per Conv, each output's shape the
// interpreter's.
TEST(GpuConv, resnet_and_mobilenet_regions_plan_one_step_per_conv_without_a_gpu) {
  Builder b;
  const std::string x = b.input("x", DType::Float32, {1, 16, 10, 10});
  uint64_t seed = 80;
  auto conv = [&](const std::string& in, Shape w, Attrs attrs = {}) {
    const int64_t m = w[0];
    const uint64_t k = seed++;
    return b.op("Conv", {in, b.constant("w" + std::to_string(k), random_tensor(std::move(w), k)),
                         b.constant("b" + std::to_string(k), random_tensor({m}, k))},
                attrs);
  };
  std::string h = b.op("Relu", {conv(x, {8, 16, 1, 1})});
  h = b.op("Relu", {conv(h, {8, 8, 3, 3}, {{"pads", I{1, 1, 1, 1}}, {"strides", I{2, 2}}})});
  const std::string main = conv(h, {32, 8, 1, 1});
  const std::string down = conv(x, {32, 16, 1, 1}, {{"strides", I{2, 2}}});
  const std::string y = b.op("Relu", {b.op("Add", {down, main})});
  const std::string zero = b.constant("zero", Tensor::scalar<float>(0.0f));
  const std::string six = b.constant("six", Tensor::scalar<float>(6.0f));
  std::string e = b.op("Clip", {conv(y, {64, 32, 1, 1}), zero, six});
  e = b.op("Clip", {conv(e, {64, 1, 3, 3}, {{"group", int64_t(64)}, {"pads", I{1, 1, 1, 1}}}), zero, six});
  b.output(b.op("Add", {conv(e, {32, 64, 1, 1}), y}));
  auto graph = b.build();
  Region r = whole(*graph);
  const std::vector<Tensor> in = region_inputs(*graph, r);
  GpuProgram p = plan_gpu_conv_program(*graph, r, in);
  ASSERT_EQ(p.steps.size(), 7u) << p.ir;
  for (const GpuStep& k : p.steps) {
    ASSERT_TRUE(k.work);
    EXPECT_EQ(k.work->name.rfind("cuDNN conv", 0), 0u) << k.work->name;
    EXPECT_FALSE(k.work->library) << "a plan holds no library call";
  }
  EXPECT_NE(p.steps[3].work->name.find("+ bias + residual, relu"), std::string::npos) << p.steps[3].work->name;
  EXPECT_NE(p.steps[4].work->name.find("+ bias, clip("), std::string::npos) << p.steps[4].work->name;
  EXPECT_NE(p.steps[6].work->name.find("+ bias + residual"), std::string::npos) << p.steps[6].work->name;
  const NamedTensors want = reference(graph, {{"x", in[0]}});
  EXPECT_EQ(p.slots[r.inputs.size()].shape, want.at(0).second.shape());
}

// An empty batch: its step is no call at all.
TEST(GpuConv, an_empty_batch_plans_no_call) {
  Builder b;
  const std::string x = b.input("x", DType::Float32, {0, 4, 8, 8});
  const std::string w = b.constant("w", random_tensor({6, 4, 3, 3}, 60));
  b.output(b.op("Relu", {b.op("Conv", {x, w, b.constant("b", random_tensor({6}, 61))}, {{"pads", I{1, 1, 1, 1}}})}));
  auto graph = b.build();
  Region r = whole(*graph);
  GpuProgram p = plan_gpu_conv_program(*graph, r, region_inputs(*graph, r));
  ASSERT_EQ(p.steps.size(), 1u);
  ASSERT_TRUE(p.steps[0].work);
  EXPECT_NE(p.steps[0].work->name.find("empty output: no call"), std::string::npos) << p.steps[0].work->name;
  EXPECT_EQ(p.slots.at(3).shape, (Shape{0, 6, 8, 8}));
}

// A timed choice goes into the tuning records; a later plan of the same problem takes it without
// timing; a corrupt record is a miss, timed again.
TEST(CudnnTuning, a_timed_choice_is_recorded_and_a_later_plan_takes_it) {
  SKIP_WITHOUT_CUDNN();
  jit::cuda::ConvSpec spec;
  spec.x = {1, 64, 56, 56};
  spec.w = {64, 64, 3, 3};
  spec.strides = spec.dilations = {1, 1};
  spec.pads = {1, 1};
  const std::filesystem::path dir = scratch("tuning");
  std::filesystem::remove_all(dir);
  jit::CodeCache cache(dir);
  auto algo = [](const jit::cuda::CudnnConv& c) { return c.algorithm().substr(0, c.algorithm().find(',')); };
  const jit::cuda::CudnnConv first(spec, &cache);
  if (first.algorithm().find(", timed ") == std::string::npos)
    GTEST_SKIP() << "cuDNN offers one candidate here, so nothing is timed: " << first.algorithm();
  ASSERT_EQ(cache.info().entries, 1u);
  const jit::cuda::CudnnConv second(spec, &cache);
  EXPECT_NE(second.algorithm().find("from the tuning record"), std::string::npos) << second.algorithm();
  EXPECT_EQ(second.algorithm().find(", timed "), std::string::npos) << second.algorithm();
  EXPECT_EQ(algo(second), algo(first));
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.is_regular_file()) std::filesystem::resize_file(e.path(), std::filesystem::file_size(e.path()) - 1);
  const jit::cuda::CudnnConv third(spec, &cache);
  EXPECT_NE(third.algorithm().find(", timed "), std::string::npos) << "a truncated record is a miss: " << third.algorithm();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace terrace

#endif
