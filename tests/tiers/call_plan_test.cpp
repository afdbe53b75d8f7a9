// Call plans (tiers/call_plan.h): once a signature's regions are settled, calls run the recorded
// plan (or a tier's whole-plan version of it) with the answers the walk gives; a changed shape, a
// data-dependent shape, a failing or wrong whole plan all fall back to the walk.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "interp/compare.h"
#include "interp/graph_builder.h"
#include "tiers/call_plan.h"
#include "tiers/cpu/cpu_backend.h"
#include "tests/support/session_helpers.h"
#include "tiers/session.h"

namespace terrace {
namespace {

using testing::have_tier1;

// y = Exp(CumSum(Relu(x) + x, axis 1)), x: float[batch, 8]: a tier-1 region, a graph break, a
// region.
std::shared_ptr<Graph> model_with_a_break() {
  GraphBuilder b;
  const std::string x = b.input("x", DType::Float32, {"batch", 8});
  const std::string cumsum =
      b.op("CumSum", {b.op("Add", {b.op("Relu", {x}), x}), b.constant("axis", Tensor::from_vector<int64_t>({}, {1}))});
  b.output(b.op("Exp", {cumsum}));
  return b.build();
}

// y = Tanh(x) * x + x: one region.
std::shared_ptr<Graph> one_region() {
  GraphBuilder b;
  auto x = b.input("x", DType::Float32, {"batch", 8});
  b.output(b.op("Add", {b.op("Mul", {b.op("Tanh", {x}), x}), x}));
  return b.build();
}

Tensor ramp(int64_t rows, float scale) {
  Tensor t = Tensor::empty(DType::Float32, {rows, 8});
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = scale * float(i % 13) - 2.0f;
  return t;
}

Options tier1() {
  Options o = Options::from_env();
  o.max_tier = Tier::Cpu;
  o.cache_dir = "";
  o.hot_threshold = 1;
  o.validate_calls = 1;
  return o;
}

NamedTensors interpreted(const std::shared_ptr<Graph>& g, const Tensor& x) {
  Options o;
  o.max_tier = Tier::Interp;
  return Session::from_graph(g, o)->run({{"x", x}});
}

void expect_same(const NamedTensors& want, const NamedTensors& got, const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    const Comparison c = compare_tensors(want[i].second, got[i].second, Tolerance::for_dtype(DType::Float32));
    EXPECT_TRUE(c.equal) << what << ": " << c.message;
  }
}

TEST(CallPlan, warm_calls_run_a_plan_with_the_graph_break_as_a_step) {
  if (!have_tier1()) GTEST_SKIP() << "no tier-1 JIT in this build";
  auto g = model_with_a_break();
  auto s = Session::from_graph(g, tier1());
  Options off = tier1();
  off.call_plans = CallPlanMode::Off;
  auto walked = Session::from_graph(g, off);
  for (int call = 0; call < 12; ++call) {
    const Tensor x = ramp(3, 0.25f + 0.01f * float(call));
    const NamedTensors got = s->run({{"x", x}});
    const NamedTensors want = walked->run({{"x", x}});
    s->wait_for_compiles();
    walked->wait_for_compiles();
    // The same compiled code either way, so the same bits.
    ASSERT_EQ(want.size(), got.size());
    EXPECT_TRUE(compare_tensors(want[0].second, got[0].second, Tolerance{0, 0}).equal) << "call " << call;
  }
  const std::vector<PlanReport> plans = s->plan_reports();
  ASSERT_EQ(plans.size(), 1u) << s->report();
  EXPECT_EQ(plans[0].signature, "float32[3,8]");
  EXPECT_EQ(plans[0].regions, 2);       // Relu+Add, and the Exp after the break
  EXPECT_EQ(plans[0].graph_breaks, 1);  // CumSum
  EXPECT_GE(plans[0].calls, 5) << s->report();
  EXPECT_EQ(plans[0].whole, "");  // a plan with a graph break is not offered whole
  EXPECT_TRUE(walked->plan_reports().empty());
  // The plan's calls are counted in the region's profile, as dispatch would count them.
  s->wait_for_compiles();
  EXPECT_EQ(s->region_reports().at(0).calls, 12) << s->report();
  EXPECT_NE(s->report().find("call plan float32[3,8]"), std::string::npos) << s->report();
}

TEST(CallPlan, each_shape_gets_its_own_plan_and_answers_alike) {
  if (!have_tier1()) GTEST_SKIP() << "no tier-1 JIT in this build";
  auto g = one_region();
  auto s = Session::from_graph(g, tier1());
  for (int call = 0; call < 16; ++call) {
    const Tensor x = ramp(call % 2 ? 2 : 5, 0.3f);
    expect_same(interpreted(g, x), s->run({{"x", x}}), "call " + std::to_string(call));
    s->wait_for_compiles();
  }
  EXPECT_EQ(s->plan_reports().size(), 2u) << s->report();
}

// x -> NonZero -> Cast -> ReduceSum: NonZero's output shape follows the data, so one input
// signature reaches the region after it with several shapes.
TEST(CallPlan, a_shape_that_follows_the_data_leaves_the_plan_at_its_step) {
  if (!have_tier1()) GTEST_SKIP() << "no tier-1 JIT in this build";
  GraphBuilder b;
  auto x = b.input("x", DType::Float32, {4, 8});
  auto nz = b.op("NonZero", {b.op("Relu", {x})});
  auto f = b.op("Cast", {nz}, {{"to", AttrValue(int64_t(1))}});  // ONNX FLOAT
  b.output(b.op("Mul", {b.op("Add", {f, f}), f}));
  auto g = b.build();
  auto s = Session::from_graph(g, tier1());
  for (int call = 0; call < 24; ++call) {
    // Mostly one count of positives, every fourth call another.
    const Tensor in = ramp(4, call % 4 == 3 ? 0.5f : 0.25f);
    expect_same(interpreted(g, in), s->run({{"x", in}}), "call " + std::to_string(call));
    s->wait_for_compiles();
  }
  EXPECT_FALSE(s->plan_reports().empty()) << s->report();
}

TEST(CallPlan, off_makes_none) {
  if (!have_tier1()) GTEST_SKIP() << "no tier-1 JIT in this build";
  Options o = tier1();
  o.call_plans = CallPlanMode::Off;
  auto s = Session::from_graph(one_region(), o);
  for (int call = 0; call < 6; ++call) {
    s->run({{"x", ramp(2, 1)}});
    s->wait_for_compiles();
  }
  EXPECT_TRUE(s->plan_reports().empty());
}

// Every op a region of its own: y = Reshape(Relu(x)) + Sigmoid(Abs(Neg(Reshape(x)))). The first Reshape's region
// returns a view of Relu's output, read by the last step, after the Neg, Abs and Sigmoid outputs
// are made: Relu's buffer must stay out of their way in the plan's block though its own last
// reader (the Reshape) ran long before.
std::shared_ptr<Graph> a_view_that_outlives_its_source() {
  GraphBuilder b;
  auto x = b.input("x", DType::Float32, {4, 6});
  auto flat = b.constant("flat", Tensor::from_vector<int64_t>({1}, {24}));
  auto view = b.op("Reshape", {b.op("Relu", {x}), flat});
  auto tail = b.op("Sigmoid", {b.op("Abs", {b.op("Neg", {b.op("Reshape", {x, flat})})})});
  b.output(b.op("Add", {view, tail}));
  return b.build();
}

// The graph above's x for call k: signs and values that differ from call to call.
Tensor varied(int k) {
  Tensor x = Tensor::empty(DType::Float32, {4, 6});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = float((i * 7 + k) % 11) - 5.0f;
  return x;
}

// Every op a region of its own (the graph above), on tier 1.
std::unique_ptr<Session> one_region_per_op(const std::shared_ptr<Graph>& g) {
  Options o = tier1();
  o.max_region_nodes = 1;
  return Session::from_graph(g, o);
}

TEST(CallPlan, values_between_regions_share_one_block_by_liveness) {
  if (!have_tier1()) GTEST_SKIP() << "no tier-1 JIT in this build";
  auto g = a_view_that_outlives_its_source();
  auto s = one_region_per_op(g);
  for (int call = 0; call < 12; ++call) {
    const Tensor x = varied(call);
    expect_same(interpreted(g, x), s->run({{"x", x}}), "call " + std::to_string(call));
    s->wait_for_compiles();
  }
  const std::vector<PlanReport> plans = s->plan_reports();
  ASSERT_EQ(plans.size(), 1u) << s->report();
  EXPECT_GE(plans[0].calls, 3) << s->report();
  EXPECT_EQ(plans[0].left, 0) << s->report();  // every planned call ran its placed steps to the end
  ASSERT_EQ(plans[0].memory.size(), 1u) << s->report();
  const PlanReport::Memory& m = plans[0].memory[0];
  EXPECT_EQ(m.device, "cpu");
  EXPECT_EQ(m.values, 4) << s->report();  // Relu, Neg, Abs, Sigmoid; not the view, not the output
  // Relu's lives to the Add, Neg's ends where Sigmoid's begins: 3 at once, not 4.
  EXPECT_EQ(m.bytes, 3 * kPlacementAlign) << s->report();
  EXPECT_EQ(m.blocks, 1u);  // one call at a time: one block, reused
}

// Calls in flight at once each lease a block of their own: no call sees another's values.
TEST(CallPlan, concurrent_calls_each_lease_a_block) {
  if (!have_tier1()) GTEST_SKIP() << "no tier-1 JIT in this build";
  auto g = a_view_that_outlives_its_source();
  auto s = one_region_per_op(g);
  auto input = varied;
  for (int call = 0; call < 8; ++call) {
    s->run({{"x", input(call)}});
    s->wait_for_compiles();
  }
  std::vector<NamedTensors> want;
  for (int k = 0; k < 4; ++k) want.push_back(interpreted(g, input(k)));
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      for (int call = 0; call < 50; ++call) {
        const NamedTensors got = s->run({{"x", input(k)}});
        if (!compare_tensors(want[size_t(k)][0].second, got[0].second, Tolerance::for_dtype(DType::Float32)).equal)
          ++wrong;
      }
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  const std::vector<PlanReport> plans = s->plan_reports();
  ASSERT_EQ(plans.size(), 1u) << s->report();
  ASSERT_EQ(plans[0].memory.size(), 1u) << s->report();
  EXPECT_GE(plans[0].memory[0].blocks, 1u);
  EXPECT_LE(plans[0].memory[0].blocks, 5u) << "at most one per call in flight (and one left from before)";
}

// A plug-in tier above tier 1 that takes plans whole: a "graph" that runs the steps' code in
// order, right, wrong, or refusing every call after the check it was made from (a fired check).
class TakingTier : public Backend {
 public:
  enum class Mode { Right, AddsOne, Refuses };
  explicit TakingTier(Mode mode) : mode_(mode), inner_(make_cpu_backend()) {}
  Tier tier() const override { return Tier(3); }
  int promotion_threshold(const Options&) const override { return 1; }
  std::string can_compile(const Graph& g, const Node& n) const override { return inner_->can_compile(g, n); }
  std::vector<Tensor> error_allowance(const Graph& g, const Region& r, const std::vector<Tensor>& in) const override {
    return inner_->error_allowance(g, r, in);
  }
  std::unique_ptr<CompiledRegion> compile(const Graph& g, const Region& r, const std::vector<Tensor>& in) override {
    return inner_->compile(g, r, in);
  }
  std::unique_ptr<TakenPlan> take_plan(const WholePlan& plan, std::string&) override {
    return std::make_unique<Taken>(plan, mode_);
  }

 private:
  struct Taken : TakenPlan {
    Taken(WholePlan p, Mode m) : plan(std::move(p)), mode(m) {}
    std::optional<std::vector<Tensor>> run(const std::vector<Tensor>& inputs, bool, CallTally& tally) override {
      if (mode == Mode::Refuses && runs++ > 0) return std::nullopt;
      std::vector<Tensor> env(plan.values);
      for (size_t i = 0; i < inputs.size(); ++i) env[size_t(plan.inputs[i])] = inputs[i];
      for (const auto& [v, t] : plan.constants) env[size_t(v)] = t;
      for (const WholePlan::Step& step : plan.steps) {
        std::vector<Tensor> in;
        for (int v : step.inputs) in.push_back(env[size_t(v)]);
        std::vector<Tensor> out = step.code->run(in, tally);
        for (size_t i = 0; i < out.size(); ++i) env[size_t(step.outputs[i])] = out[i];
      }
      std::vector<Tensor> out;
      for (int v : plan.outputs) {
        out.push_back(env[size_t(v)].clone());
        if (mode == Mode::AddsOne)
          for (int64_t i = 0; i < out.back().numel(); ++i) out.back().data<float>()[i] += 1.0f;
      }
      return out;
    }
    size_t device_bytes() const override { return 0; }
    std::string describe() const override { return "the test's whole plan of " + std::to_string(plan.steps.size()); }
    WholePlan plan;
    Mode mode;
    std::atomic<int> runs{0};
  };
  Mode mode_;
  std::unique_ptr<Backend> inner_;
};

PlanReport run_taken(TakingTier::Mode mode) {
  Options o = tier1();
  o.extra_tiers.push_back([mode] { return std::make_unique<TakingTier>(mode); });
  auto g = one_region();
  auto s = Session::from_graph(g, o);
  for (int call = 0; call < 14; ++call) {
    const Tensor x = ramp(3, 0.1f * float(call + 1));
    expect_same(interpreted(g, x), s->run({{"x", x}}), "call " + std::to_string(call));
    s->wait_for_compiles();
  }
  const std::vector<PlanReport> plans = s->plan_reports();
  EXPECT_EQ(plans.size(), 1u) << s->report();
  return plans.empty() ? PlanReport{} : plans[0];
}

TEST(CallPlan, a_tier_takes_the_plan_whole_and_serves_the_calls) {
  if (!have_tier1()) GTEST_SKIP() << "no tier-1 JIT in this build";
  const PlanReport p = run_taken(TakingTier::Mode::Right);
  EXPECT_EQ(p.whole, "taken: the test's whole plan of 1");
  EXPECT_GE(p.whole_calls, 3);
}

TEST(CallPlan, a_whole_plan_that_disagrees_with_the_steps_is_not_taken) {
  if (!have_tier1()) GTEST_SKIP() << "no tier-1 JIT in this build";
  const PlanReport p = run_taken(TakingTier::Mode::AddsOne);
  EXPECT_NE(p.whole.find("not taken: output 0 differs from the step-by-step plan's"), std::string::npos) << p.whole;
  EXPECT_EQ(p.whole_calls, 0);
}

TEST(CallPlan, a_whole_plan_whose_check_fires_sends_the_call_step_by_step) {
  if (!have_tier1()) GTEST_SKIP() << "no tier-1 JIT in this build";
  const PlanReport p = run_taken(TakingTier::Mode::Refuses);  // every answer checked in run_taken
  EXPECT_EQ(p.whole.rfind("taken:", 0), 0u) << p.whole;
  EXPECT_EQ(p.whole_calls, 0);
  EXPECT_GE(p.calls, 3);
}

}  // namespace
}  // namespace terrace
