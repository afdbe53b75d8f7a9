// Control-flow bodies as plans of their own (tiers/body_plans.h): an If's branch compiled behind
// the condition's value, the other branch run when it changes, Loop and Scan bodies compiled per
// iteration; all validated against the interpreter.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "interp/compare.h"
#include "interp/onnx_import.h"
#include "tests/import/import_util.h"
#include "tests/support/graph_builder.h"
#include "tests/support/session_helpers.h"
#include "tiers/session.h"
#include "tiers/tier_manager.h"

namespace terrace {
namespace {

using testing::FaultInjected;
using testing::occurrences;
using testing::random_tensor;

// A mode flag selects Y = X * sigmoid(X) (then) or Y = tanh(X) + X (else); Z reads Y outside.
constexpr const char* kModeSwitch = R"(
<ir_version: 8, opset_import: ["" : 17]>
g (float[N, 16] X, bool mode) => (float[N, 16] Z)
{
  Y = If(mode) <then_branch = t () => (float[N, 16] r) { s = Sigmoid(X)  r = Mul(X, s) },
                else_branch = e () => (float[N, 16] r) { a = Tanh(X)  r = Add(a, X) }>
  Z = Relu(Y)
}
)";

// The same If inside a Loop body: each iteration runs the branch.
constexpr const char* kIfInLoop = R"(
<ir_version: 8, opset_import: ["" : 17]>
g (float[N, 16] X, bool mode) => (float[N, 16] Y)
{
  n = Constant<value = int64 {3}>()
  t = Constant<value = bool {1}>()
  Y = Loop(n, t, X) <body = body (int64 i, bool c, float[N, 16] x) => (bool co, float[N, 16] xo) {
    co = Identity(c)
    xo = If(mode) <then_branch = tb () => (float[N, 16] r) { s = Sigmoid(x)  r = Mul(x, s) },
                   else_branch = eb () => (float[N, 16] r) { a = Tanh(x)  r = Add(a, x) }>
  }>
}
)";

std::shared_ptr<const Graph> model(const char* text) {
  return load_onnx_bytes(test::bytes_of(test::parse_model(text))).graph;
}

NamedTensors inputs(bool mode, uint64_t seed = 3) {
  return {{"X", random_tensor({4, 16}, seed, -3, 3)}, {"mode", Tensor::scalar<bool>(mode)}};
}

NamedTensors reference(const std::shared_ptr<const Graph>& g, const NamedTensors& in) {
  return Session::from_graph(g, testing::on_tier(Tier::Interp))->run(in);
}

void expect_right(Session& s, const std::shared_ptr<const Graph>& g, const NamedTensors& in) {
  const NamedTensors want = reference(g, in), got = s.run(in);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    Comparison c = compare_tensors(want[i].second, got[i].second, Tolerance::for_dtype(want[i].second.dtype()));
    EXPECT_TRUE(c.equal) << got[i].first << ": " << c.message;
  }
}

// The report's regions inside `branch` ("then_branch"), on `tier`.
int branch_regions(const Session& s, const std::string& branch, Tier tier) {
  int n = 0;
  for (const RegionReport& r : s.region_reports())
    n += r.subgraph.rfind(branch, 0) == 0 && r.tier == tier;
  return n;
}

void calls(Session& s, const std::shared_ptr<const Graph>& g, bool mode, int n) {
  for (int i = 0; i < n; ++i) {
    expect_right(s, g, inputs(mode, uint64_t(i)));
    s.wait_for_compiles();
  }
}

TEST(ControlFlowBodies, the_taken_branch_compiles_behind_its_condition_and_a_change_runs_the_other) {
  if (!testing::have_tier1()) GTEST_SKIP() << "no tier 1 in this build";
  auto g = model(kModeSwitch);
  auto s = Session::from_graph(g, testing::on_tier(Tier::Cpu));
  calls(*s, g, true, 6);  // hot, compiled, its validated calls, then served
  EXPECT_EQ(branch_regions(*s, "then_branch", Tier::Cpu), 1) << s->report();
  EXPECT_EQ(branch_regions(*s, "else_branch", Tier::Cpu), 0) << s->report();
  const std::string json = s->report_json();
  EXPECT_NE(json.find("\"guard\":\"If #0 -> 'Y': condition true\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"validation\":\"passed\""), std::string::npos) << json;

  calls(*s, g, false, 1);  // the other value: its branch runs in the interpreter, answers right
  EXPECT_EQ(branch_regions(*s, "else_branch", Tier::Interp), 1) << s->report();
  calls(*s, g, false, 5);  // and compiles in turn: a version for each value
  EXPECT_EQ(branch_regions(*s, "else_branch", Tier::Cpu), 1) << s->report();
  EXPECT_EQ(branch_regions(*s, "then_branch", Tier::Cpu), 1) << s->report();
  calls(*s, g, true, 2);  // back: the first branch's version serves at once
  for (const RegionReport& r : s->region_reports())
    if (!r.subgraph.empty()) EXPECT_EQ(r.validation, "passed") << r.subgraph;
}

TEST(ControlFlowBodies, a_miscompiled_branch_is_caught_by_validation_and_the_caller_gets_the_right_answer) {
  if (!testing::have_tier1()) GTEST_SKIP() << "no tier 1 in this build";
  auto g = model(kModeSwitch);
  auto s = Session::from_graph(g, testing::on_tier(Tier::Cpu));
  {
    FaultInjected fault("miscompile:cpu");
    calls(*s, g, true, 6);
  }
  const std::string json = s->report_json();
  EXPECT_NE(json.find("\"validation\":\"failed: output"), std::string::npos) << json;
  EXPECT_EQ(json.find("\"tier\":\"cpu\""), std::string::npos) << "a demoted version is still in use: " << json;
  EXPECT_EQ(occurrences(json, "\"subgraph\":\"then_branch of If"), 1u) << json;
}

TEST(ControlFlowBodies, an_if_inside_a_loop_body_runs_its_branch_compiled_each_iteration) {
  if (!testing::have_tier1()) GTEST_SKIP() << "no tier 1 in this build";
  auto g = model(kIfInLoop);
  auto s = Session::from_graph(g, testing::on_tier(Tier::Cpu));
  calls(*s, g, false, 4);
  EXPECT_EQ(branch_regions(*s, "else_branch of If", Tier::Cpu), 1) << s->report();
  const std::string report = s->report();
  EXPECT_NE(report.find("in else_branch of If #1 -> 'xo' in body of Loop"), std::string::npos) << report;
}

TEST(ControlFlowBodies, with_compile_bodies_off_every_branch_is_interpreted) {
  if (!testing::have_tier1()) GTEST_SKIP() << "no tier 1 in this build";
  auto g = model(kModeSwitch);
  Options o = testing::on_tier(Tier::Cpu);
  o.compile_bodies = false;
  auto s = Session::from_graph(g, o);
  calls(*s, g, true, 4);
  for (const RegionReport& r : s->region_reports()) EXPECT_TRUE(r.subgraph.empty()) << r.subgraph;
}

// A Loop of 8 iterations: x = tanh(x) * 0.5 + x; then a Scan summing rows, its body an Add.
constexpr const char* kLoopAndScan = R"(
<ir_version: 8, opset_import: ["" : 17]>
g (float[N, 16] X) => (float[N, 16] Y, float[16] S)
{
  n = Constant<value = int64 {8}>()
  t = Constant<value = bool {1}>()
  Y = Loop(n, t, X) <body = body (int64 i, bool c, float[N, 16] x) => (bool co, float[N, 16] xo) {
    co = Identity(c)
    h = Constant<value = float {0.5}>()
    a = Tanh(x)
    m = Mul(a, h)
    xo = Add(m, x)
  }>
  z = Constant<value = float[16] {0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0}>()
  S, R = Scan(z, Y) <num_scan_inputs = 1, body = sbody (float[16] acc, float[16] row) => (float[16] acc2, float[16] rowo) {
    acc2 = Add(acc, row)
    rowo = Identity(row)
  }>
}
)";

TEST(ControlFlowBodies, loop_and_scan_bodies_run_compiled_each_iteration) {
  if (!testing::have_tier1()) GTEST_SKIP() << "no tier 1 in this build";
  auto g = model(kLoopAndScan);
  auto s = Session::from_graph(g, testing::on_tier(Tier::Cpu));
  for (int i = 0; i < 4; ++i) {
    expect_right(*s, g, {{"X", random_tensor({4, 16}, uint64_t(i), -3, 3)}});
    s->wait_for_compiles();
  }
  EXPECT_EQ(branch_regions(*s, "body of Loop", Tier::Cpu), 1) << s->report();
  EXPECT_EQ(branch_regions(*s, "body of Scan", Tier::Cpu), 1) << s->report();
  const std::string json = s->report_json();
  EXPECT_NE(json.find(": every iteration\""), std::string::npos) << json;
  for (const RegionReport& r : s->region_reports()) EXPECT_EQ(r.validation, "passed") << r.ops;
}

// Silero VAD (tools/fetch_real_models.sh) holds its work in an If on its sample rate: calls that
// alternate 16 kHz and 8 kHz chunks each run their branch's compiled regions, and answer as the
// interpreter does.
TEST(ControlFlowBodies, silero_vad_alternating_sample_rates_match_the_interpreter) {
  if (!testing::have_tier1()) GTEST_SKIP() << "no tier 1 in this build";
  const char* home = std::getenv("HOME");
  const std::filesystem::path path =
      std::filesystem::path(home ? home : "/") / ".cache/terrace/real-models/silero_vad/model.onnx";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent (bash tools/fetch_real_models.sh)";
  auto g = load_onnx_file(path.string()).graph;
  auto s = Session::from_graph(g, testing::on_tier(Tier::Cpu));
  for (int call = 0; call < 16; ++call) {
    const bool wide = call % 4 < 2;  // two calls at each rate in turn
    NamedTensors in = {{"input", random_tensor({1, wide ? 576 : 288}, uint64_t(call), -0.3f, 0.3f)},
                       {"state", random_tensor({2, 1, 128}, uint64_t(call) + 100, -0.5f, 0.5f)},
                       {"sr", Tensor::scalar<int64_t>(wide ? 16000 : 8000)}};
    expect_right(*s, g, in);
    s->wait_for_compiles();
  }
  EXPECT_GT(branch_regions(*s, "then_branch of If 'If_0'", Tier::Cpu), 5) << s->report();
  EXPECT_GT(branch_regions(*s, "else_branch of If 'If_0'", Tier::Cpu), 5) << s->report();
  for (const RegionReport& r : s->region_reports()) EXPECT_EQ(r.validation.rfind("failed", 0), std::string::npos) << r.ops;
}

}  // namespace
}  // namespace terrace
