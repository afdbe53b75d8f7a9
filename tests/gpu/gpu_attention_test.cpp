// Tier 2's fused attention (tiers/gpu/gpu_attention.h). Without a GPU: the kernel compiles for
// sm_90, an Attention region renders as it, what the kernel does not take is refused naming the
// node, and a session with tier 2 fuses the attention blocks its graph passes find (with tier 1 only,
// they stay five ops). On a GPU: Attention nodes of every form the kernel takes (masks additive and
// boolean, broadcast; causal; grouped heads; head sizes that are not a multiple of 32; key counts
// that are not a multiple of the 32-key tile; a row with every key masked), through a Session whose
// Attention region climbs from the interpreter to tier 2, against the interpreter (in double).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <set>

#include "interp/compare.h"
#include "jit/cuda/cuda_driver.h"
#include "jit/cuda/nvrtc.h"
#include "tests/support/graph_builder.h"
#include "tiers/gpu/gpu_attention.h"
#include "tiers/gpu/gpu_backend.h"
#include "tiers/passes/pipeline.h"
#include "tiers/session.h"
#include "tiers/tier_manager.h"

#ifdef TERRACE_HAVE_CUDA

namespace terrace {
namespace {

using testing::GraphBuilder;
using testing::random_tensor;

struct Form {
  Shape q, k, v;
  Shape mask;             // empty: none
  bool bool_mask = false;
  bool causal = false;
  bool scaled = true;     // a scale attribute (else 1/sqrt(head size))
  bool dead_row = false;  // the boolean mask masks every key of one row
};

std::shared_ptr<Graph> attention_graph(const Form& f) {
  GraphBuilder b;
  std::vector<int> in = {b.input("q", DType::Float32, f.q), b.input("k", DType::Float32, f.k),
                         b.input("v", DType::Float32, f.v)};
  if (!f.mask.empty()) in.push_back(b.input("mask", f.bool_mask ? DType::Bool : DType::Float32, f.mask));
  std::map<std::string, Attribute> attrs;
  if (f.scaled) attrs["scale"] = GraphBuilder::attr_float(0.3f);
  if (f.causal) attrs["is_causal"] = GraphBuilder::attr_int(1);
  b.output(b.node(Op::Attention, in, attrs));
  auto g = b.build();
  g->opset = 23;
  return g;
}

NamedTensors inputs_for(const Form& f) {
  NamedTensors in = {{"q", random_tensor(f.q, 1, -2, 2)}, {"k", random_tensor(f.k, 2, -2, 2)},
                     {"v", random_tensor(f.v, 3)}};
  if (f.mask.empty()) return in;
  if (!f.bool_mask) {
    in.push_back({"mask", random_tensor(f.mask, 4, -3, 0)});
    return in;
  }
  Tensor m = Tensor::empty(DType::Bool, f.mask);
  for (int64_t e = 0; e < m.numel(); ++e) m.data<bool>()[e] = (e * 7) % 5 != 1;
  if (f.dead_row)  // the first row: no key attended (the mask's last dim is the keys')
    for (int64_t j = 0; j < f.mask.back(); ++j) m.data<bool>()[j] = false;
  in.push_back({"mask", m});
  return in;
}

TEST(GpuAttention, the_kernel_compiles_to_an_sm90_cubin_for_each_head_size_without_a_gpu) {
  std::string why;
  if (!jit::nvrtc_available(&why)) GTEST_SKIP() << "no NVRTC: " << why;
  for (auto [head, value_head] : {std::pair<int64_t, int64_t>{64, 64}, {80, 80}, {32, 48}, {128, 128}, {3, 5}}) {
    std::vector<char> cubin =
        jit::nvrtc_compile(gpu_attention_kernel_source(head, value_head), "sm_90", "a.cu", {"-default-device"});
    ASSERT_GT(cubin.size(), 4u);
    EXPECT_EQ(std::memcmp(cubin.data(), "\x7f" "ELF", 4), 0);
    EXPECT_NE(std::string(cubin.begin(), cubin.end()).find(kGpuAttentionKernel), std::string::npos);
  }
}

TEST(GpuAttention, an_attention_region_renders_as_the_kernel_and_refusals_name_the_node) {
  auto g = attention_graph({{1, 2, 5, 64}, {1, 2, 7, 64}, {1, 2, 7, 64}, {1, 1, 5, 7}});
  Region r;
  r.nodes = {0};
  r.inputs = g->inputs;
  r.outputs = g->outputs;
  const Form f{{1, 2, 5, 64}, {1, 2, 7, 64}, {1, 2, 7, 64}, {1, 1, 5, 7}};
  std::vector<Tensor> in;
  for (const auto& [name, t] : inputs_for(f)) in.push_back(t);
  GpuRegionCode code = render_gpu_region(*g, r, in);
  EXPECT_EQ(code.kernels, std::vector<std::string>{kGpuAttentionKernel});
  auto wide = attention_graph({{1, 2, 5, 160}, {1, 2, 7, 160}, {1, 2, 7, 160}});
  const std::string why = gpu_attention_can_compile(*wide, wide->nodes[0]);
  EXPECT_NE(why.find("head sizes up to 128"), std::string::npos) << why;
}

// The small BERT's attention blocks as the exporter writes them: with tier 2 in the ladder
// (PassConfig from GpuBackend::configure_passes) each is one Attention; without, five ops.
TEST(GpuAttention, the_attention_pass_fuses_only_for_a_tier_that_compiles_attention) {
  GraphBuilder b;
  int q = b.input("q", DType::Float32, {1, 2, 4, 8}), kt = b.input("kt", DType::Float32, {1, 2, 8, 4}),
      v = b.input("v", DType::Float32, {1, 2, 4, 8});
  int s = b.node(Op::Div, {b.node(Op::MatMul, {q, kt}), b.constant("c", Tensor::from_vector<float>({}, {2.0f}))});
  b.output(b.node(Op::MatMul, {b.node(Op::Softmax, {s}, {{"axis", GraphBuilder::attr_int(-1)}}), v}));
  auto g = b.build();
  passes::PassConfig config;
  config.fuse_attention = true;
  auto fused = optimize_graph(g, OptimizeLevel::Extended, config);
  int attention = 0;
  for (const Node& n : fused->nodes) attention += n.op == Op::Attention;
  EXPECT_EQ(attention, 1);
  config.attention_max_head = 4;  // a tier that takes smaller heads: left as it is
  auto kept = optimize_graph(g, OptimizeLevel::Extended, config);
  for (const Node& n : kept->nodes) EXPECT_NE(n.op, Op::Attention);
}

// --- On a GPU ---

#define SKIP_WITHOUT_GPU()                                                            \
  do {                                                                                \
    std::string why_;                                                                 \
    if (!jit::cuda::gpu_available(&why_)) GTEST_SKIP() << "no GPU: " << why_;         \
  } while (0)

void expect_attention_on_gpu(const Form& f, const std::string& what) {
  auto g = attention_graph(f);
  const NamedTensors in = inputs_for(f);
  Options interp;
  interp.max_tier = Tier::Interp;
  const NamedTensors want = Session::from_graph(g, interp)->run(in);
  Options o;
  o.max_tier = Tier::Gpu;
  o.hot_threshold = 1;
  o.climb_threshold = 2;
  auto s = Session::from_graph(g, o);
  for (int call = 0; call < 8; ++call) {
    const NamedTensors got = s->run(in);
    Tolerance tol = Tolerance::for_dtype(DType::Float32);
    const Comparison c = compare_tensors(want[0].second, got[0].second, tol);
    EXPECT_TRUE(c.equal) << what << ", call " << call << ": " << c.message << "\n" << s->report();
    s->wait_for_compiles();
  }
  const std::vector<RegionReport> regions = s->region_reports();
  ASSERT_EQ(regions.size(), 1u) << what << "\n" << s->report();
  EXPECT_EQ(regions[0].tier, Tier::Gpu) << what << ": " << regions[0].climb << "\n" << s->report();
  EXPECT_EQ(regions[0].validation, "passed") << what << "\n" << s->report();
}

TEST(GpuAttention, every_form_the_kernel_takes_matches_the_interpreter) {
  SKIP_WITHOUT_GPU();
  expect_attention_on_gpu({{1, 12, 128, 64}, {1, 12, 128, 64}, {1, 12, 128, 64}}, "BERT-base's shape, no mask");
  expect_attention_on_gpu({{2, 4, 77, 80}, {2, 4, 77, 80}, {2, 4, 77, 80}, {2, 1, 1, 77}}, "an additive padding mask");
  expect_attention_on_gpu({{1, 2, 33, 32}, {1, 2, 65, 32}, {1, 2, 65, 48}, {1, 1, 33, 65}, true},
                          "a boolean mask, V's head size other than Q's");
  expect_attention_on_gpu({{1, 2, 9, 16}, {1, 2, 9, 16}, {1, 2, 9, 16}, {9, 9}, true, false, true, true},
                          "a row with every key masked (NaN, as the interpreter's)");
  expect_attention_on_gpu({{1, 3, 40, 128}, {1, 3, 40, 128}, {1, 3, 40, 128}, {}, false, true, false},
                          "causal, the default scale, head size 128");
  expect_attention_on_gpu({{2, 8, 5, 64}, {2, 2, 37, 64}, {2, 2, 37, 64}}, "grouped heads (8 query, 2 key/value)");
  expect_attention_on_gpu({{1, 2, 1, 64}, {1, 2, 300, 64}, {1, 2, 300, 64}}, "one query over 300 keys");
  expect_attention_on_gpu({{1, 2, 7, 3}, {1, 2, 9, 3}, {1, 2, 9, 5}}, "head sizes 3 and 5 (the loops' tails)");
}

}  // namespace
}  // namespace terrace

#endif  // TERRACE_HAVE_CUDA
