// Tier 1's error allowance for its generated regions (tiers/cpu/kernel_allowance.h), on magika's
// first layer norm: a tanh GELU, then mean and variance as E[x] and E[x^2] - E[x]^2 in float32,
// then (g - mean) * rsqrt(var + eps) * scale + bias. On the column of magika's test input below,
// E[g^2] is 961 times the variance and the bias cancels 97% of the product, so one ulp of the
// GELU (the prelude's tanh against libm's) moves a float32 sum across a rounding boundary and
// the output by 2.3e-3 relative: tier 1 and the interpreter land on either side of the float64
// value, each within the tolerance of it, and 2.5e-5 apart, beyond rtol 1e-3 / atol 1e-5 of each
// other. Without the allowance this region was demoted and magika ran it on the interpreter.
#include <gtest/gtest.h>

#include <cmath>
#include <string_view>

#include "interp/compare.h"
#include "tests/support/graph_builder.h"
#include "tiers/cpu/kernel_allowance.h"
#include "tiers/session.h"
#include "tiers/tier_manager.h"

namespace terrace {
namespace {

using testing::GraphBuilder;

// magika's Dense_0 output feeding column 136 of its first layer norm (test_data_set_0): 512
// values, each one of 30 (a byte embedding), written as the index of its value, 'a' + i.
constexpr float kValues[] = {
    -0.744992733f, -0.729687274f, -0.694642186f, -0.692135513f, -0.671851039f, -0.664283633f, -0.661157131f,
    -0.650539219f, -0.645465076f, -0.618363142f, -0.595020175f, -0.594567835f, -0.594266891f, -0.593616128f,
    -0.592024982f, -0.589731455f, -0.559324384f, -0.556864917f, -0.555565298f, -0.532774866f, -0.532208622f,
    -0.525814652f, -0.504532933f, -0.503706157f, -0.496611446f, -0.419703841f, -0.407406747f, -0.39905262f,
    -0.379847497f, -0.330918014f};
constexpr std::string_view kColumn =
    "zzzwubolbhcj}wjcjdbwwqmt{wewbpxw|ipwlt~qlrbkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk"
    "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk"
    "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk"
    "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk"
    "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkknlcqsqxelax~vwhiwvywwj~g~wjjbhq"
    "pfpq}wlcili{";
// Row 21's scale and bias in magika (the test uses them for every row).
constexpr float kScale = 0.7926794f, kBias = -0.31091604f;
constexpr int64_t kRows = 512;

Tensor magika_column() {
  std::vector<float> x;
  for (char c : kColumn) x.push_back(kValues[c - 'a']);
  return Tensor::from_vector<float>({kRows, 1}, x);
}

// magika's LayerNorm_0 as tf2onnx wrote it, over axis 0 of x [rows, cols].
std::shared_ptr<Graph> gelu_layer_norm(int64_t rows, int64_t cols) {
  GraphBuilder b;
  auto c = [&](const char* name, float v) { return b.constant(name, Tensor::scalar<float>(v)); };
  const int x = b.input("x", DType::Float32, {rows, cols});
  const int axes = b.constant("axes", Tensor::from_vector<int64_t>({1}, {0}));
  auto mul = [&](int a, int bb) { return b.node(Op::Mul, {a, bb}); };
  const int inner = mul(c("k", 0.7978846f), b.node(Op::Add, {x, mul(x, mul(x, mul(c("a", 0.044715f), x)))}));
  const int g = mul(x, mul(c("half", 0.5f), b.node(Op::Add, {c("one", 1.0f), b.node(Op::Tanh, {inner})})));
  const int inv_n = c("inv_n", 1.0f / float(rows));
  const int mean = mul(b.node(Op::ReduceSum, {g, axes}), inv_n);
  const int mean_sq = mul(b.node(Op::ReduceSum, {mul(g, g), axes}), inv_n);
  const int var = b.node(Op::Max, {c("zero", 0.0f), b.node(Op::Sub, {mean_sq, mul(mean, mean)})});
  const int inv = b.node(Op::Reciprocal, {b.node(Op::Sqrt, {b.node(Op::Add, {var, c("eps", 1e-6f)})})});
  const int y = b.node(Op::Add, {mul(b.node(Op::Sub, {g, mean}), mul(inv, c("scale", kScale))), c("bias", kBias)});
  b.output(y);
  return b.build();
}

// The same formula in float64: what both float32 evaluations approximate.
std::vector<double> float64_layer_norm(const Tensor& x) {
  const int64_t n = x.numel();
  std::vector<double> g(static_cast<size_t>(n)), y(static_cast<size_t>(n));
  double s = 0, s2 = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double v = x.data<float>()[i];
    g[size_t(i)] = 0.5 * v * (1 + std::tanh(double(0.7978846f) * (v + double(0.044715f) * v * v * v)));
    s += g[size_t(i)], s2 += g[size_t(i)] * g[size_t(i)];
  }
  const double mean = s / double(n), var = s2 / double(n) - mean * mean;
  for (int64_t i = 0; i < n; ++i)
    y[size_t(i)] = (g[size_t(i)] - mean) / std::sqrt(var + double(1e-6f)) * double(kScale) + double(kBias);
  return y;
}

Tensor run_on(const std::shared_ptr<Graph>& g, const Tensor& x, Tier tier, ValidateMode validate, std::string* report = nullptr) {
  Options o;
  o.max_tier = tier;
  o.validate = validate;
  auto s = Session::from_graph(g, o);
  NamedTensors out;
  for (int call = 0; call < 8; ++call) {  // past promotion and the shadow-validated calls
    out = s->run({{"x", x}});
    s->wait_for_compiles();
  }
  if (report)
    for (const RegionReport& r : s->region_reports()) *report += r.ops + ": " + tier_name(r.tier) + ", " + r.validation + "\n";
  return out.at(0).second;
}

// The allowance of the graph's one region for input x.
Tensor allowance_for(const std::shared_ptr<Graph>& g, const Tensor& x) {
  Options o;
  o.max_tier = Tier::Cpu;
  auto s = Session::from_graph(g, o);
  EXPECT_EQ(s->plan().regions.size(), 1u);
  const Region& region = s->plan().regions.at(0);
  std::vector<Tensor> inputs;
  for (int v : region.inputs) inputs.push_back(g->initializers.count(v) ? g->initializers.at(v) : x);
  return cpu_kernels::error_allowance(*g, region, inputs).at(0);
}

TEST(KernelAllowance, variance_by_cancellation_stays_on_tier1) {
  const std::shared_ptr<Graph> g = gelu_layer_norm(kRows, 1);
  const Tensor x = magika_column();
  const Tensor interp = run_on(g, x, Tier::Interp, ValidateMode::First);
  const Tensor cpu = run_on(g, x, Tier::Cpu, ValidateMode::Off);
  const std::vector<double> exact = float64_layer_norm(x);
  // The premise: the two float32 evaluations disagree beyond the tolerance at row 21, while each
  // is within it of the float64 value (no tier is wrong: the formula is ill-conditioned there).
  const Tolerance tol = Tolerance::for_dtype(DType::Float32);
  const Comparison plain = compare_tensors(interp, cpu, tol);
  EXPECT_FALSE(plain.equal) << "the reproducer no longer reproduces magika's mismatch";
  for (int64_t i : {int64_t(21)}) {
    const double e = exact[size_t(i)], a = interp.data<float>()[i], b = cpu.data<float>()[i];
    EXPECT_LE(std::abs(a - e), tol.atol + tol.rtol * std::abs(e)) << "interpreter at row " << i;
    EXPECT_LE(std::abs(b - e), tol.atol + tol.rtol * std::abs(e)) << "tier 1 at row " << i;
  }
  // The allowance covers the disagreement, and validation keeps the region on tier 1.
  const Tensor allowance = allowance_for(g, x);
  ASSERT_TRUE(allowance.defined());
  const Comparison judged = compare_tensors(interp, cpu, tol, allowance);
  EXPECT_TRUE(judged.equal) << judged.message;
  std::string report;
  run_on(g, x, Tier::Cpu, ValidateMode::First, &report);
  EXPECT_NE(report.find(": cpu, passed"), std::string::npos) << report;
}

// Where the formula is well conditioned (a GELU of values spread around 0: the variance is of the
// order of E[g^2]), the allowance stays a fraction of the tolerance: it widens only what the
// formula's own sensitivity widens. Its worst here, 0.21 of the tolerance, is the prelude's and
// libm's tanh errors (10u relative together) taken as all of one sign through the 64-term sums:
// a worst case.
TEST(KernelAllowance, well_conditioned_layer_norm_gets_a_small_allowance) {
  const std::shared_ptr<Graph> g = gelu_layer_norm(64, 16);
  const Tensor x = testing::random_tensor({64, 16}, 7, -3, 3);
  const Tensor interp = run_on(g, x, Tier::Interp, ValidateMode::First);
  const Tensor allowance = allowance_for(g, x);
  ASSERT_TRUE(allowance.defined());
  const Tolerance tol = Tolerance::for_dtype(DType::Float32);
  double worst = 0;
  for (int64_t i = 0; i < x.numel(); ++i)
    worst = std::max(worst, allowance.data<double>()[i] / (tol.atol + tol.rtol * std::abs(interp.data<float>()[i])));
  EXPECT_LT(worst, 0.25) << "the allowance is that share of the tolerance at worst";
}

// A region holding an op the walk has no rule for (Sin: the prelude's, with no stated bound) gets
// no allowance: the plain tolerance judges it.
TEST(KernelAllowance, region_with_an_unmodelled_op_gets_none) {
  GraphBuilder b;
  const int x = b.input("x", DType::Float32, {4, 8});
  b.output(b.node(Op::Add, {b.node(Op::Sin, {b.node(Op::Mul, {x, x})}), x}));
  const std::shared_ptr<Graph> g = b.build();
  EXPECT_FALSE(allowance_for(g, testing::random_tensor({4, 8}, 3)).defined());
}

}  // namespace
}  // namespace terrace
