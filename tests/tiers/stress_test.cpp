// Concurrency and memory under load, as ONNX Runtime tests them: many threads on one session
// through promotions, many runs with changing shapes, many loads and unloads.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <thread>
#include <unistd.h>

#include "tests/support/graph_builder.h"
#include "tiers/session.h"

namespace terrace {
namespace {

using testing::GraphBuilder;
using testing::random_tensor;

// y = relu(x @ w + b); z = softmax(tanh(y) * y): a oneDNN region and a region of elementwise ops
// and a reduction, so calls cross tiers while versions are published.
std::shared_ptr<Graph> mixed_model(int64_t cols) {
  GraphBuilder g;
  int x = g.input("x", DType::Float32, {-1, cols});
  int w = g.constant("w", random_tensor({cols, 24}, 5));
  int b = g.constant("b", random_tensor({24}, 6));
  int y = g.node(Op::Relu, {g.node(Op::Add, {g.node(Op::MatMul, {x, w}), b})});
  int t = g.node(Op::Mul, {g.node(Op::Tanh, {y}), y});
  g.output(g.node(Op::Softmax, {t}, {{"axis", GraphBuilder::attr_int(-1)}}));
  return g.build();
}

// z = relu(x @ w): one compiled region (the MatMul with its Relu), so every call's output is
// wholly the interpreter's or wholly tier 1's.
std::shared_ptr<Graph> one_region_model() {
  GraphBuilder g;
  int x = g.input("x", DType::Float32, {-1, 16});
  int w = g.constant("w", random_tensor({16, 24}, 5));
  g.output(g.node(Op::Relu, {g.node(Op::MatMul, {x, w})}));
  return g.build();
}

Options tiered() {
  Options o;
  o.max_tier = Tier::Cpu;
  return o;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// 16 threads x 1000 runs on one session, through promotion and validation: every output is
// bitwise what a serial run gives for the same inputs on the tier that served it (the
// interpreter's answer before promotion, tier 1's after): no torn, mixed or stale result.
TEST(Stress, sixteen_threads_times_a_thousand_runs_match_serial_runs_bitwise) {
  auto g = one_region_model();
  std::vector<NamedTensors> inputs;
  for (uint64_t k = 0; k < 4; ++k) inputs.push_back({{"x", random_tensor({8, 16}, 100 + k)}});
  // Serial answers on each tier: the interpreter's, and tier 1's once every region is compiled.
  Options interp;
  interp.max_tier = Tier::Interp;
  auto serial_interp = Session::from_graph(g, interp);
  auto serial_cpu = Session::from_graph(g, tiered());
  for (int i = 0; i < 4; ++i) {
    serial_cpu->run(inputs[0]);
    serial_cpu->wait_for_compiles();
  }
  std::vector<Tensor> want_interp, want_cpu;
  for (const NamedTensors& in : inputs) {
    want_interp.push_back(serial_interp->run(in)[0].second);
    want_cpu.push_back(serial_cpu->run(in)[0].second);
  }
  ASSERT_NE(serial_cpu->report_json().find("\"tier\":\"cpu\""), std::string::npos);

  auto s = Session::from_graph(g, tiered());
  std::atomic<int> mismatches{0}, errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 1000; ++i) {
        const size_t k = size_t(t + i) % inputs.size();
        try {
          Tensor got = s->run(inputs[k])[0].second;
          if (!bitwise_equal(got, want_interp[k]) && !bitwise_equal(got, want_cpu[k])) ++mismatches;
        } catch (const std::exception&) {
          ++errors;
        }
      }
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_NE(s->report_json().find("\"tier\":\"cpu\""), std::string::npos) << "no promotion happened";
}

// Resident memory in KiB, from /proc/self/statm.
int64_t rss_kib() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * int64_t(::sysconf(_SC_PAGESIZE)) / 1024;
}

// 100,000 runs with changing shapes (past the specialization limit: deopts, new versions, then a
// stopped region) keep resident memory flat once warm. The bound (16 MiB over the warm level)
// is far below what keeping one call's tensors per run would take (100,000 x 4 KiB = 400 MiB).
// Sanitizers keep shadow memory and histories: under them RSS says nothing, and the loops run for
// LeakSanitizer (tools/sanitize.sh address) and ThreadSanitizer alone.
// (GCC defines __SANITIZE_*__; clang, which builds the ThreadSanitizer and fuzz builds, only
// answers __has_feature.)
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

TEST(Stress, a_hundred_thousand_runs_with_changing_shapes_keep_memory_flat) {
  auto s = Session::from_graph(mixed_model(16), tiered());
  std::vector<NamedTensors> inputs;
  for (int64_t rows = 1; rows <= 12; ++rows) inputs.push_back({{"x", random_tensor({rows, 16}, uint64_t(rows))}});
  for (int i = 0; i < 2000; ++i) {
    s->run(inputs[size_t(i) % inputs.size()]);
    if (i % 100 == 0) s->wait_for_compiles();
  }
  s->wait_for_compiles();
  const int64_t warm = rss_kib();
  for (int i = 0; i < 100000; ++i) s->run(inputs[size_t(i) % inputs.size()]);
  s->wait_for_compiles();
  if (!kSanitized) EXPECT_LT(rss_kib() - warm, 16 * 1024) << "warm " << warm << " KiB";
}

// 1,000 sessions loaded from the same bytes, each run until tier 1 serves it and then destroyed,
// keep resident memory flat once warm (a leaked session holds its graph, plan and compiled code).
TEST(Stress, a_thousand_load_and_unload_cycles_keep_memory_flat) {
  auto g = mixed_model(16);
  NamedTensors in = {{"x", random_tensor({4, 16}, 9)}};
  auto cycle = [&] {
    auto s = Session::from_graph(g, tiered());
    for (int i = 0; i < 3; ++i) {
      s->run(in);
      s->wait_for_compiles();
    }
  };
  for (int i = 0; i < 50; ++i) cycle();
  const int64_t warm = rss_kib();
  for (int i = 0; i < 1000; ++i) cycle();
  if (!kSanitized) EXPECT_LT(rss_kib() - warm, 16 * 1024) << "warm " << warm << " KiB";
}

}  // namespace
}  // namespace terrace
