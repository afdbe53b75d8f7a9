// The ladder of compiled tiers: a plug-in tier (Options::extra_tiers) above tier 1 takes regions
// from it, is validated, falls back when it fails or answers wrongly, and says why, with nothing in
// the session, the partitioner or the tier manager written for it.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "interp/compare.h"
#include "interp/interpreter.h"
#include "jit/tuning.h"
#include "tests/support/graph_builder.h"
#include "tiers/call_plan.h"
#include "tiers/cpu/cpu_backend.h"
#include "tiers/session.h"
#include "tiers/tier_manager.h"

namespace terrace {
namespace {

using testing::GraphBuilder;
using testing::random_tensor;

constexpr Tier kFakeTier = Tier(3);

// Tier 1's compiler under another name, which runs no Neg, and compiles wrongly, slowly or not at
// all when told to.
class FakeTier : public Backend {
 public:
  enum class Mode { Healthy, FailsToCompile, AddsOne, Slow, Tunes };
  explicit FakeTier(Mode mode, int climb_after = 2) : mode_(mode), climb_after_(climb_after), inner_(make_cpu_backend()) {}
  Tier tier() const override { return kFakeTier; }
  int promotion_threshold(const Options&) const override { return climb_after_; }
  std::string can_compile(const Graph& g, const Node& n) const override {
    if (n.op == Op::Attention) return "";  // which tier 1 does not compile
    return n.op == Op::Neg ? "the fake tier runs no Neg" : inner_->can_compile(g, n);
  }
  std::vector<Tensor> error_allowance(const Graph& g, const Region& r, const std::vector<Tensor>& in) const override {
    return inner_->error_allowance(g, r, in);
  }
  std::unique_ptr<CompiledRegion> compile(const Graph& g, const Region& r, const std::vector<Tensor>& in) override {
    if (mode_ == Mode::FailsToCompile) fail(ErrorCode::CompileFailed, "the fake tier fails on purpose");
    if (mode_ == Mode::Tunes) {  // 30 ms timing candidates, as tier 2's cuDNN plans do
      jit::TuningTimer timer;
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
    }
    if (r.nodes.size() == 1 && g.nodes[size_t(r.nodes[0])].op == Op::Attention)
      return std::make_unique<ByInterpreter>(g.nodes[size_t(r.nodes[0])]);
    return std::make_unique<Wrapped>(inner_->compile(g, r, in), mode_);
  }

 private:
  // A region of one node run by the interpreter's kernel: the stand-in for tier 2's attention.
  struct ByInterpreter : CompiledRegion {
    explicit ByInterpreter(Node n) : node(std::move(n)) {}
    std::vector<Tensor> run(const std::vector<Tensor>& in, CallTally&) override {
      std::vector<RValue> values(in.begin(), in.end());
      std::vector<const RValue*> args;
      for (const RValue& v : values) args.push_back(&v);
      std::vector<Tensor> out;
      for (const RValue& v : interpret_node(node, args)) out.push_back(v.tensor);
      return out;
    }
    Node node;
  };
  struct Wrapped : CompiledRegion {
    Wrapped(std::unique_ptr<CompiledRegion> c, Mode m) : code(std::move(c)), mode(m) {}
    std::vector<Tensor> run(const std::vector<Tensor>& in, CallTally& tally) override {
      std::vector<Tensor> out = code->run(in, tally);
      // Right answers, 3 ms late: a tier slower than the one below (tier 1 takes microseconds).
      if (mode == Mode::Slow) std::this_thread::sleep_for(std::chrono::milliseconds(3));
      if (mode == Mode::AddsOne)
        for (Tensor& t : out)
          for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] += 1.0f;
      return out;
    }
    std::unique_ptr<CompiledRegion> code;
    Mode mode;
  };
  Mode mode_;
  int climb_after_;
  std::unique_ptr<Backend> inner_;
};

// y = tanh(x) * x + x: one region every tier runs; with `neg`, z = -y in the same region.
std::shared_ptr<Graph> model(bool neg) {
  GraphBuilder g;
  int x = g.input("x", DType::Float32, {8, 8});
  int y = g.node(Op::Add, {g.node(Op::Mul, {g.node(Op::Tanh, {x}), x}), x});
  g.output(neg ? g.node(Op::Neg, {y}) : y);
  return g.build();
}

struct Climb {
  std::vector<std::string> last_tiers;
  RegionReport region;
};

// A session whose ladder is the built-in tiers up to 1 (whatever the machine) and the fake above,
// after `calls` calls, waiting for compiles after each; every answer the interpreter's. The fake
// tier takes a region after `climb_after` calls on tier 1.
std::unique_ptr<Session> twelve_calls(const std::shared_ptr<Graph>& g, FakeTier::Mode mode, const NamedTensors& in,
                                      int calls = 12, int climb_after = 2) {
  Options o;
  o.max_tier = Tier::Cpu;
  o.cache_dir = "";
  o.hot_threshold = 1;
  o.extra_tiers.push_back([mode, climb_after] { return std::make_unique<FakeTier>(mode, climb_after); });
  auto s = Session::from_graph(g, o);
  Options interp;
  interp.max_tier = Tier::Interp;
  const NamedTensors want = Session::from_graph(g, interp)->run(in);
  for (int call = 0; call < calls; ++call) {
    const NamedTensors got = s->run(in);
    s->wait_for_compiles();
    const Comparison c = compare_tensors(want[0].second, got[0].second, Tolerance::for_dtype(DType::Float32));
    EXPECT_TRUE(c.equal) << "call " << call << ": " << c.message;
  }
  return s;
}

Climb run_with(FakeTier::Mode mode, bool neg, int calls = 12, int climb_after = 2) {
  auto s = twelve_calls(model(neg), mode, {{"x", random_tensor({8, 8}, 5)}}, calls, climb_after);
  const std::vector<RegionReport> regions = s->region_reports();
  EXPECT_EQ(regions.size(), 1u) << s->report();
  return {s->last_call().tiers, regions.at(0)};
}

bool ran(const Climb& r, const char* tier) {
  return std::find(r.last_tiers.begin(), r.last_tiers.end(), tier) != r.last_tiers.end();
}

TEST(Ladder, time_spent_tuning_and_validating_is_reported_apart_from_compiling) {
  const Climb tuned = run_with(FakeTier::Mode::Tunes, false);
  EXPECT_EQ(tuned.region.tier, kFakeTier);
  EXPECT_GE(tuned.region.tune_ms, 30.0);
  EXPECT_GE(tuned.region.compile_ms, tuned.region.tune_ms);
  EXPECT_GT(tuned.region.validate_ms, 0.0);  // each new version's first call ran beside the interpreter
  const Climb plain = run_with(FakeTier::Mode::Healthy, false);
  EXPECT_EQ(plain.region.tune_ms, 0.0);
  EXPECT_GT(plain.region.compile_ms, 0.0);
}

TEST(Ladder, a_region_climbs_from_tier1_to_a_plug_in_tier_validated) {
  const Climb r = run_with(FakeTier::Mode::Healthy, false);
  EXPECT_TRUE(ran(r, "tier3"));
  EXPECT_EQ(r.region.tier, kFakeTier);
  EXPECT_EQ(r.region.validation, "passed");
  EXPECT_EQ(r.region.climb, "");
  EXPECT_EQ(r.region.versions, 2);  // tier 1's stays below it
}

TEST(Ladder, a_plug_in_tier_that_fails_to_compile_leaves_the_region_on_tier1) {
  const Climb r = run_with(FakeTier::Mode::FailsToCompile, false);
  EXPECT_TRUE(ran(r, "cpu"));
  EXPECT_EQ(r.region.tier, Tier::Cpu);
  EXPECT_NE(r.region.climb.find("stays on tier 1: compile failed: CompileFailed: the fake tier fails on purpose"),
            std::string::npos) << r.region.climb;
}

TEST(Ladder, a_wrong_plug_in_version_is_demoted_back_to_tier1) {
  const Climb r = run_with(FakeTier::Mode::AddsOne, false);
  EXPECT_TRUE(ran(r, "cpu"));
  EXPECT_FALSE(ran(r, "tier3"));
  EXPECT_EQ(r.region.tier, Tier::Cpu);
  EXPECT_NE(r.region.climb.find("back on tier 1: the tier3 version was demoted"), std::string::npos)
      << r.region.climb;
}

// Judging a climb (tiers/climb_judge.h): the fake tier's calls, timed against tier 1's calls before
// it climbed (after 12 calls on tier 1, 3 of them warm-up) or against a probe of tier 1 (after 2:
// too few timed), are taken out of service when slower, and kept when not.
TEST(Ladder, a_plug_in_tier_slower_than_tier1_is_not_kept_and_says_why) {
  for (int climb_after : {12, 2}) {
    SCOPED_TRACE("climb after " + std::to_string(climb_after));
    const Climb r = run_with(FakeTier::Mode::Slow, false, 50, climb_after);
    EXPECT_TRUE(ran(r, "cpu"));
    EXPECT_FALSE(ran(r, "tier3"));
    EXPECT_EQ(r.region.tier, Tier::Cpu);
    EXPECT_EQ(r.region.validation, "passed");  // right answers, only slow
    EXPECT_NE(r.region.climb.find("back on tier 1: tier3 ran the calls of float32[8,8] slower than cpu: "),
              std::string::npos) << r.region.climb;
    ASSERT_EQ(r.region.version_list.size(), 2u);
    for (const RegionReport::VersionInfo& v : r.region.version_list)
      EXPECT_EQ(v.demoted, v.tier == kFakeTier) << tier_name(v.tier);
  }
}

TEST(Ladder, a_plug_in_tier_as_fast_as_tier1_is_kept_after_judging) {
  Options unused;
  ASSERT_TRUE(unused.judge_climbs);  // on by default
  for (int climb_after : {12, 2}) {
    SCOPED_TRACE("climb after " + std::to_string(climb_after));
    auto s = twelve_calls(model(false), FakeTier::Mode::Healthy, {{"x", random_tensor({8, 8}, 5)}}, 50, climb_after);
    const std::vector<RegionReport> regions = s->region_reports();
    ASSERT_EQ(regions.size(), 1u);
    EXPECT_EQ(regions[0].tier, kFakeTier) << s->report();
    EXPECT_EQ(s->last_call().tiers, std::vector<std::string>{"tier3"}) << "the probe ended";
    bool judged = false;
    for (const PlanReport& p : s->plan_reports()) judged = judged || p.judged.rfind("kept: ", 0) == 0;
    EXPECT_TRUE(judged) << s->report();
  }
}

TEST(Ladder, a_region_a_plug_in_tier_cannot_run_stays_below_and_says_why) {
  const Climb r = run_with(FakeTier::Mode::Healthy, true);
  EXPECT_TRUE(ran(r, "cpu"));
  EXPECT_EQ(r.region.tier, Tier::Cpu);
  EXPECT_NE(r.region.climb.find("stays on tier 1: "), std::string::npos) << r.region.climb;
  EXPECT_NE(r.region.climb.find("the fake tier runs no Neg"), std::string::npos) << r.region.climb;
}

// A node only a higher tier compiles (tier 2's Attention) is a region of its own, which climbs
// from the interpreter straight to that tier: tier 1 never holds it, and its neighbours still
// compile on tier 1 and climb as usual.
TEST(Ladder, a_node_only_a_plug_in_tier_compiles_climbs_to_it_from_the_interpreter) {
  GraphBuilder b;
  int q = b.input("q", DType::Float32, {1, 2, 4, 8});
  int k = b.input("k", DType::Float32, {1, 2, 6, 8});
  int v = b.input("v", DType::Float32, {1, 2, 6, 8});
  int a = b.node(Op::Attention, {b.node(Op::Relu, {q}), k, v}, {{"scale", GraphBuilder::attr_float(0.5f)}});
  b.output(b.node(Op::Tanh, {a}));
  auto g = b.build();
  g->opset = 23;
  constexpr int kClimbAfter = 5;  // calls on tier 1 before its neighbours climb
  auto s = twelve_calls(g, FakeTier::Mode::Healthy,
                        {{"q", random_tensor({1, 2, 4, 8}, 1)}, {"k", random_tensor({1, 2, 6, 8}, 2)},
                         {"v", random_tensor({1, 2, 6, 8}, 3)}},
                        12, kClimbAfter);
  const std::vector<RegionReport> regions = s->region_reports();
  ASSERT_EQ(regions.size(), 3u) << s->report();
  EXPECT_EQ(regions[1].ops, "Attention");
  // Hot after its first interpreted call (hot_threshold 1), as any region leaving the interpreter.
  EXPECT_EQ(regions[1].promoted_at_call, 0) << s->report();
  EXPECT_EQ(regions[1].tier, kFakeTier) << s->report();
  EXPECT_EQ(regions[1].versions, 1) << "no tier-1 version below it";
  EXPECT_EQ(regions[1].validation, "passed");
  for (size_t r : {size_t(0), size_t(2)}) EXPECT_EQ(regions[r].tier, kFakeTier) << s->report();
}

}  // namespace
}  // namespace terrace
