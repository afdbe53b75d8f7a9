// LSTM, GRU and RNN on tier 1 (jit/cpu/dnnl_rnn.h) through a Session: each a library region of its
// own with the outputs read after it, promoted and validated against the interpreter within the
// recurrence's error bound, a wrong result still caught, and forms oneDNN does not express left
// as graph breaks with the reason. In the LibraryRegions suite, so that the ctests
// library_regions_on_AVX2 / _SSE41 run it on those instruction sets too.
#include <gtest/gtest.h>

#include <cstdlib>

#include "interp/compare.h"
#include "interp/graph_builder.h"
#include "tests/support/graph_builder.h"
#include "tests/support/session_helpers.h"
#include "tiers/session.h"

namespace terrace {
namespace {

using testing::random_tensor;
using testing::on_tier;
using testing::occurrences;
using testing::expect_calls_match_and_regions_validated_on_tier1;
using testing::warm_up;
using testing::report_after_a_miscompiled_call;

#ifdef TERRACE_HAVE_DNNL

// A tagger's core: x [T=7, N=2, 8] -> LSTM (bidirectional, hidden 6, B, initial states; Y and
// Y_h read, Y_c not), and beside it a GRU (linear_before_reset; Y_h read) and a reverse RNN (Y
// read), each a region of its own. `lstm_attrs` replaces the LSTM's attributes.
std::shared_ptr<Graph> recurrent_model(Attrs lstm_attrs = {{"hidden_size", 6}, {"direction", "bidirectional"}}) {
  terrace::GraphBuilder b("recurrent");
  auto x = b.input("x", DType::Float32, {7, 2, 8});
  auto w = b.constant("w", random_tensor({2, 24, 8}, 1, -0.5f, 0.5f));
  auto r = b.constant("r", random_tensor({2, 24, 6}, 2, -0.5f, 0.5f));
  auto bias = b.constant("b", random_tensor({2, 48}, 3, -0.5f, 0.5f));
  auto h0 = b.input("h0", DType::Float32, {2, 2, 6});
  auto c0 = b.input("c0", DType::Float32, {2, 2, 6});
  std::vector<std::string> lstm = b.op("LSTM", {x, w, r, bias, "", h0, c0}, lstm_attrs, 3);
  b.output(lstm[0]);
  b.output(lstm[1]);  // Y_c unused
  auto gw = b.constant("gw", random_tensor({1, 15, 8}, 4, -0.5f, 0.5f));
  auto gr = b.constant("gr", random_tensor({1, 15, 5}, 5, -0.5f, 0.5f));
  auto gb = b.constant("gb", random_tensor({1, 30}, 6, -0.5f, 0.5f));
  std::vector<std::string> gru = b.op("GRU", {x, gw, gr, gb}, {{"hidden_size", 5}, {"linear_before_reset", 1}}, 2);
  b.output(gru[1]);  // Y_h only
  auto rw = b.constant("rw", random_tensor({1, 4, 8}, 7, -0.5f, 0.5f));
  auto rr = b.constant("rr", random_tensor({1, 4, 4}, 8, -0.5f, 0.5f));
  std::vector<std::string> rnn = b.op("RNN", {x, rw, rr}, {{"hidden_size", 4}, {"direction", "reverse"}}, 2);
  b.output(rnn[0]);
  return b.build();
}

NamedTensors recurrent_inputs(uint64_t seed) {
  return {{"x", random_tensor({7, 2, 8}, seed)}, {"h0", random_tensor({2, 2, 6}, seed + 1)}, {"c0", random_tensor({2, 2, 6}, seed + 2)}};
}

TEST(LibraryRegions, lstm_gru_and_rnn_run_on_tier1_validated) {
  auto g = recurrent_model();
  auto s = Session::from_graph(g, on_tier(Tier::Cpu));
  std::vector<std::string> regions;
  for (const Region& r : s->plan().regions) regions.push_back(r.ops());
  EXPECT_EQ(regions, (std::vector<std::string>{"LSTM", "GRU", "RNN"}));
  for (const Step& step : s->plan().steps) EXPECT_GE(step.region, 0) << "a graph break: " << step.reason;
  const NamedTensors in = recurrent_inputs(10);
  const NamedTensors want = Session::from_graph(g, on_tier(Tier::Interp))->run(in);
  warm_up(*s, in);
  expect_calls_match_and_regions_validated_on_tier1(*s, in, want, 3);
}

TEST(LibraryRegions, miscompiled_lstm_is_caught_and_demoted) {
  const std::string json = report_after_a_miscompiled_call(recurrent_model(), recurrent_inputs(20));
  EXPECT_EQ(occurrences(json, "\"validation\":\"failed: output"), 3u) << json;
  EXPECT_EQ(occurrences(json, "\"tier\":\"cpu\""), 0u) << json;
}

// sequence_lens as a graph input: the LSTM runs on tier 1, through oneDNN when every length is T,
// through the interpreter's kernel (inside the same compiled version) when not; validated either way.
TEST(LibraryRegions, lstm_with_sequence_lens_and_peepholes_runs_on_tier1) {
  terrace::GraphBuilder b("lens");
  auto x = b.input("x", DType::Float32, {4, 3, 5});
  auto lens = b.input("lens", DType::Int32, {3});
  auto w = b.constant("w", random_tensor({1, 12, 5}, 1, -0.5f, 0.5f));
  auto r = b.constant("r", random_tensor({1, 12, 3}, 2, -0.5f, 0.5f));
  auto p = b.constant("p", random_tensor({1, 9}, 3, -0.5f, 0.5f));
  std::vector<std::string> y = b.op("LSTM", {x, w, r, "", lens, "", "", p}, {{"hidden_size", 3}}, 2);
  b.output(y[0]);
  b.output(y[1]);
  auto g = b.build();
  auto s = Session::from_graph(g, on_tier(Tier::Cpu));
  ASSERT_EQ(s->plan().regions.size(), 1u);
  for (const std::vector<int32_t>& l : {std::vector<int32_t>{4, 4, 4}, std::vector<int32_t>{4, 1, 3}}) {
    const NamedTensors in = {{"x", random_tensor({4, 3, 5}, 40)}, {"lens", Tensor::from_vector<int32_t>({3}, l)}};
    warm_up(*s, in);
    const NamedTensors want = Session::from_graph(g, on_tier(Tier::Interp))->run(in);
    for (int call = 0; call < 3; ++call) {
      const NamedTensors got = s->run(in);
      for (size_t k = 0; k < want.size(); ++k) {
        Comparison c = compare_tensors(want[k].second, got[k].second, Tolerance::for_dtype(DType::Float32));
        EXPECT_TRUE(c.equal) << want[k].first << ": " << c.message;
      }
    }
  }
  const std::string json = s->report_json();
  EXPECT_EQ(occurrences(json, "\"tier\":\"cpu\""), 1u) << json;
  EXPECT_EQ(occurrences(json, "\"validation\":\"passed\""), 1u) << json;
}

// (1e8 + 1) - 1e8 in an RNN's gate sum: 0 or 2 in float32, 1 in double. The recurrence's bound
// (gamma_K times the sum of |terms|) covers it: the region validates (without it, demoted).
TEST(LibraryRegions, cancelling_rnn_gate_passes_validation_within_its_bound) {
  terrace::GraphBuilder b("cancel");
  auto x = b.input("x", DType::Float32, {2, 1, 3});
  auto w = b.constant("w", Tensor::from_vector<float>({1, 1, 3}, {1, 1, 1}));
  auto r = b.constant("r", Tensor::from_vector<float>({1, 1, 1}, {0.5f}));
  std::vector<std::string> y = b.op("RNN", {x, w, r}, {{"hidden_size", 1}, {"activations", std::vector<std::string>{"Relu"}}}, 2);
  b.output(y[0]);
  auto g = b.build();
  auto s = Session::from_graph(g, on_tier(Tier::Cpu));
  const NamedTensors in = {{"x", Tensor::from_vector<float>({2, 1, 3}, {1e8f, 1.0f, -1e8f, 0.5f, 0.25f, 2.0f})}};
  warm_up(*s, in);
  for (int call = 0; call < 3; ++call) s->run(in);
  const std::string json = s->report_json();
  EXPECT_EQ(occurrences(json, "\"tier\":\"cpu\""), 1u) << json;
  EXPECT_EQ(occurrences(json, "\"validation\":\"passed\""), 1u) << json;
}

// A form oneDNN does not express stays in the interpreter, and the plan says why.
TEST(LibraryRegions, refused_lstm_is_a_graph_break_naming_the_reason) {
  auto g = recurrent_model({{"hidden_size", 6}, {"direction", "bidirectional"}, {"clip", 2.0f}});
  auto s = Session::from_graph(g, on_tier(Tier::Cpu));
  std::vector<std::string> breaks;
  for (const Step& step : s->plan().steps)
    if (step.region < 0) breaks.push_back(std::string(op_name(g->nodes[size_t(step.node)].op)) + ": " + step.reason);
  ASSERT_EQ(breaks.size(), 1u) << ::testing::PrintToString(breaks);
  EXPECT_EQ(breaks[0], "LSTM: tier 1 runs LSTM without clip (oneDNN's cells do not clip)");
  const NamedTensors in = recurrent_inputs(30);
  warm_up(*s, in);
  const NamedTensors got = s->run(in), want = Session::from_graph(g, on_tier(Tier::Interp))->run(in);
  for (size_t k = 0; k < want.size(); ++k)
    EXPECT_TRUE(compare_tensors(want[k].second, got[k].second, Tolerance::for_dtype(DType::Float32)).equal);
}

#endif  // TERRACE_HAVE_DNNL

}  // namespace
}  // namespace terrace
