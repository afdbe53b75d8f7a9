// Tier 1's LSTM, GRU and RNN through oneDNN (jit/cpu/dnnl_rnn.h) against the interpreter: every
// direction, optional B, initial_h and initial_c, GRU's linear_before_reset, RNN's activations,
// LSTM's peepholes, any subset of the outputs, weights known at compile time or not, zero-sized and non-finite
// inputs, each within the error bound dnnl_rnn_error_bound gives; and the forms refused with
// their reason. In the DnnlOps suite, so that the ctests dnnl_ops_on_AVX2 / _SSE41 run it on
// those instruction sets too.
#include "jit/cpu/dnnl_rnn.h"

#include <cmath>
#include <limits>

#include "tests/jit/chain_builder.h"
#include "tests/support/node_runner.h"

namespace terrace::testing {
namespace {

#ifdef TERRACE_HAVE_DNNL

struct RnnCase {
  Op op;
  int64_t T, N, I, H;
  std::string direction;
  bool bias, h0, c0;
  std::map<std::string, Attr> attrs;
};

Attribute names(std::vector<std::string> v) {
  Attribute a;
  a.kind = Attribute::Kind::Strings;
  a.strings = std::move(v);
  return a;
}

int64_t gates(Op op) { return op == Op::LSTM ? 4 : op == Op::GRU ? 3 : 1; }

// The case's inputs in ONNX order (undefined where absent: sequence_lens, P, and the options off).
std::vector<Tensor> inputs_of(const RnnCase& c, uint32_t seed) {
  const int64_t D = c.direction == "bidirectional" ? 2 : 1, GH = gates(c.op) * c.H;
  std::vector<Tensor> in{random_tensor(DType::Float32, {c.T, c.N, c.I}, -1, 1, seed, false),
                         random_tensor(DType::Float32, {D, GH, c.I}, -0.6, 0.6, seed + 1, false),
                         random_tensor(DType::Float32, {D, GH, c.H}, -0.6, 0.6, seed + 2, false)};
  in.push_back(c.bias ? random_tensor(DType::Float32, {D, 2 * GH}, -0.5, 0.5, seed + 3, false) : Tensor());
  in.push_back(Tensor());  // sequence_lens
  in.push_back(c.h0 ? random_tensor(DType::Float32, {D, c.N, c.H}, -1, 1, seed + 4, false) : Tensor());
  if (c.op == Op::LSTM) in.push_back(c.c0 ? random_tensor(DType::Float32, {D, c.N, c.H}, -1, 1, seed + 5, false) : Tensor());
  while (!in.empty() && !in.back().defined()) in.pop_back();
  return in;
}

Node node_of(const RnnCase& c, const std::vector<Tensor>& in) {
  std::map<std::string, Attr> attrs = c.attrs;
  attrs.emplace("hidden_size", c.H);
  attrs.emplace("direction", c.direction.c_str());
  const size_t n_in = in.size();
  Node node = make_node(c.op, n_in, attrs);
  for (size_t i = 0; i < n_in; ++i) node.inputs[i] = in[i].defined() ? int(i) : -1;
  node.outputs = c.op == Op::LSTM ? std::vector<int>{int(n_in), int(n_in) + 1, int(n_in) + 2}
                                  : std::vector<int>{int(n_in), int(n_in) + 1};
  return node;
}

// Runs the primitive for outputs `which`; absent inputs are those undefined in `in`.
std::vector<Tensor> run_rnn(const Node& node, const std::vector<Tensor>& in, const std::vector<int>& which,
                            bool constant_weights, std::string* description = nullptr) {
  std::vector<bool> present;
  std::vector<Shape> shapes;
  std::vector<const Tensor*> constants;
  std::vector<const float*> ptrs;
  for (size_t i = 0; i < in.size(); ++i) {
    present.push_back(in[i].defined());
    if (!in[i].defined()) continue;
    shapes.push_back(in[i].shape());
    constants.push_back(constant_weights && ((i >= 1 && i <= 3) || i == 7) ? &in[i] : nullptr);
    ptrs.push_back(static_cast<const float*>(in[i].raw()));  // sequence_lens: its int32 buffer
  }
  auto prim = jit::make_dnnl_rnn(node, present, shapes, constants, which);
  if (description) *description = prim->describe();
  std::vector<Tensor> got;
  std::vector<float*> outs;
  for (const Shape& s : prim->output_shapes()) {
    got.push_back(Tensor::empty(DType::Float32, s));
    outs.push_back(got.back().data<float>());
  }
  prim->run_outputs(ptrs, outs);
  return got;
}

// got within the tolerance plus the bound of every element (NaN positions exact), and the bound
// far below the values' scale (it would excuse anything otherwise).
void expect_within(const Tensor& got, const Tensor& want, const Tensor& bound, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(bound.shape(), want.shape()) << what;
  int shown = 0;
  double largest = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double g = got.get_as_double(i), w = want.get_as_double(i), b = bound.data<double>()[i];
    largest = std::max(largest, b);
    const bool ok = std::isnan(w) ? std::isnan(g) : std::abs(g - w) <= 1e-5 + 1e-3 * std::abs(w) + b;
    if (!ok && shown++ < 5) ADD_FAILURE() << what << ": element " << i << " is " << g << ", interpreter " << w << ", bound " << b;
  }
  EXPECT_LT(largest, 1e-3) << what << ": the bound is loose enough to excuse a wrong result";
}

TEST(DnnlOps, recurrent_ops_match_the_interpreter_within_their_bound) {
  const std::vector<RnnCase> cases = {
      {Op::LSTM, 5, 3, 4, 6, "forward", true, true, true, {}},
      {Op::LSTM, 4, 2, 3, 5, "reverse", false, false, false, {}},
      {Op::LSTM, 6, 2, 7, 4, "bidirectional", true, true, false, {}},
      {Op::LSTM, 3, 1, 2, 3, "bidirectional", true, false, true, {{"activations", names({"Sigmoid", "tanh", "Tanh"})}}},
      {Op::GRU, 5, 3, 4, 6, "forward", true, true, false, {}},
      {Op::GRU, 5, 3, 4, 6, "bidirectional", true, true, false, {{"linear_before_reset", int64_t(1)}}},
      {Op::GRU, 4, 2, 3, 5, "reverse", false, false, false, {{"linear_before_reset", int64_t(1)}}},
      {Op::RNN, 5, 3, 4, 6, "forward", true, true, false, {}},
      {Op::RNN, 4, 2, 3, 5, "bidirectional", true, false, false, {}},
  };
  uint32_t seed = 100;
  for (const RnnCase& c : cases) {
    const std::vector<Tensor> in = inputs_of(c, seed += 10);
    const Node node = node_of(c, in);
    const std::vector<Tensor> want = run_node(node, in);
    const std::vector<Tensor> bound = jit::dnnl_rnn_error_bound(node, in);
    const std::string what = std::string(op_name(c.op)) + " " + c.direction + (c.attrs.count("linear_before_reset") ? " lbr" : "");
    SCOPED_TRACE(what + (c.h0 ? " initial_h" : "") + (c.c0 ? " initial_c" : ""));
    for (bool constant : {false, true}) {
      std::string description;
      std::vector<int> all = c.op == Op::LSTM ? std::vector<int>{0, 1, 2} : std::vector<int>{0, 1};
      std::vector<Tensor> got = run_rnn(node, in, all, constant, &description);
      EXPECT_NE(description.find("oneDNN"), std::string::npos) << description;
      EXPECT_EQ(description.find("no library call"), std::string::npos) << description;
      for (size_t k = 0; k < all.size(); ++k) expect_within(got[k], want[k], bound[k], what + " output " + std::to_string(k));
    }
    // Y_h alone, then Y_h before Y: outputs in the order asked.
    std::vector<Tensor> got = run_rnn(node, in, {1, 0}, false);
    expect_within(got[0], want[1], bound[1], what + " Y_h first");
    expect_within(got[1], want[0], bound[0], what + " Y second");
  }
}

// LSTM's peepholes P [D, 3H] (ONNX i, o, f; oneDNN i, f, o), with and without initial states.
TEST(DnnlOps, lstm_with_peepholes_matches_the_interpreter_within_its_bound) {
  for (const std::string direction : {"forward", "bidirectional", "reverse"}) {
    RnnCase c{Op::LSTM, 5, 2, 3, 4, direction, true, direction != "reverse", direction == "forward", {}};
    std::vector<Tensor> in = inputs_of(c, 21);
    in.resize(8);
    const int64_t D = direction == "bidirectional" ? 2 : 1;
    in[7] = random_tensor(DType::Float32, {D, 3 * c.H}, -1, 1, 22, false);
    const Node node = node_of(c, in);
    const std::vector<Tensor> want = run_node(node, in), bound = jit::dnnl_rnn_error_bound(node, in);
    for (bool constant : {false, true}) {
      std::string description;
      const std::vector<Tensor> got = run_rnn(node, in, {0, 1, 2}, constant, &description);
      EXPECT_NE(description.find("peepholes"), std::string::npos) << description;
      for (size_t k = 0; k < 3; ++k) expect_within(got[k], want[k], bound[k], "LSTM peepholes " + direction + " " + std::to_string(k));
    }
  }
}

// sequence_lens all T: oneDNN's answer; shorter ones (zeros past each end in Y, Y_h the last step
// within it): the interpreter's, exactly.
TEST(DnnlOps, recurrent_ops_with_sequence_lens_match_the_interpreter) {
  for (Op op : {Op::LSTM, Op::GRU, Op::RNN}) {
    RnnCase c{op, 5, 3, 4, 3, "bidirectional", true, true, false, {}};
    std::vector<Tensor> in = inputs_of(c, 31);
    in.resize(std::max<size_t>(in.size(), 5));
    for (const std::vector<int32_t>& lens : {std::vector<int32_t>{5, 5, 5}, std::vector<int32_t>{5, 2, 0}}) {
      in[4] = Tensor::from_vector<int32_t>({3}, lens);
      const Node node = node_of(c, in);
      const std::vector<Tensor> want = run_node(node, in), bound = jit::dnnl_rnn_error_bound(node, in);
      const std::vector<Tensor> got = run_rnn(node, in, {0, 1}, true);
      const std::string what = std::string(op_name(op)) + (lens[1] == 5 ? " full lengths" : " shorter lengths");
      expect_within(got[0], want[0], bound[0], what);
      expect_within(got[1], want[1], bound[1], what + " Y_h");
      if (lens[1] != 5) {
        EXPECT_EQ(values_of<float>(got[0]), values_of<float>(want[0])) << what << ": not the interpreter's kernel";
      }
    }
  }
}

// layout 1 (batch first): X [N, T, I], initial and final states [N, D, H], Y [N, T, D, H].
TEST(DnnlOps, batch_first_recurrent_ops_match_the_interpreter) {
  for (Op op : {Op::LSTM, Op::GRU, Op::RNN}) {
    const int64_t T = 5, N = 3, I = 4, H = 3, D = 2, GH = gates(op) * H;
    std::vector<Tensor> in{random_tensor(DType::Float32, {N, T, I}, -1, 1, 51, false),
                           random_tensor(DType::Float32, {D, GH, I}, -0.6, 0.6, 52, false),
                           random_tensor(DType::Float32, {D, GH, H}, -0.6, 0.6, 53, false),
                           random_tensor(DType::Float32, {D, 2 * GH}, -0.5, 0.5, 54, false), Tensor(),
                           random_tensor(DType::Float32, {N, D, H}, -1, 1, 55, false)};
    if (op == Op::LSTM) in.push_back(random_tensor(DType::Float32, {N, D, H}, -1, 1, 56, false));
    RnnCase c{op, T, N, I, H, "bidirectional", true, true, op == Op::LSTM, {{"layout", int64_t(1)}}};
    const Node node = node_of(c, in);
    const std::vector<Tensor> want = run_node(node, in), bound = jit::dnnl_rnn_error_bound(node, in);
    const std::vector<int> all = op == Op::LSTM ? std::vector<int>{0, 1, 2} : std::vector<int>{0, 1};
    std::string description;
    const std::vector<Tensor> got = run_rnn(node, in, all, false, &description);
    EXPECT_EQ(description.find("no library call"), std::string::npos) << description;
    for (size_t k = 0; k < all.size(); ++k)
      expect_within(got[k], want[k], bound[k], std::string(op_name(op)) + " layout 1 output " + std::to_string(k));
  }
}

// RNN's activations: Tanh (the default), Relu and Sigmoid through oneDNN's vanilla RNN.
TEST(DnnlOps, rnn_activations_match_the_interpreter) {
  for (const char* act : {"Relu", "Sigmoid", "Tanh"}) {
    RnnCase c{Op::RNN, 4, 2, 3, 5, "bidirectional", true, true, false, {{"activations", names({act, act})}}};
    const std::vector<Tensor> in = inputs_of(c, 7);
    const Node node = node_of(c, in);
    const std::vector<Tensor> want = run_node(node, in), bound = jit::dnnl_rnn_error_bound(node, in);
    const std::vector<Tensor> got = run_rnn(node, in, {0, 1}, true);
    expect_within(got[0], want[0], bound[0], std::string("RNN ") + act);
    expect_within(got[1], want[1], bound[1], std::string("RNN ") + act + " Y_h");
  }
}

TEST(DnnlOps, recurrent_ops_on_zero_sized_or_non_finite_inputs_are_the_interpreters) {
  for (int64_t T : {int64_t(0), int64_t(3)})
    for (int64_t N : {int64_t(0), int64_t(2)}) {
      if (T != 0 && N != 0) continue;
      RnnCase c{Op::LSTM, T, N, 3, 4, "forward", true, true, true, {}};
      const std::vector<Tensor> in = inputs_of(c, 3);
      const Node node = node_of(c, in);
      std::string description;
      const std::vector<Tensor> got = run_rnn(node, in, {0, 1, 2}, false, &description);
      EXPECT_NE(description.find("no library call"), std::string::npos) << description;
      const std::vector<Tensor> want = run_node(node, in);
      for (size_t k = 0; k < 3; ++k) expect_close(got[k], want[k], "zero-sized output " + std::to_string(k));
    }
  RnnCase c{Op::GRU, 4, 2, 3, 5, "forward", true, false, false, {}};
  std::vector<Tensor> in = inputs_of(c, 5);
  in[0].data<float>()[3] = std::numeric_limits<float>::quiet_NaN();
  in[0].data<float>()[8] = std::numeric_limits<float>::infinity();
  const Node node = node_of(c, in);
  const std::vector<Tensor> want = run_node(node, in), got = run_rnn(node, in, {0, 1}, true);
  expect_close(got[0], want[0], "non-finite Y");
  expect_close(got[1], want[1], "non-finite Y_h");
  for (const Tensor& b : jit::dnnl_rnn_error_bound(node, in))  // a NaN allowance would fail equal values
    for (int64_t i = 0; i < b.numel(); ++i) EXPECT_FALSE(std::isnan(b.data<double>()[i]));
}

TEST(DnnlOps, recurrent_forms_onednn_does_not_express_are_refused_with_the_reason) {
  auto reason = [](Op op, std::map<std::string, Attr> attrs, size_t n_in = 3, std::vector<int> absent = {}) {
    Node node = make_node(op, n_in, std::move(attrs));
    for (int i : absent) node.inputs[size_t(i)] = -1;
    return jit::dnnl_rnn_can_compile(node, {DType::Float32, DType::Float32, DType::Float32}, {});
  };
  EXPECT_EQ(reason(Op::LSTM, {}), "");
  EXPECT_NE(reason(Op::LSTM, {{"clip", 3.0f}}).find("without clip"), std::string::npos);
  EXPECT_EQ(reason(Op::LSTM, {{"layout", int64_t(1)}}), "") << "batch-first runs";
  EXPECT_NE(reason(Op::LSTM, {{"layout", int64_t(2)}}).find("layout 0 or 1"), std::string::npos);
  EXPECT_NE(reason(Op::LSTM, {{"input_forget", int64_t(1)}}).find("input_forget"), std::string::npos);
  {  // sequence_lens runs (int32 only): calls whose lengths are not all T take the interpreter's kernel
    Node node = make_node(Op::LSTM, 5);
    node.inputs[3] = -1;
    EXPECT_EQ(jit::dnnl_rnn_can_compile(node, {DType::Float32, DType::Float32, DType::Float32, DType::Int32}, {}), "");
    EXPECT_NE(jit::dnnl_rnn_can_compile(node, {DType::Float32, DType::Float32, DType::Float32, DType::Int64}, {})
                  .find("int32 sequence_lens"),
              std::string::npos);
  }
  EXPECT_EQ(reason(Op::LSTM, {}, 8, {3, 4, 5, 6}), "") << "peepholes run";
  EXPECT_NE(reason(Op::LSTM, {{"activations", names({"Sigmoid", "Relu", "Tanh"})}}).find("default activations"),
            std::string::npos);
  EXPECT_NE(reason(Op::GRU, {{"activation_alpha", std::vector<float>{0.5f}}}).find("activation_alpha"), std::string::npos);
  EXPECT_NE(reason(Op::RNN, {{"activations", names({"Softsign"})}}).find("Tanh, Relu or Sigmoid"),
            std::string::npos);
  EXPECT_NE(reason(Op::RNN, {{"direction", "bidirectional"}, {"activations", names({"Tanh", "Relu"})}})
                .find("same activations"),
            std::string::npos);
  EXPECT_EQ(reason(Op::RNN, {{"activations", names({"relu"})}}), "");
  EXPECT_NE(reason(Op::GRU, {{"activations", names({})}}).find("2 activations per direction, not 0"), std::string::npos);
  Node node = make_node(Op::LSTM, 3);
  EXPECT_NE(jit::dnnl_rnn_can_compile(node, {DType::Float64, DType::Float64, DType::Float64}, {}).find("float32 only"),
            std::string::npos);
  Error e = error_of([&] {
    jit::make_dnnl_rnn(make_node(Op::LSTM, 3, {{"clip", 1.0f}}), {true, true, true}, {{2, 1, 3}, {1, 16, 3}, {1, 16, 4}}, {}, {0});
  });
  EXPECT_EQ(e.code(), ErrorCode::NotImplemented);
  EXPECT_NE(std::string(e.what()).find("node_under_test"), std::string::npos) << e.what();
  e = error_of([&] {
    jit::make_dnnl_rnn(make_node(Op::LSTM, 3), {true, true, true}, {{2, 1, 3}, {1, 12, 3}, {1, 16, 4}}, {}, {0});
  });
  EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
}

#endif  // TERRACE_HAVE_DNNL

}  // namespace
}  // namespace terrace::testing
