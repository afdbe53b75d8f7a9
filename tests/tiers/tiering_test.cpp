// Tiering end to end: promotion, guards and deopts, specialisation, validation and faults.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <set>
#include <thread>

#include "interp/compare.h"
#include "interp/interpreter.h"
#include "interp/onnx_import.h"
#include "tests/support/graph_builder.h"
#include "tests/support/session_helpers.h"
#include "tiers/session.h"
#include "tiers/tier_manager.h"

namespace terrace {
namespace {

using testing::GraphBuilder;
using testing::random_tensor;

// y = a*sigmoid(a) + b; out = tanh(y)*0.5 + y*y, with b broadcast along rows; then a CumSum,
// which tier 1 does not compile (a graph break), and a second elementwise region after it.
std::shared_ptr<Graph> chain_model() {
  GraphBuilder g;
  int a = g.input("a", DType::Float32, {-1, -1});
  int b = g.input("b", DType::Float32, {-1});
  int half = g.constant("half", Tensor::scalar<float>(0.5f));
  int y = g.node(Op::Add, {g.node(Op::Mul, {a, g.node(Op::Sigmoid, {a})}), b});
  int out = g.node(Op::Add, {g.node(Op::Mul, {g.node(Op::Tanh, {y}), half}), g.node(Op::Mul, {y, y})});
  int sm = g.node(Op::CumSum, {out, g.constant("axis", Tensor::scalar<int64_t>(1))});
  int z = g.node(Op::Relu, {g.node(Op::Sub, {sm, half})});
  g.output(out);
  g.output(z);
  return g.build();
}

NamedTensors chain_inputs(int64_t rows, int64_t cols, uint64_t seed) {
  return {{"a", random_tensor({rows, cols}, seed, -4, 4)}, {"b", random_tensor({cols}, seed + 1)}};
}

// The interpreter's answer for the same inputs: the specification.
NamedTensors reference(const std::shared_ptr<Graph>& g, const NamedTensors& in) {
  Options o;
  o.max_tier = Tier::Interp;
  return Session::from_graph(g, o)->run(in);
}

void expect_matches_reference(const NamedTensors& got, const NamedTensors& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    Comparison c = compare_tensors(want[i].second, got[i].second, Tolerance::for_dtype(want[i].second.dtype()));
    EXPECT_TRUE(c.equal) << got[i].first << ": " << c.message;
  }
}

bool ran_tier(const Session& s, const char* tier) {
  CallRecord last = s.last_call();
  for (auto& t : last.tiers)
    if (t == tier) return true;
  return false;
}

Options tiered() {
  Options o;
  o.max_tier = Tier::Cpu;
  return o;
}

// Calls run until the region compiles, waiting for the compiler between calls.
void warm_up(Session& s, const NamedTensors& in, int calls = 3) {
  for (int i = 0; i < calls; ++i) {
    s.run(in);
    s.wait_for_compiles();
  }
}

// True when some region is served on `tier` (its best version there is not demoted).
bool any_region_on(const Session& s, Tier tier) {
  for (const RegionReport& r : s.region_reports())
    if (r.tier == tier) return true;
  return false;
}

TEST(Tiering, explain_plan_has_regions_and_a_graph_break_with_its_reason) {
  auto s = Session::from_graph(chain_model(), tiered());
  ASSERT_EQ(s->plan().regions.size(), 2u);
  int breaks = 0;
  for (const Step& st : s->plan().steps)
    if (st.region < 0) {
      ++breaks;
      EXPECT_NE(st.reason.find("CumSum"), std::string::npos) << st.reason;
    }
  EXPECT_EQ(breaks, 1);
}

TEST(Tiering, region_is_promoted_after_the_hot_threshold_and_later_calls_run_on_tier1) {
  auto g = chain_model();
  auto s = Session::from_graph(g, tiered());
  NamedTensors in = chain_inputs(64, 128, 1);
  s->run(in);
  s->wait_for_compiles();
  EXPECT_FALSE(ran_tier(*s, "cpu")) << "promoted before the threshold of 2 calls";
  s->run(in);  // the second call with this signature makes it hot
  s->wait_for_compiles();
  NamedTensors out = s->run(in);
  EXPECT_TRUE(ran_tier(*s, "cpu"));
  expect_matches_reference(out, reference(g, in));
  std::string json = s->report_json();
  EXPECT_NE(json.find("\"tier\":\"cpu\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"promoted_at_call\":1"), std::string::npos) << json;
}

// GPT-2's shape: one region holds two independent chains whose shapes do not broadcast together
// (an attention bias [1,4,6] and a causal mask [4,4]). Tier 1 compiles one kernel per domain.
TEST(Tiering, a_region_of_chains_with_unrelated_shapes_compiles_one_kernel_per_shape) {
  GraphBuilder gb;
  int a = gb.input("a", DType::Float32, {1, 4, 6});
  int b = gb.input("b", DType::Float32, {6});
  int m = gb.input("m", DType::Float32, {4, 4});
  int zero = gb.constant("zero", Tensor::scalar<float>(0.0f));
  int biased = gb.node(Op::Add, {a, b});
  int mask = gb.node(Op::Not, {gb.node(Op::Greater, {m, zero}, {}, 1, DType::Bool)});
  gb.output(gb.node(Op::Relu, {biased}));
  gb.output(gb.node(Op::Cast, {mask}, {{"to", GraphBuilder::attr_int(1)}}, 1, DType::Float32));  // ONNX FLOAT
  auto g = gb.build();
  auto s = Session::from_graph(g, tiered());
  std::string breaks;
  for (const Step& step : s->plan().steps) breaks += step.reason + "; ";
  ASSERT_EQ(s->plan().regions.size(), 1u) << breaks;
  NamedTensors in = {{"a", random_tensor({1, 4, 6}, 7)}, {"b", random_tensor({6}, 8)},
                     {"m", random_tensor({4, 4}, 9)}};
  warm_up(*s, in);
  NamedTensors out = s->run(in);
  EXPECT_TRUE(ran_tier(*s, "cpu")) << s->report_json();
  expect_matches_reference(out, reference(g, in));
}

TEST(Tiering, tier1_matches_the_interpreter_with_nan_and_infinities) {
  auto g = chain_model();
  auto s = Session::from_graph(g, tiered());
  warm_up(*s, chain_inputs(33, 77, 2));
  NamedTensors in = chain_inputs(33, 77, 3);
  float* a = in[0].second.data<float>();
  a[0] = std::numeric_limits<float>::quiet_NaN();
  a[5] = std::numeric_limits<float>::infinity();
  a[9] = -std::numeric_limits<float>::infinity();
  a[100] = 88.0f;  // exp overflows inside sigmoid
  a[101] = -88.0f;
  a[200] = -0.0f;
  a[201] = std::numeric_limits<float>::denorm_min();
  a[202] = -std::numeric_limits<float>::denorm_min() * 1000;
  a[203] = std::numeric_limits<float>::min() / 2;  // subnormal
  NamedTensors out = s->run(in);
  EXPECT_TRUE(ran_tier(*s, "cpu"));
  expect_matches_reference(out, reference(g, in));
  // Subnormal results are not flushed to zero by tier 1: Neg of a subnormal is that subnormal.
  GraphBuilder gb;
  int x = gb.input("x", DType::Float32, {4});
  gb.output(gb.node(Op::Neg, {gb.node(Op::Abs, {x})}));
  auto neg = Session::from_graph(gb.build(), tiered());
  const float sub = std::numeric_limits<float>::denorm_min() * 7;
  NamedTensors tiny = {{"x", Tensor::from_vector<float>({4}, {sub, -sub, -0.0f, 0.0f})}};
  warm_up(*neg, tiny);
  Tensor y = neg->run(tiny)[0].second;
  EXPECT_TRUE(ran_tier(*neg, "cpu"));
  EXPECT_EQ(y.data<float>()[0], -sub);
  EXPECT_EQ(y.data<float>()[1], -sub);
  EXPECT_TRUE(std::signbit(y.data<float>()[2]) && std::signbit(y.data<float>()[3])) << "-|0| is -0";
}

TEST(Tiering, shape_change_deopts_and_a_new_hot_shape_gets_a_second_version) {
  auto g = chain_model();
  auto s = Session::from_graph(g, tiered());
  warm_up(*s, chain_inputs(16, 32, 4));
  NamedTensors other = chain_inputs(8, 32, 5);
  NamedTensors out = s->run(other);  // guard on dim 0 fails: this call deopts
  expect_matches_reference(out, reference(g, other));
  std::string json = s->report_json();
  EXPECT_NE(json.find("\"deopts\":1"), std::string::npos) << json;
  EXPECT_NE(json.find("input 0 dim 0: expected 16, saw 8"), std::string::npos) << json;
  s->run(other);  // second call with the new shape: hot
  s->wait_for_compiles();
  s->run(other);
  EXPECT_TRUE(ran_tier(*s, "cpu"));
  EXPECT_NE(s->report_json().find("\"version_count\":2"), std::string::npos) << s->report_json();
}

TEST(Tiering, past_the_specialization_limit_a_region_stops_compiling_and_says_why) {
  Options o = tiered();
  o.max_specializations = 2;
  auto s = Session::from_graph(chain_model(), o);
  for (int rows : {4, 5, 6}) warm_up(*s, chain_inputs(rows, 8, 6));
  std::string json = s->report_json();
  EXPECT_NE(json.find("specialization limit (2) reached"), std::string::npos) << json;
  EXPECT_NE(json.find("\"version_count\":2"), std::string::npos) << json;
}

TEST(Tiering, miscompile_is_caught_by_validation_demoted_and_the_caller_gets_the_right_answer) {
  auto dump = std::filesystem::temp_directory_path() / ("terrace-repro-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dump);
  setenv("TERRACE_FAULT", "miscompile:cpu", 1);
  setenv("TERRACE_DUMP_DIR", dump.c_str(), 1);
  auto g = chain_model();
  auto s = Session::from_graph(g, tiered());
  NamedTensors in = chain_inputs(16, 16, 7);
  warm_up(*s, in, 2);
  for (int i = 0; i < 4; ++i) expect_matches_reference(s->run(in), reference(g, in));
  unsetenv("TERRACE_FAULT");
  unsetenv("TERRACE_DUMP_DIR");
  std::string json = s->report_json();
  EXPECT_NE(json.find("\"validation\":\"failed: output"), std::string::npos) << json;
  EXPECT_FALSE(any_region_on(*s, Tier::Cpu)) << "a demoted version is still in use: " << json;
  EXPECT_FALSE(ran_tier(*s, "cpu"));
  std::set<std::string> files;
  for (auto& e : std::filesystem::recursive_directory_iterator(dump)) files.insert(e.path().filename());
  for (const char* want : {"kernel.cpp", "kernel_ir.txt", "model.onnx", "input_0.pb", "output_0.pb", "reason.txt"})
    EXPECT_TRUE(files.count(want)) << "the repro in " << dump << " lacks " << want;
  // The repro replays: its model.onnx loads and reproduces the saved interpreter outputs.
  for (auto& e : std::filesystem::recursive_directory_iterator(dump)) {
    if (e.path().filename() != "model.onnx") continue;
    Options interp;
    interp.max_tier = Tier::Interp;
    auto replay = Session::load(e.path().string(), interp);
    auto data = e.path().parent_path() / "test_data_set_0";
    NamedTensors replay_in;
    for (size_t i = 0; i < replay->graph().inputs.size(); ++i)
      replay_in.emplace_back(replay->graph().values[size_t(replay->graph().inputs[i])].name,
                             load_tensor_pb((data / ("input_" + std::to_string(i) + ".pb")).string()));
    NamedTensors got = replay->run(replay_in);
    for (size_t i = 0; i < got.size(); ++i) {
      Tensor want = load_tensor_pb((data / ("output_" + std::to_string(i) + ".pb")).string());
      EXPECT_TRUE(compare_tensors(want, got[i].second, Tolerance::for_dtype(want.dtype())).equal);
    }
  }
  std::filesystem::remove_all(dump);
}

// Continuous validation: a version that passes its first validated calls and goes wrong later
// (TERRACE_FAULT=miscompile-late:cpu: right for 3 runs, wrong after) is caught by a background
// re-check of a later call and demoted; the calls after the re-check get the interpreter's answer.
TEST(Tiering, a_later_calls_mismatch_found_by_continuous_validation_demotes_the_version) {
  setenv("TERRACE_FAULT", "miscompile-late:cpu", 1);
  auto g = chain_model();
  Options o = tiered();
  o.recheck_budget = 1.0;  // the interpreter may take as long as the compiled code: a re-check soon
  auto s = Session::from_graph(g, o);
  NamedTensors in = chain_inputs(16, 16, 9);
  const NamedTensors want = reference(g, in);
  warm_up(*s, in, 2);
  unsetenv("TERRACE_FAULT");  // read when the region compiled, in warm_up
  for (int i = 0; i < 3; ++i) expect_matches_reference(s->run(in), want);  // validated, honest
  EXPECT_NE(s->report_json().find("\"validation\":\"passed\""), std::string::npos) << s->report_json();
  std::string json = s->report_json();
  for (int i = 0; i < 1000 && any_region_on(*s, Tier::Cpu); ++i) {
    s->run(in);  // wrong, served, until re-checks have found both regions out
    s->wait_for_compiles();
    json = s->report_json();
  }
  EXPECT_NE(json.find("\"validation\":\"failed: re-check of call"), std::string::npos) << json;
  EXPECT_FALSE(any_region_on(*s, Tier::Cpu)) << "a demoted version is still in use: " << json;
  for (int i = 0; i < 3; ++i) {
    expect_matches_reference(s->run(in), want);
    EXPECT_FALSE(ran_tier(*s, "cpu"));
  }
}

// A healthy version is re-checked on some later calls, never demoted, and the re-checks show in
// the report; a budget of 0 re-checks nothing.
TEST(Tiering, continuous_validation_rechecks_healthy_calls_within_its_budget) {
  for (double budget : {1.0, 0.0}) {
    Options o = tiered();
    o.recheck_budget = budget;
    auto g = chain_model();
    auto s = Session::from_graph(g, o);
    NamedTensors in = chain_inputs(64, 64, 3);
    warm_up(*s, in, 2);
    for (int i = 0; i < 200; ++i) {
      s->run(in);
      s->wait_for_compiles();
    }
    const std::string json = s->report_json();
    EXPECT_EQ(json.find("failed"), std::string::npos) << json;
    if (budget > 0) {
      EXPECT_EQ(json.find("\"rechecks\":0"), std::string::npos) << "a region was never re-checked: " << json;
    } else {
      size_t unchecked = 0;  // regions with "rechecks":0: all of them
      for (size_t at = json.find("\"rechecks\":0,"); at != std::string::npos; at = json.find("\"rechecks\":0,", at + 1))
        ++unchecked;
      EXPECT_EQ(unchecked, s->plan().regions.size()) << json;
    }
  }
}

TEST(Tiering, compile_failure_leaves_the_region_on_the_interpreter_with_correct_results) {
  setenv("TERRACE_FAULT", "compile-fail:cpu", 1);
  auto g = chain_model();
  auto s = Session::from_graph(g, tiered());
  NamedTensors in = chain_inputs(16, 16, 8);
  warm_up(*s, in, 5);
  unsetenv("TERRACE_FAULT");
  expect_matches_reference(s->run(in), reference(g, in));
  EXPECT_FALSE(ran_tier(*s, "cpu"));
  std::string json = s->report_json();
  EXPECT_NE(json.find("compile failed"), std::string::npos) << json;
}

TEST(Tiering, calls_made_while_a_compile_is_in_flight_run_on_the_interpreter_without_waiting) {
  setenv("TERRACE_FAULT", "slow-compile:cpu", 1);  // every compile takes at least 2 s
  auto g = chain_model();
  auto s = Session::from_graph(g, tiered());
  NamedTensors in = chain_inputs(16, 16, 9);
  s->run(in);
  s->run(in);  // hot: a compile starts
  for (int i = 0; i < 3; ++i) {
    expect_matches_reference(s->run(in), reference(g, in));
    EXPECT_FALSE(ran_tier(*s, "cpu"));
  }
  // These calls returned while the compile was still running: nothing waited for it.
  EXPECT_NE(s->report_json().find("\"state\":\"compiling\""), std::string::npos) << s->report_json();
  unsetenv("TERRACE_FAULT");
  s->wait_for_compiles();
  s->run(in);
  EXPECT_TRUE(ran_tier(*s, "cpu"));
}

// A long fusible chain becomes several regions of at most Options::max_region_nodes nodes, each
// compiled and validated on its own, with the interpreter's results.
TEST(Tiering, a_long_chain_is_cut_into_regions_of_bounded_size) {
  GraphBuilder gb;
  int x = gb.input("x", DType::Float32, {4, 5});
  int y = x;
  for (int i = 0; i < 150; ++i) y = gb.node(i % 2 ? Op::Sigmoid : Op::Neg, {y});
  gb.output(y);
  auto g = gb.build();
  Options o = tiered();
  o.max_region_nodes = 64;
  auto s = Session::from_graph(g, o);
  ASSERT_EQ(s->plan().regions.size(), 3u);
  for (const Region& r : s->plan().regions) EXPECT_LE(r.nodes.size(), 64u);
  NamedTensors in = {{"x", random_tensor({4, 5}, 3)}};
  warm_up(*s, in);
  for (int i = 0; i < 4; ++i) expect_matches_reference(s->run(in), reference(g, in));
  EXPECT_EQ(s->report_json().find("\"tier\":\"interp\""), std::string::npos) << s->report_json();
}

// A session's destructor drops the compiles still queued and waits only for the one running.
// Five regions get hot at once under a 2 s compile delay: waiting for all would take 10 s. (A
// bound on waiting, with a wide margin, not a performance figure.)
TEST(Tiering, destroying_a_session_abandons_its_queued_compiles) {
  GraphBuilder gb;
  int x = gb.input("x", DType::Float32, {4, 5});
  int y = x;
  for (int i = 0; i < 10; ++i) y = gb.node(Op::Neg, {y});
  gb.output(y);
  Options o = tiered();
  o.max_region_nodes = 2;
  setenv("TERRACE_FAULT", "slow-compile:cpu", 1);
  auto s = Session::from_graph(gb.build(), o);
  ASSERT_EQ(s->plan().regions.size(), 5u);
  NamedTensors in = {{"x", random_tensor({4, 5}, 3)}};
  s->run(in);
  s->run(in);  // five compiles queued, one starts
  const auto t0 = std::chrono::steady_clock::now();
  s.reset();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  unsetenv("TERRACE_FAULT");
  EXPECT_LT(seconds, 6.0) << "the destructor waited for queued compiles";
}

// A compile abandoned by a destroyed session may still be inside LLVM when the process exits; exit
// waits for it (bounded) instead of destroying LLVM's statics under it. Here the abandoned compile
// sleeps 2 s (slow-compile) and then compiles: the child's exit takes that long. Without the wait
// it exits at once (and, when the compile is already in LLVM, crashed in 3 of 12 TSan runs).
TEST(Tiering, the_process_exit_waits_for_a_compile_its_session_abandoned) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  auto child = [] {
    GraphBuilder gb;
    int x = gb.input("x", DType::Float32, {4, 5});
    gb.output(gb.node(Op::Neg, {gb.node(Op::Tanh, {x})}));
    Options o = tiered();
    o.compile_wait_ms = 10;
    setenv("TERRACE_FAULT", "slow-compile:cpu", 1);
    auto s = Session::from_graph(gb.build(), o);
    NamedTensors in = {{"x", random_tensor({4, 5}, 3)}};
    s->run(in);
    s->run(in);  // the compile is queued
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // and has started (it sleeps 2 s)
    s.reset();   // abandoned after 10 ms
    unsetenv("TERRACE_FAULT");
    std::exit(0);
  };
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(0), "");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GT(seconds, 1.5) << "the process exited without waiting for the abandoned compile";
}

// A program that returns from main with its session alive: exit() stops the session's jobs and
// waits for the running compile before the libraries' statics are destroyed under it.
TEST(Tiering, the_process_exit_waits_for_a_compile_of_a_session_still_alive) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  auto child = [] {
    GraphBuilder gb;
    int x = gb.input("x", DType::Float32, {4, 5});
    gb.output(gb.node(Op::Neg, {gb.node(Op::Tanh, {x})}));
    setenv("TERRACE_FAULT", "slow-compile:cpu", 1);
    auto s = Session::from_graph(gb.build(), tiered());
    NamedTensors in = {{"x", random_tensor({4, 5}, 3)}};
    s->run(in);
    s->run(in);  // the compile is queued
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // and has started (it sleeps 2 s)
    s.release();  // never destroyed
    std::exit(0);
  };
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(0), "");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GT(seconds, 1.5) << "the process exited without waiting for the live session's compile";
}

// A job thread that cannot start (TERRACE_FAULT=thread-create:cpu, as std::system_error with
// EAGAIN at a thread limit): the regions stay on the interpreter with a coded reason, and the
// session keeps answering.
TEST(Tiering, a_compile_thread_that_cannot_start_leaves_the_region_on_the_interpreter) {
  setenv("TERRACE_FAULT", "thread-create:cpu", 1);
  auto g = chain_model();
  auto s = Session::from_graph(g, tiered());
  NamedTensors in = chain_inputs(16, 16, 9);
  warm_up(*s, in, 4);
  expect_matches_reference(s->run(in), reference(g, in));
  unsetenv("TERRACE_FAULT");
  EXPECT_FALSE(ran_tier(*s, "cpu"));
  const std::string json = s->report_json();
  EXPECT_NE(json.find("RuntimeError: cannot start a background thread"), std::string::npos) << json;
}

// A version validation demotes leaves no disk cache entry behind: the next process compiles anew
// instead of loading the same wrong object (a tampered entry, a compiler fault).
TEST(Tiering, a_demoted_versions_cache_entries_are_removed) {
  auto dir = std::filesystem::temp_directory_path() / ("terrace-demoted-cache-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  auto entries = [&] { return testing::cache_entries(dir); };
  GraphBuilder gb;
  int x = gb.input("x", DType::Float32, {4, 5});
  gb.output(gb.node(Op::Neg, {gb.node(Op::Tanh, {x})}));
  auto g = gb.build();
  Options o = tiered();
  o.cache_dir = dir.string();
  NamedTensors in = {{"x", random_tensor({4, 5}, 3)}};
  {
    auto healthy = Session::from_graph(g, o);
    warm_up(*healthy, in, 3);
    ASSERT_TRUE(ran_tier(*healthy, "cpu")) << healthy->report_json();
  }
  ASSERT_EQ(entries(), 1);
  setenv("TERRACE_FAULT", "miscompile:cpu", 1);
  auto s = Session::from_graph(g, o);
  warm_up(*s, in, 4);
  unsetenv("TERRACE_FAULT");
  EXPECT_NE(s->report_json().find("\"validation\":\"failed: output"), std::string::npos) << s->report_json();
  EXPECT_EQ(entries(), 0) << "the demoted version's object is still in the cache";
  std::filesystem::remove_all(dir);
}

// A compile that never comes back (TERRACE_FAULT=hang-compile:cpu) blocks no call; the session's
// destructor abandons it after Options::compile_wait_ms; and other sessions keep compiling (each
// has its own compile threads). (A bound on waiting, with a wide margin, not a performance figure.)
TEST(Tiering, a_hung_compile_blocks_no_call_and_is_abandoned_by_the_destructor) {
  auto g = chain_model();
  NamedTensors in = chain_inputs(8, 8, 5);
  Options o = tiered();
  o.compile_wait_ms = 200;
  setenv("TERRACE_FAULT", "hang-compile:cpu", 1);
  auto s = Session::from_graph(g, o);
  s->run(in);
  s->run(in);  // hot: the compile starts and hangs
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  unsetenv("TERRACE_FAULT");
  for (int i = 0; i < 3; ++i) expect_matches_reference(s->run(in), reference(g, in));
  EXPECT_NE(s->report_json().find("\"state\":\"compiling\""), std::string::npos) << s->report_json();
  const auto t0 = std::chrono::steady_clock::now();
  s.reset();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 3.0) << "the destructor waited for a hung compile";
  auto other = Session::from_graph(g, tiered());
  warm_up(*other, in);
  other->run(in);
  EXPECT_TRUE(ran_tier(*other, "cpu")) << other->report();
}

// The host out of memory while compiling (TERRACE_FAULT=oom:cpu) leaves the region on the
// interpreter, with correct answers and the reason in the report.
TEST(Tiering, out_of_memory_while_compiling_leaves_the_region_on_the_interpreter_and_says_why) {
  setenv("TERRACE_FAULT", "oom:cpu", 1);
  auto g = chain_model();
  auto s = Session::from_graph(g, tiered());
  NamedTensors in = chain_inputs(8, 8, 4);
  warm_up(*s, in);
  unsetenv("TERRACE_FAULT");
  expect_matches_reference(s->run(in), reference(g, in));
  EXPECT_FALSE(ran_tier(*s, "cpu"));
  const std::string json = s->report_json();
  EXPECT_NE(json.find("stopped: compile failed: OutOfMemory: the host ran out of memory while compiling"),
            std::string::npos) << json;
}

TEST(Tiering, eight_threads_calling_run_through_a_promotion_all_get_correct_results) {
  auto g = chain_model();
  auto s = Session::from_graph(g, tiered());
  std::vector<NamedTensors> inputs, expected;
  for (int t = 0; t < 8; ++t) {
    inputs.push_back(chain_inputs(32, 64, 200 + t));  // one signature: promotion mid-run
    expected.push_back(reference(g, inputs.back()));
  }
  std::vector<std::string> errors(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 30; ++rep) {
        NamedTensors out = s->run(inputs[size_t(t)]);
        for (size_t i = 0; i < out.size(); ++i) {
          Comparison c = compare_tensors(expected[size_t(t)][i].second, out[i].second, Tolerance::for_dtype(DType::Float32));
          if (!c.equal && errors[size_t(t)].empty()) errors[size_t(t)] = c.message;
        }
      }
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 8; ++t) EXPECT_EQ(errors[size_t(t)], "") << "thread " << t;
  s->wait_for_compiles();
  s->run(inputs[0]);
  EXPECT_TRUE(ran_tier(*s, "cpu"));
}

TEST(Tiering, validate_always_checks_every_call_and_off_checks_none) {
  for (ValidateMode mode : {ValidateMode::Always, ValidateMode::Off}) {
    Options o = tiered();
    o.validate = mode;
    auto s = Session::from_graph(chain_model(), o);
    warm_up(*s, chain_inputs(8, 8, 10));
    s->run(chain_inputs(8, 8, 11));
    std::string json = s->report_json();
    const char* want = mode == ValidateMode::Off ? "\"validation\":\"off\"" : "\"validation\":\"passed\"";
    EXPECT_NE(json.find(want), std::string::npos) << json;
  }
}

}  // namespace
}  // namespace terrace
