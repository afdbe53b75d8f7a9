// Tier 2's region code without a GPU: the CUDA C the GPU backend renders for a region compiles to
// an sm_90 cubin through NVRTC, all of the region's kernels in one program.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "interp/error.h"
#include "jit/cuda/nvrtc.h"
#include "tests/support/graph_builder.h"
#include "tiers/gpu/gpu_backend.h"

#ifdef TERRACE_HAVE_CUDA

namespace terrace {
namespace {

using testing::GraphBuilder;
using testing::random_tensor;

#define SKIP_WITHOUT_NVRTC()                                            \
  do {                                                                  \
    std::string why_;                                                   \
    if (!jit::nvrtc_available(&why_)) GTEST_SKIP() << "no NVRTC: " << why_; \
  } while (0)

// The whole graph as one region (every node is elementwise), with inputs of the given shapes.
struct OneRegion {
  std::shared_ptr<Graph> graph;
  Region region;
  std::vector<Tensor> inputs;
};

OneRegion whole_graph(std::shared_ptr<Graph> g) {
  OneRegion r;
  r.graph = g;
  for (size_t n = 0; n < g->nodes.size(); ++n) r.region.nodes.push_back(int(n));
  std::set<int> produced;
  for (const Node& n : g->nodes)
    for (int v : n.outputs) produced.insert(v);
  for (const Node& n : g->nodes)
    for (int v : n.inputs)
      if (v >= 0 && !produced.count(v) &&
          std::find(r.region.inputs.begin(), r.region.inputs.end(), v) == r.region.inputs.end())
        r.region.inputs.push_back(v);
  r.region.outputs = g->outputs;
  uint64_t seed = 1;
  for (int v : r.region.inputs) {
    if (auto it = g->initializers.find(v); it != g->initializers.end()) {
      r.inputs.push_back(it->second);
      continue;
    }
    const ValueInfo& info = g->values[size_t(v)].info;
    Tensor t = random_tensor(*info.shape, seed++);
    r.inputs.push_back(*info.dtype == DType::Float32 ? t : Tensor::empty(*info.dtype, *info.shape));
  }
  return r;
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

std::vector<char> expect_cubin(const GpuRegionCode& code) {
  std::vector<char> cubin = jit::nvrtc_compile(code.source, "sm_90", "region.cu");
  EXPECT_GT(cubin.size(), 4u);
  EXPECT_EQ(std::memcmp(cubin.data(), "\x7f" "ELF", 4), 0);
  std::string bytes(cubin.begin(), cubin.end());
  for (const std::string& k : code.kernels) EXPECT_NE(bytes.find(k), std::string::npos) << k << " not in the cubin";
  return cubin;
}

TEST(GpuRegion, elementwise_chain_compiles_to_an_sm90_cubin) {
  SKIP_WITHOUT_NVRTC();
  GraphBuilder g;
  int a = g.input("a", DType::Float32, {64, 128});
  int b = g.input("b", DType::Float32, {128});
  int half = g.constant("half", Tensor::scalar<float>(0.5f));
  int y = g.node(Op::Add, {g.node(Op::Mul, {a, g.node(Op::Sigmoid, {a})}), b});
  int out = g.node(Op::Add, {g.node(Op::Mul, {g.node(Op::Tanh, {y}), half}), g.node(Op::Mul, {y, y})});
  g.output(out);
  OneRegion r = whole_graph(g.build());
  GpuRegionCode code = render_gpu_region(*r.graph, r.region, r.inputs);
  ASSERT_EQ(code.kernels.size(), 1u) << code.source;  // one iteration domain: one fused kernel
  EXPECT_EQ(count(code.source, "__global__"), 1u);
  EXPECT_EQ(count(code.source, "#define TR_FN"), 1u) << "one prelude";
  expect_cubin(code);
}

// Two chains over different domains: two kernels, one program, one prelude.
TEST(GpuRegion, two_domains_are_two_kernels_in_one_program) {
  SKIP_WITHOUT_NVRTC();
  GraphBuilder g;
  int a = g.input("a", DType::Float32, {4, 256});
  int c = g.input("c", DType::Float32, {32, 32});
  g.output(g.node(Op::Exp, {g.node(Op::Neg, {a})}));
  g.output(g.node(Op::Erf, {g.node(Op::Mul, {c, c})}));
  OneRegion r = whole_graph(g.build());
  GpuRegionCode code = render_gpu_region(*r.graph, r.region, r.inputs);
  ASSERT_EQ(code.kernels.size(), 2u) << code.source;
  EXPECT_EQ(count(code.source, "#define TR_FN"), 1u);
  expect_cubin(code);
}

// The prelude's math and the conversions the dialect has: every one compiles for sm_90.
TEST(GpuRegion, math_and_casts_compile) {
  SKIP_WITHOUT_NVRTC();
  GraphBuilder g;
  int x = g.input("x", DType::Float32, {1000});
  int two = g.constant("two", Tensor::scalar<float>(2.0f));
  int t = g.node(Op::Add, {g.node(Op::Log, {g.node(Op::Abs, {x})}), g.node(Op::Sqrt, {g.node(Op::Abs, {x})})});
  t = g.node(Op::Add, {t, g.node(Op::Pow, {x, two})});
  t = g.node(Op::Add, {t, g.node(Op::Sin, {x})});
  t = g.node(Op::Add, {t, g.node(Op::Cos, {x})});
  t = g.node(Op::Add, {t, g.node(Op::Tanh, {x})});
  t = g.node(Op::Add, {t, g.node(Op::Erf, {x})});
  t = g.node(Op::Add, {t, g.node(Op::Reciprocal, {g.node(Op::Exp, {x})})});
  int h = g.node(Op::Cast, {t}, {{"to", GraphBuilder::attr_int(10)}}, 1, DType::Float16);
  int back = g.node(Op::Cast, {h}, {{"to", GraphBuilder::attr_int(1)}}, 1, DType::Float32);
  int i = g.node(Op::Cast, {back}, {{"to", GraphBuilder::attr_int(6)}}, 1, DType::Int32);
  g.output(back);
  g.output(i);
  g.output(g.node(Op::Greater, {x, back}, {}, 1, DType::Bool));
  OneRegion r = whole_graph(g.build());
  GpuRegionCode code = render_gpu_region(*r.graph, r.region, r.inputs);
  expect_cubin(code);
}

// Tier 2 renders the region as tier 1 lowers it (tiers/region_lowering.h): a scale-then-softmax
// is one fused reduction kernel here too, and a Transpose feeding a Reshape one copy kernel.
TEST(GpuRegion, reductions_and_data_movement_render_as_tier1_lowers_them) {
  SKIP_WITHOUT_NVRTC();
  GraphBuilder g;
  int a = g.input("a", DType::Float32, {4, 8, 16});
  int scaled = g.node(Op::Mul, {a, g.constant("scale", Tensor::scalar<float>(0.125f))});
  int sm = g.node(Op::Softmax, {scaled}, {{"axis", GraphBuilder::attr_int(-1)}});
  int t = g.node(Op::Transpose, {sm}, {{"perm", GraphBuilder::attr_ints({0, 2, 1})}});
  g.output(g.node(Op::Reshape, {t, g.constant("shape", Tensor::from_vector<int64_t>({2}, {4, 128}))}));
  OneRegion r = whole_graph(g.build());
  GpuRegionCode code = render_gpu_region(*r.graph, r.region, r.inputs);
  EXPECT_EQ(code.kernels.size(), 2u) << code.source;  // the fused softmax, the transpose's copy
  std::vector<char> cubin = jit::nvrtc_compile(code.source, "sm_90", "region.cu");
  ASSERT_GE(cubin.size(), 4u);
  EXPECT_EQ(std::memcmp(cubin.data(), "\x7f" "ELF", 4), 0);
}

// Kernels are named by their content and the program names no region: two regions that lower
// alike (a transformer's layers) render one source, so NVRTC runs once for both (the cubin cache
// is keyed by the source); a different region gets different names.
TEST(GpuRegion, regions_that_lower_alike_render_the_same_program) {
  auto chain = [](Op op) {
    GraphBuilder g;
    int a = g.input("a", DType::Float32, {64, 32});
    g.output(g.node(Op::Add, {g.node(Op::Mul, {g.node(op, {a}), a}), g.constant("one", Tensor::scalar<float>(1))}));
    return whole_graph(g.build());
  };
  OneRegion first = chain(Op::Tanh), second = chain(Op::Tanh), other = chain(Op::Sigmoid);
  first.region.id = 3;
  second.region.id = 7;
  other.region.id = 7;
  GpuRegionCode a = render_gpu_region(*first.graph, first.region, first.inputs);
  GpuRegionCode b = render_gpu_region(*second.graph, second.region, second.inputs);
  GpuRegionCode c = render_gpu_region(*other.graph, other.region, other.inputs);
  EXPECT_EQ(a.source, b.source);
  ASSERT_EQ(a.kernels.size(), 1u);
  EXPECT_EQ(a.kernels, b.kernels);
  EXPECT_EQ(a.kernels[0].rfind("tk_", 0), 0u) << a.kernels[0];
  EXPECT_NE(a.kernels, c.kernels);
  EXPECT_NE(a.source.find(a.kernels[0]), std::string::npos);
}

TEST(GpuRegion, a_node_no_tier_lowers_is_refused_by_name) {
  GraphBuilder g;
  int a = g.input("a", DType::Float32, {4, 8});
  g.output(g.node(Op::CumSum, {g.node(Op::Relu, {a}), g.constant("axis", Tensor::scalar<int64_t>(1))}));
  OneRegion r = whole_graph(g.build());
  try {
    render_gpu_region(*r.graph, r.region, r.inputs);
    FAIL() << "a CumSum region rendered";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::CompileFailed);
    EXPECT_NE(e.message().find("CumSum"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace terrace

#endif
