// ThreadTuner's decisions, from call times given to it (no clock: nothing here can be flaky), and
// the session's use of it.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstdlib>
#include <cstring>

#include "tests/support/graph_builder.h"
#include "tiers/session.h"
#include "tiers/thread_tuner.h"

namespace terrace {
namespace {

using testing::GraphBuilder;
using testing::random_tensor;

// A machine on which a call takes `full_ms` on the whole team and `one_ms` on one thread.
struct Machine {
  double full_ms, one_ms;
  uint64_t epoch = 1;
  int64_t calls_on_one = 0, calls_on_full = 0;
  double ms_on_one = 0, ms_on_full = 0;

  void call(ThreadTuner& t) {
    const int team = t.team_for_call();
    const double ms = team == 1 ? one_ms : full_ms;
    (team == 1 ? calls_on_one : calls_on_full) += 1;
    (team == 1 ? ms_on_one : ms_on_full) += ms;
    t.record(team, ms, epoch);
  }
  void calls(ThreadTuner& t, int n) {
    for (int i = 0; i < n; ++i) call(t);
  }
};

ThreadTuner::Config two_threads() {
  ThreadTuner::Config c;
  c.full = 2;
  return c;
}

TEST(SessionThreads, loaded_machine_chooses_one_thread_after_the_first_probe) {
  ThreadTuner t(two_threads());
  Machine m{50, 1};
  m.calls(t, 1 + 8);  // the first call only sees the epoch; then 8 calls settle on the whole team
  EXPECT_EQ(t.team(), 2);
  EXPECT_TRUE(t.decisions().empty());
  m.calls(t, 3);
  EXPECT_EQ(m.calls_on_one, 3);
  EXPECT_EQ(t.team(), 1);
  ASSERT_EQ(t.decisions().size(), 1u);
  EXPECT_NE(t.why().find("first decision"), std::string::npos) << t.why();
  EXPECT_NE(t.why().find("chose 1"), std::string::npos) << t.why();
}

TEST(SessionThreads, quiet_machine_keeps_the_whole_team) {
  for (double one_ms : {9.0, 4.8}) {  // slower on one thread, or faster by less than the margin
    ThreadTuner t(two_threads());
    Machine m{5, one_ms};
    m.calls(t, 1 + 8 + 3);
    EXPECT_EQ(t.team(), 2) << one_ms;
    ASSERT_EQ(t.decisions().size(), 1u) << one_ms;
    EXPECT_NE(t.why().find("kept 2"), std::string::npos) << t.why();
  }
}

TEST(SessionThreads, probe_far_slower_than_the_incumbent_ends_after_one_call) {
  ThreadTuner t(two_threads());
  Machine m{50, 1};
  m.calls(t, 1 + 8 + 3);
  ASSERT_EQ(t.team(), 1);
  const int64_t before = m.calls_on_full;
  while (t.decisions().size() < 2 && m.calls_on_one < 100000) m.call(t);
  ASSERT_EQ(t.decisions().size(), 2u);
  EXPECT_EQ(m.calls_on_full - before, 1);
  EXPECT_EQ(t.team(), 1);
  EXPECT_NE(t.why().find("ended early"), std::string::npos) << t.why();
}

TEST(SessionThreads, probes_under_load_cost_at_most_their_budget) {
  ThreadTuner t(two_threads());
  Machine m{50, 1};
  m.calls(t, 1 + 8 + 3);
  ASSERT_EQ(t.team(), 1);
  const double full_before = m.ms_on_full, one_before = m.ms_on_one;
  m.calls(t, 20000);
  EXPECT_EQ(t.team(), 1);
  // One probe call's worth past the budget at most: the budget is spent after the call that earns it.
  EXPECT_LE(m.ms_on_full - full_before, 0.02 * (m.ms_on_one - one_before) + 50);
  EXPECT_GE(t.decisions().size(), 3u) << "probes stopped: a machine that went quiet would stay on one thread";
}

TEST(SessionThreads, machine_going_quiet_brings_the_whole_team_back) {
  ThreadTuner t(two_threads());
  Machine m{50, 1};
  m.calls(t, 1 + 8 + 3);
  ASSERT_EQ(t.team(), 1);
  m.full_ms = 0.5;  // the other builds ended
  for (int i = 0; i < 10000 && t.team() == 1; ++i) m.call(t);
  EXPECT_EQ(t.team(), 2);
  EXPECT_NE(t.why().find("periodic"), std::string::npos) << t.why();
}

TEST(SessionThreads, latency_drift_probes_before_the_periodic_probe) {
  ThreadTuner t(two_threads());
  Machine m{5, 9};
  m.calls(t, 1 + 8 + 3);
  ASSERT_EQ(t.team(), 2);
  m.full_ms = 50;  // load arrives
  m.calls(t, 16 + 3);  // a window of drifted calls, then the probe
  EXPECT_EQ(t.team(), 1);
  EXPECT_NE(t.why().find("drifted"), std::string::npos) << t.why();
}

TEST(SessionThreads, compiled_code_change_restarts_the_measurement) {
  ThreadTuner t(two_threads());
  Machine m{50, 1};
  m.calls(t, 1 + 7);
  m.epoch = 2;  // a promotion: the 7 times are of other code
  m.calls(t, 1 + 7);
  EXPECT_EQ(m.calls_on_one, 0) << "probed before 8 calls of the new code";
  m.calls(t, 1 + 3);
  EXPECT_EQ(m.calls_on_one, 3);
  EXPECT_EQ(t.team(), 1);
}

TEST(SessionThreads, probe_calls_finishing_after_their_probe_are_ignored) {
  ThreadTuner t(two_threads());
  Machine m{50, 1};
  m.calls(t, 1 + 8);
  // Three probe calls handed out at once (concurrent callers); the first ends the probe.
  const int a = t.team_for_call(), b = t.team_for_call(), c = t.team_for_call();
  ASSERT_EQ(a + b + c, 3);
  ASSERT_FALSE(t.record(1, 200, 1));  // far slower: the probe ends, the team is kept
  EXPECT_FALSE(t.record(1, 0.001, 1));
  EXPECT_FALSE(t.record(1, 0.001, 1));
  EXPECT_EQ(t.team(), 2);
  EXPECT_EQ(t.decisions().size(), 1u);
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

std::shared_ptr<Graph> product_model() {
  GraphBuilder b;
  int x = b.input("x", DType::Float32, {64, 256});
  int w = b.constant("w", random_tensor({256, 256}, 8));
  b.output(b.node(Op::Relu, {b.node(Op::MatMul, {x, w})}));
  return b.build();
}

// A product, a convolution (oneDNN's, built for the whole team) and elementwise kernels.
std::shared_ptr<Graph> conv_model() {
  GraphBuilder b;
  int x = b.input("x", DType::Float32, {1, 16, 32, 32});
  int w = b.constant("w", random_tensor({32, 16, 3, 3}, 10));
  int conv = b.node(Op::Conv, {x, w}, {{"pads", GraphBuilder::attr_ints({1, 1, 1, 1})}});
  int y = b.node(Op::Relu, {conv});
  int m = b.constant("m", random_tensor({32, 32}, 11));
  b.output(b.node(Op::Sigmoid, {b.node(Op::MatMul, {y, m})}));
  return b.build();
}

TEST(SessionThreads, explicit_thread_count_stays_fixed) {
  Options o;
  o.max_tier = Tier::Interp;
  o.interp_threads = 1;
  auto s = Session::from_graph(product_model(), o);
  for (int c = 0; c < 30; ++c) s->run({{"x", random_tensor({64, 256}, 9)}});
  const ThreadsReport r = s->threads_report();
  EXPECT_FALSE(r.adaptive);
  EXPECT_EQ(r.team, 1);
  for (const CallRecord& c : s->calls()) EXPECT_EQ(c.threads, 1);
}

// The session's calls run on the tuner's teams (its probes on one thread among them) with the
// answers of the whole team: tier 1's products and kernels split outputs, never a sum, between
// threads, and a primitive built for the whole team runs on one as a background validation does.
void probes_one_thread_with_the_same_answers(std::shared_ptr<Graph> model, NamedTensors in) {
  Options o;
  o.max_tier = Tier::Cpu;
  o.hot_threshold = 1;
  auto s = Session::from_graph(std::move(model), o);
  s->run(in);
  s->wait_for_compiles();
  NamedTensors first;
  bool some_on_one = false, some_on_full = false;
  for (int c = 0; c < 40; ++c) {
    NamedTensors out = s->run(in);
    const CallRecord r = s->last_call();
    if (r.tiers != std::vector<std::string>{"cpu"}) continue;
    (r.threads == 1 ? some_on_one : some_on_full) = true;
    if (first.empty()) first = out;
    else EXPECT_TRUE(same_bits(first[0].second, out[0].second)) << "call " << r.index << ", " << r.threads << " threads";
  }
  EXPECT_TRUE(s->threads_report().adaptive);
  EXPECT_TRUE(some_on_one && some_on_full) << "no probe within 40 calls";
  EXPECT_FALSE(s->threads_report().decisions.empty());
}

TEST(SessionThreads, adaptive_session_probes_one_thread_with_the_same_answers) {
  if (std::getenv("OMP_NUM_THREADS") || omp_get_max_threads() < 2) GTEST_SKIP() << "the team is fixed here";
  probes_one_thread_with_the_same_answers(product_model(), {{"x", random_tensor({64, 256}, 9)}});
  probes_one_thread_with_the_same_answers(conv_model(), {{"x", random_tensor({1, 16, 32, 32}, 12)}});
}

}  // namespace
}  // namespace terrace
