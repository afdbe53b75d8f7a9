// Issue 12, points 4 and 5: the Chrome trace (Options::profile_file), Options::mode,
// Options::strict, the interpreter-only setting and TERRACE_LOG's topics.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "interp/graph_builder.h"
#include "tiers/cpu/cpu_backend.h"
#include "tiers/tier_manager.h"
#include "tests/support/session_helpers.h"
#include "tiers/session.h"

namespace terrace {
namespace {
namespace fs = std::filesystem;

using testing::have_tier1;

// y = CumSum(Relu(x) + x, axis 1), x: float[batch, 8]: Relu+Add is a region of tier 1, CumSum a
// graph break.
std::shared_ptr<Graph> model_with_a_break() {
  GraphBuilder b;
  auto x = b.input("x", DType::Float32, {"batch", 8});
  auto sum = b.op("Add", {b.op("Relu", {x}), x});
  auto axis = b.constant("axis", Tensor::from_vector<int64_t>({}, {1}));
  b.output(b.op("CumSum", {sum, axis}));
  return b.build();
}

// y = Relu(x) * x: no graph break.
std::shared_ptr<Graph> model_without_a_break() {
  GraphBuilder b;
  auto x = b.input("x", DType::Float32, {"batch", 8});
  b.output(b.op("Mul", {b.op("Relu", {x}), x}));
  return b.build();
}

Tensor ones(int64_t batch) {
  Tensor t = Tensor::empty(DType::Float32, {batch, 8});
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = float(i % 5) - 2;
  return t;
}

fs::path scratch(const std::string& name) {
  return fs::temp_directory_path() / ("terrace_profile_test_" + std::to_string(::getpid()) + "_" + name);
}

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);  // throws on text that is not JSON
}

// ---- point 4: the trace ----

TEST(Profile, ten_calls_give_a_chrome_trace_with_every_kind_of_event) {
  if (!have_tier1()) GTEST_SKIP() << "no tier-1 JIT in this build";
  const fs::path file = scratch("ten_calls.json");
  Options o;
  o.max_tier = Tier::Cpu;
  o.profile_file = file.string();
  {
    auto s = Session::from_graph(model_with_a_break(), o);
    for (int c = 0; c < 10; ++c) {
      s->run({{"x", ones(2)}});
      if (c == 1) s->wait_for_compiles();  // the compile queued after call 1 is published for call 2
    }
    s->run({{"x", ones(3)}});  // another batch: the version's guards turn it away (a deopt)
  }  // written here
  nlohmann::json trace = read_json(file);
  ASSERT_TRUE(trace.contains("traceEvents")) << trace.dump().substr(0, 300);
  std::map<std::string, int> by_cat;
  std::set<int64_t> call_tids, compile_tids;
  std::set<std::string> region_tiers;
  bool thread_names = false;
  for (const auto& e : trace["traceEvents"]) {
    for (const char* k : {"ph", "ts", "pid", "tid"}) ASSERT_TRUE(e.contains(k)) << k << " missing in " << e.dump();
    const std::string ph = e["ph"];
    if (ph == "M") {
      thread_names = thread_names || e["name"] == "thread_name";
      continue;
    }
    if (ph == "X") {
      ASSERT_TRUE(e.contains("dur")) << e.dump();
      EXPECT_GE(e["dur"].get<double>(), 0);
    }
    const std::string cat = e["cat"];
    ++by_cat[cat];
    if (cat == "call") call_tids.insert(e["tid"].get<int64_t>());
    if (cat == "compile") compile_tids.insert(e["tid"].get<int64_t>());
    if (cat == "region") region_tiers.insert(e["args"]["tier"].get<std::string>());
    if (cat == "deopt") {
      EXPECT_EQ(ph, "i");
      EXPECT_NE(e["args"]["reason"].get<std::string>().find("dim"), std::string::npos) << e.dump();
    }
  }
  EXPECT_TRUE(thread_names);
  EXPECT_EQ(by_cat["call"], 11);
  EXPECT_EQ(by_cat["region"], 11);
  EXPECT_EQ(by_cat["node"], 11);  // the CumSum, in the interpreter
  EXPECT_GE(by_cat["compile"], 1);
  EXPECT_GE(by_cat["validation"], 1);
  EXPECT_GE(by_cat["deopt"], 1);
  EXPECT_EQ(region_tiers, (std::set<std::string>{"interp", "cpu"}));
  ASSERT_EQ(call_tids.size(), 1u);
  ASSERT_FALSE(compile_tids.empty());
  for (int64_t t : compile_tids) EXPECT_EQ(call_tids.count(t), 0u) << "a compile on the caller's thread";
  fs::remove(file);
}

TEST(Profile, write_profile_flushes_and_a_bad_path_fails_the_load) {
  const fs::path file = scratch("flush.json");
  Options o;
  o.max_tier = Tier::Interp;
  o.profile_file = file.string();
  {
    auto s = Session::from_graph(model_with_a_break(), o);
    s->run({{"x", ones(1)}});
    s->write_profile();
    nlohmann::json trace = read_json(file);
    int calls = 0;
    for (const auto& e : trace["traceEvents"]) calls += e.value("cat", "") == "call";
    EXPECT_EQ(calls, 1);
  }
  fs::remove(file);

  o.profile_file = "/proc/no/such/folder/trace.json";
  try {
    Session::from_graph(model_with_a_break(), o);
    FAIL() << "an unwritable profile file loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::IoError);
    EXPECT_NE(std::string(e.what()).find("/proc/no/such/folder/trace.json"), std::string::npos) << e.what();
  }
}

TEST(Profile, sessions_of_one_process_with_one_file_share_the_trace) {
  const fs::path file = scratch("shared.json");
  Options o;
  o.max_tier = Tier::Interp;
  o.profile_file = file.string();
  Session::from_graph(model_with_a_break(), o)->run({{"x", ones(1)}});
  {
    auto second = Session::from_graph(model_without_a_break(), o);
    second->run({{"x", ones(1)}});
    second->run({{"x", ones(1)}});
  }
  const nlohmann::json trace = read_json(file);
  int calls = 0;
  for (const auto& e : trace.at("traceEvents")) calls += e.value("cat", "") == "call";
  EXPECT_EQ(calls, 3) << "the first session's call is kept beside the second's two";
  fs::remove(file);
}

TEST(Profile, off_by_default_and_from_the_environment) {
  ::unsetenv("TERRACE_PROFILE");
  EXPECT_TRUE(Options::from_env().profile_file.empty());
  ::setenv("TERRACE_PROFILE", "/tmp/t.json", 1);
  EXPECT_EQ(Options::from_env().profile_file, "/tmp/t.json");
  ::unsetenv("TERRACE_PROFILE");
}

// ---- point 5: strict ----

TEST(Strict, loading_fails_listing_every_graph_break_with_its_reason) {
  Options o;
  o.strict = true;
  o.max_tier = Tier::Cpu;
  try {
    Session::from_graph(model_with_a_break(), o);
    FAIL() << "strict loaded a model with a graph break";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::NotImplemented);
    const std::string what = e.what();
    EXPECT_NE(what.find("strict: 1 graph break"), std::string::npos) << what;
    EXPECT_NE(what.find("CumSum"), std::string::npos) << what;
    EXPECT_EQ(what.find("Relu"), std::string::npos) << "Relu compiles:\n" << what;
  }
  o.strict = false;
  EXPECT_NO_THROW(Session::from_graph(model_with_a_break(), o));
  if (have_tier1()) {
    o.strict = true;
    EXPECT_NO_THROW(Session::from_graph(model_without_a_break(), o));
  }
  // Interpreter only, every node is a break: strict says so rather than run them.
  o.strict = true;
  o.max_tier = Tier::Interp;
  EXPECT_THROW(Session::from_graph(model_without_a_break(), o), Error);
}

TEST(Strict, from_the_environment) {
  ::setenv("TERRACE_STRICT", "1", 1);
  EXPECT_TRUE(Options::from_env().strict);
  ::setenv("TERRACE_STRICT", "maybe", 1);
  EXPECT_THROW(Options::from_env(), Error);
  ::unsetenv("TERRACE_STRICT");
  EXPECT_FALSE(Options::from_env().strict);
}

// ---- point 5: modes and the interpreter-only setting ----

TEST(Mode, reduce_overhead_compiles_after_the_first_call_and_validates_one) {
  Options o;
  o.mode = Mode::ReduceOverhead;
  o.max_tier = Tier::Cpu;
  auto s = Session::from_graph(model_without_a_break(), o);
  EXPECT_EQ(s->options().hot_threshold, 1);
  EXPECT_EQ(s->options().validate_calls, 1);
  EXPECT_LE(s->options().climb_threshold, 2);
  EXPECT_EQ(s->options().mode, Mode::ReduceOverhead);
  if (!have_tier1()) return;
  s->run({{"x", ones(2)}});
  s->wait_for_compiles();
  s->run({{"x", ones(2)}});
  EXPECT_EQ(s->last_call().tiers, std::vector<std::string>{"cpu"});

  // The default compiles after the second call: the second still runs in the interpreter.
  o.mode = Mode::Default;
  auto d = Session::from_graph(model_without_a_break(), o);
  d->run({{"x", ones(2)}});
  d->wait_for_compiles();
  d->run({{"x", ones(2)}});
  EXPECT_EQ(d->last_call().tiers, std::vector<std::string>{"interp"});
}

// max-autotune's difference is tier 2's (cuBLASLt's candidates timed: tests/gpu/cublaslt_test.cpp).
TEST(Mode, max_autotune_keeps_defaults_thresholds_and_the_environment_names_the_modes) {
  Options o;
  o.mode = Mode::MaxAutotune;
  Options r = o.resolved();
  EXPECT_EQ(r.hot_threshold, Options().hot_threshold);
  EXPECT_EQ(r.validate_calls, Options().validate_calls);
  ::setenv("TERRACE_MODE", "reduce-overhead", 1);
  EXPECT_EQ(Options::from_env().mode, Mode::ReduceOverhead);
  ::setenv("TERRACE_MODE", "max-autotune", 1);
  EXPECT_EQ(Options::from_env().mode, Mode::MaxAutotune);
  ::setenv("TERRACE_MODE", "fast", 1);
  try {
    Options::from_env();
    FAIL() << "TERRACE_MODE=fast accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("TERRACE_MODE"), std::string::npos) << e.what();
  }
  ::unsetenv("TERRACE_MODE");
  EXPECT_EQ(Options::from_env().mode, Mode::Default);
}

TEST(Disable, max_tier_interp_runs_everything_in_the_interpreter) {
  Options o;
  o.max_tier = Tier::Interp;
  auto s = Session::from_graph(model_without_a_break(), o);
  for (int c = 0; c < 5; ++c) s->run({{"x", ones(2)}});
  s->wait_for_compiles();
  s->run({{"x", ones(2)}});
  EXPECT_EQ(s->last_call().tiers, std::vector<std::string>{"interp"});
  for (const RegionReport& r : s->region_reports()) EXPECT_EQ(r.tier, Tier::Interp);
  ::setenv("TERRACE_MAX_TIER", "interp", 1);
  EXPECT_EQ(Options::from_env().max_tier, Tier::Interp);
  ::unsetenv("TERRACE_MAX_TIER");
}

// ---- point 5: TERRACE_LOG topics. The variable is read once per process: each case runs in a
// fresh process (a "threadsafe" death test re-executes this binary), whose stderr is matched.

void run_with_a_deopt() {
  Options o;
  o.max_tier = Tier::Cpu;
  auto s = Session::from_graph(model_with_a_break(), o);
  s->run({{"x", ones(2)}});
  s->run({{"x", ones(2)}});
  s->wait_for_compiles();
  s->run({{"x", ones(2)}});
  s->run({{"x", ones(3)}});  // deopt
  s->run({{"x", ones(3)}});  // hot: a second version, a recompile
  s->wait_for_compiles();
  std::exit(0);
}

TEST(LogTopics, each_topic_prints_its_lines_prefixed_by_its_name) {
  if (!have_tier1()) GTEST_SKIP() << "no tier-1 JIT in this build";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ::setenv("TERRACE_LOG", "graph_breaks", 1);
  EXPECT_EXIT(run_with_a_deopt(), ::testing::ExitedWithCode(0), "\\[terrace graph_breaks\\] node [0-9]+ CumSum[^\n]*: ");
  ::setenv("TERRACE_LOG", "deopts", 1);
  EXPECT_EXIT(run_with_a_deopt(), ::testing::ExitedWithCode(0),
              "\\[terrace deopts\\] region 0: deopt, guard failed: [^\n]*dim");
  ::setenv("TERRACE_LOG", "promotions", 1);
  EXPECT_EXIT(run_with_a_deopt(), ::testing::ExitedWithCode(0), "\\[terrace promotions\\] region 0 \\([^\n]*promoted to cpu");
  ::setenv("TERRACE_LOG", "recompiles", 1);
  EXPECT_EXIT(run_with_a_deopt(), ::testing::ExitedWithCode(0), "\\[terrace recompiles\\] region 0 [^\n]*recompiling for");
  ::setenv("TERRACE_LOG", "validation", 1);
  EXPECT_EXIT(run_with_a_deopt(), ::testing::ExitedWithCode(0), "\\[terrace validation\\] region 0 [^\n]*agrees with the interpreter");
  // A level and a topic together.
  ::setenv("TERRACE_LOG", "error,deopts", 1);
  EXPECT_EXIT(run_with_a_deopt(), ::testing::ExitedWithCode(0), "\\[terrace deopts\\]");
  ::setenv("TERRACE_LOG", "info,nosuch", 1);
  EXPECT_EXIT(run_with_a_deopt(), ::testing::ExitedWithCode(0), "'nosuch' is not a log level or topic");
  ::unsetenv("TERRACE_LOG");
}

}  // namespace
}  // namespace terrace
