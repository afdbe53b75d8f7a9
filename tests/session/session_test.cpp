// Session behaviour on the interpreter: input checks, thread safety, determinism.
#include <gtest/gtest.h>
#include <omp.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "tests/support/graph_builder.h"
#include "tests/support/process_threads.h"
#include "tiers/session.h"

namespace terrace {
namespace {

using testing::GraphBuilder;
using testing::process_threads;
using testing::random_tensor;

// y = softmax(x @ w, axis=-1); s = reducesum(y * x2): matmul, a reduction and elementwise ops.
std::shared_ptr<Graph> small_model() {
  GraphBuilder b;
  int x = b.input("x", DType::Float32, {-1, 64});
  int w = b.constant("w", random_tensor({64, 32}, 7));
  int mm = b.node(Op::MatMul, {x, w});
  int sm = b.node(Op::Softmax, {mm}, {{"axis", GraphBuilder::attr_int(-1)}});
  int sq = b.node(Op::Mul, {sm, sm});
  int s = b.node(Op::ReduceSum, {sq}, {{"axes", GraphBuilder::attr_ints({1})}, {"keepdims", GraphBuilder::attr_int(0)}});
  b.output(sm);
  b.output(s);
  auto g = b.build();
  g->opset = 12;  // ReduceSum takes axes as an attribute before opset 13
  return g;
}

Options interp_only() {
  Options o;
  o.max_tier = Tier::Interp;
  return o;
}

TEST(Session, runs_and_returns_outputs_in_declaration_order) {
  auto s = Session::from_graph(small_model(), interp_only());
  NamedTensors out = s->run({{"x", random_tensor({3, 64}, 1)}});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].second.shape(), (Shape{3, 32}));
  EXPECT_EQ(out[1].second.shape(), (Shape{3}));
  for (int r = 0; r < 3; ++r) {
    double sum = 0;
    for (int c = 0; c < 32; ++c) sum += out[0].second.data<float>()[r * 32 + c];
    EXPECT_NEAR(sum, 1.0, 1e-5);
  }
}

void expect_invalid_argument(Session& s, const NamedTensors& in, const std::string& mention) {
  try {
    s.run(in);
    FAIL() << "expected an error mentioning " << mention;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find(mention), std::string::npos) << e.what();
  }
}

TEST(Session, missing_input_is_an_error_naming_it) {
  auto s = Session::from_graph(small_model(), interp_only());
  expect_invalid_argument(*s, {}, "'x' is missing");
}

TEST(Session, unknown_input_name_is_an_error_naming_it) {
  auto s = Session::from_graph(small_model(), interp_only());
  expect_invalid_argument(*s, {{"x", random_tensor({1, 64}, 1)}, {"y", random_tensor({1}, 1)}}, "'y'");
}

TEST(Session, wrong_dtype_is_an_error_naming_the_input) {
  auto s = Session::from_graph(small_model(), interp_only());
  expect_invalid_argument(*s, {{"x", Tensor::zeros(DType::Float64, {1, 64})}}, "input 'x' must be float32");
}

TEST(Session, wrong_rank_is_an_error_naming_the_input) {
  auto s = Session::from_graph(small_model(), interp_only());
  expect_invalid_argument(*s, {{"x", random_tensor({64}, 1)}}, "input 'x' must have rank 2");
}

TEST(Session, wrong_static_dim_is_an_error_naming_the_input) {
  auto s = Session::from_graph(small_model(), interp_only());
  expect_invalid_argument(*s, {{"x", random_tensor({2, 63}, 1)}}, "input 'x' dim 1 must be 64");
}

TEST(Session, duplicate_input_is_an_error) {
  auto s = Session::from_graph(small_model(), interp_only());
  auto x = random_tensor({1, 64}, 1);
  expect_invalid_argument(*s, {{"x", x}, {"x", x}}, "more than once");
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

TEST(Session, interpreter_results_are_identical_for_any_thread_count) {
  auto s = Session::from_graph(small_model(), interp_only());
  NamedTensors in = {{"x", random_tensor({257, 64}, 3)}};
  omp_set_num_threads(1);
  NamedTensors one = s->run(in);
  for (int threads : {2, 3, 8}) {
    omp_set_num_threads(threads);
    NamedTensors many = s->run(in);
    for (size_t i = 0; i < one.size(); ++i)
      EXPECT_TRUE(bitwise_equal(one[i].second, many[i].second)) << threads << " threads, output " << i;
  }
}

// Options::interp_threads holds for run() alone: same bits as any other count, and the calling
// thread's own OpenMP setting is back afterwards.
TEST(Session, interp_threads_option_gives_the_same_results_and_restores_the_callers_setting) {
  NamedTensors in = {{"x", random_tensor({257, 64}, 4)}};
  omp_set_num_threads(2);
  NamedTensors want = Session::from_graph(small_model(), interp_only())->run(in);
  for (int threads : {1, 5}) {
    Options o = interp_only();
    o.interp_threads = threads;
    NamedTensors got = Session::from_graph(small_model(), o)->run(in);
    EXPECT_EQ(omp_get_max_threads(), 2) << "interp_threads " << threads << " leaked to the caller";
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_TRUE(bitwise_equal(want[i].second, got[i].second)) << threads << " threads, output " << i;
  }
}

// Tier 1 builds its parallel work for the calling thread's team (Options::interp_threads here),
// not for the compile thread's default: with one thread asked for, compiled calls start no OpenMP
// workers. (Built for the default, the product ran on a team of that size; and a team whose size
// changes from one region to the next costs libgomp a re-dock: jit/cpu/dnnl_ops.cpp's threads_for.)
TEST(Session, compiled_calls_with_one_interp_thread_start_no_openmp_workers) {
  if (omp_get_max_threads() < 2) GTEST_SKIP() << "one OpenMP thread by default: nothing to tell apart";
  GraphBuilder b;
  int x = b.input("x", DType::Float32, {256, 256});
  int w = b.constant("w", random_tensor({256, 256}, 8));
  b.output(b.node(Op::Relu, {b.node(Op::MatMul, {x, w})}));  // 16.8 M multiply-adds: a parallel product
  Options o;
  o.max_tier = Tier::Cpu;
  o.hot_threshold = 1;
  o.interp_threads = 1;
  auto s = Session::from_graph(b.build(), o);
  const size_t before = process_threads();  // the session's job threads included
  NamedTensors in = {{"x", random_tensor({256, 256}, 9)}};
  for (int c = 0; c < 6; ++c) {
    s->run(in);
    if (c == 0) s->wait_for_compiles();
  }
  const std::vector<std::string> tiers = s->last_call().tiers;
  ASSERT_EQ(tiers, std::vector<std::string>{"cpu"});
  EXPECT_EQ(process_threads(), before) << "threads started by compiled calls with interp_threads = 1";
}

TEST(Session, eight_threads_calling_run_get_the_serial_results) {
  auto s = Session::from_graph(small_model(), interp_only());
  std::vector<NamedTensors> inputs, expected;
  for (int t = 0; t < 8; ++t) {
    inputs.push_back({{"x", random_tensor({5 + t, 64}, 100 + t)}});
    expected.push_back(s->run(inputs.back()));
  }
  std::vector<int> ok(8, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      bool all = true;
      for (int rep = 0; rep < 20; ++rep) {
        NamedTensors out = s->run(inputs[size_t(t)]);
        for (size_t i = 0; i < out.size(); ++i) all = all && bitwise_equal(out[i].second, expected[size_t(t)][i].second);
      }
      ok[size_t(t)] = all;
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 8; ++t) EXPECT_TRUE(ok[size_t(t)]) << "thread " << t;
  EXPECT_EQ(s->calls().size(), 8u + 8u * 20u);
}

// x -> Loop(trip) { v = v * 1.0001 } -> y: one step that runs as long as its trip count says.
std::shared_ptr<Graph> long_loop_model() {
  GraphBuilder body;
  body.input("i", DType::Int64, {});
  int c = body.input("c", DType::Bool, {});
  int v = body.input("v", DType::Float32, {1});
  int k = body.constant("k", Tensor::from_vector<float>({1}, {1.0001f}));
  body.output(body.node(Op::Identity, {c}));
  body.output(body.node(Op::Mul, {v, k}));
  GraphBuilder b;
  int trip = b.input("trip", DType::Int64, {});
  int x = b.input("x", DType::Float32, {1});
  Attribute g;
  g.kind = Attribute::Kind::Graph;
  g.g = body.build();
  b.output(b.node(Op::Loop, {trip, -1, x}, {{"body", g}}));
  return b.build();
}

NamedTensors loop_inputs(int64_t trip) {
  return {{"trip", Tensor::scalar<int64_t>(trip)}, {"x", Tensor::from_vector<float>({1}, {1.0f})}};
}

// Terminated from another thread mid-run, a run stops inside the Loop's body within one node's
// time and throws Error(Cancelled); the session then runs normally. (The 10 s bound is a bound on
// stopping at all, with a wide margin: the loop would run for hours.)
TEST(Session, a_run_terminated_from_another_thread_stops_with_cancelled_and_the_session_stays_usable) {
  auto s = Session::from_graph(long_loop_model(), interp_only());
  RunOptions options;
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    options.terminate();
  });
  const auto t0 = std::chrono::steady_clock::now();
  try {
    s->run(loop_inputs(int64_t(1) << 40), options);
    ADD_FAILURE() << "the run was not cancelled";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Cancelled) << e.what();
  }
  killer.join();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  NamedTensors out = s->run(loop_inputs(3));
  EXPECT_FLOAT_EQ(out[0].second.data<float>()[0], 1.0001f * 1.0001f * 1.0001f);
}

// A deadline in the past cancels before the first step; a deadline that passes mid-run cancels
// the run there.
TEST(Session, a_run_past_its_deadline_stops_with_cancelled) {
  auto s = Session::from_graph(long_loop_model(), interp_only());
  RunOptions past;
  past.deadline = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  try {
    s->run(loop_inputs(1), past);
    ADD_FAILURE() << "a run past its deadline ran";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Cancelled);
    EXPECT_NE(std::string(e.what()).find("deadline"), std::string::npos) << e.what();
  }
  RunOptions soon;
  soon.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
  EXPECT_THROW(s->run(loop_inputs(int64_t(1) << 40), soon), Error);
  EXPECT_EQ(s->run(loop_inputs(1)).size(), 1u);
}

}  // namespace
}  // namespace terrace
