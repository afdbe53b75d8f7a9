// LSTM, GRU and RNN as oneDNN recurrent primitives (jit/cpu/dnnl_rnn.h).
//
// ONNX (interp/ops/nn_rnn.cpp) and oneDNN compute the same cells with the default activations;
// they differ in layout only: ONNX's W [D, G*H, I] and R [D, G*H, H] hold gate rows, oneDNN's
// weights are ldigo [1, D, I|H, G, H]; ONNX's gates are LSTM i, o, f, c and GRU z, r, h, oneDNN's
// i, f, c, o and u, r, o; ONNX's B is [D, 2*G*H] (Wb then Rb), oneDNN's bias [1, D, G, H] their
// sum, with a fourth gate, Rb of h, for linear_before_reset (lbr_gru). Y [T, D, N, H] is oneDNN's
// dst_layer [T, N, D*H] transposed when D = 2; Y_h and Y_c are dst_iter [1, D, N, H] as they are.
#include "jit/cpu/dnnl_rnn.h"

#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <unordered_map>

#include "interp/error.h"
#include "interp/interpreter.h"
#include "interp/omp_threads.h"
#include "jit/cpu/dnnl_common.h"

namespace terrace::jit {
namespace {

using dnnl::memory;
using Dims = memory::dims;
using Tag = memory::format_tag;

enum class Cell { Rnn, Gru, Lstm };

Cell cell_of(Op op) { return op == Op::LSTM ? Cell::Lstm : op == Op::GRU ? Cell::Gru : Cell::Rnn; }
int64_t gate_count(Cell c) { return c == Cell::Lstm ? 4 : c == Cell::Gru ? 3 : 1; }
const char* cell_name(Cell c) { return c == Cell::Lstm ? "LSTM" : c == Cell::Gru ? "GRU" : "RNN"; }

// oneDNN's gate g is ONNX's gate onnx_gate(g).
int64_t onnx_gate(Cell c, int64_t g) {
  static const int64_t lstm[] = {0, 2, 3, 1};  // oneDNN i, f, c, o <- ONNX i, o, f, c
  return c == Cell::Lstm ? lstm[g] : g;
}

std::string lower(std::string s) {
  for (char& ch : s) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

bool given(const Node& node, size_t i) { return node.inputs.size() > i && node.inputs[i] >= 0; }

// "" when oneDNN expresses the node's attributes; `rnn_activation`: the RNN's activation.
std::string refusal(const Node& node, std::string* rnn_activation = nullptr) {
  const Cell cell = cell_of(node.op);
  const std::string what = std::string("tier 1 runs ") + cell_name(cell);
  const int64_t layout = node.attr_int("layout", 0);
  if (layout != 0 && layout != 1) return what + " with layout 0 or 1, not " + std::to_string(layout);
  if (node.has_attr("clip")) return what + " without clip (oneDNN's cells do not clip)";
  if (cell == Cell::Lstm && node.attr_int("input_forget", 0) != 0) return what + " without input_forget";
  const std::string direction = node.attr_string("direction", "forward");
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional")
    return what + " with directions forward, reverse and bidirectional, not '" + direction + "'";
  if (!node.attr_floats("activation_alpha").empty() || !node.attr_floats("activation_beta").empty())
    return what + " without activation_alpha and activation_beta";
  static const std::vector<std::string> defaults[] = {{"tanh"}, {"sigmoid", "tanh"}, {"sigmoid", "tanh", "tanh"}};
  const std::vector<std::string>& want = defaults[int(cell)];
  std::vector<std::string> names;
  for (const std::string& n : node.attr_strings("activations", {})) names.push_back(lower(n));
  const size_t per = want.size();
  if (!node.has_attr("activations")) names = want;
  if (names.size() != per && names.size() != 2 * per)
    return what + " with " + std::to_string(per) + " activations per direction, not " + std::to_string(names.size());
  if (names.size() == 2 * per) {  // bidirectional: both directions alike
    if (!std::equal(names.begin(), names.begin() + long(per), names.begin() + long(per)))
      return what + " with the same activations in both directions";
    names.resize(per);
  }
  if (cell == Cell::Rnn) {
    if (names.size() != 1 || (names[0] != "tanh" && names[0] != "relu" && names[0] != "sigmoid"))
      return what + " with activation Tanh, Relu or Sigmoid (oneDNN's vanilla RNN)";
    if (rnn_activation) *rnn_activation = names[0];
    return "";
  }
  if (names != want)
    return what + " with its default activations only (" + (cell == Cell::Lstm ? "Sigmoid, Tanh, Tanh" : "Sigmoid, Tanh") + ")";
  return "";
}

class Recurrent : public DnnlPrimitive {
 public:
  Recurrent(const Node& node, const std::vector<bool>& present, const std::vector<Shape>& shapes,
            const std::vector<const Tensor*>& constants, const std::vector<int>& outputs)
      : node_(node), cell_(cell_of(node.op)), outputs_(outputs) {
    std::string rnn_act;
    if (std::string why = refusal(node, &rnn_act); !why.empty()) fail(ErrorCode::NotImplemented, node.describe(), ": ", why);
    take_inputs(present, shapes, constants);
    const std::string direction = node.attr_string("direction", "forward");
    read_sizes(node, direction);
    description_ = std::string("oneDNN ") + (cell_ == Cell::Lstm ? "lstm_forward" : cell_ == Cell::Gru ? (lbr_ ? "lbr_gru_forward" : "gru_forward") : "vanilla_rnn_forward (" + rnn_act + ")") +
                   " (" + node.describe() + "): X " + shape_str(shapes_[0]) + ", hidden " + std::to_string(H_) + ", " + direction;
    if (T_ == 0 || N_ == 0 || I_ == 0) {
      reference_only_ = true;
      description_ += "; a zero-sized tensor, run by the interpreter's kernel, no library call";
      return;
    }
    set_descs();
    threads_ = threads_for(double(T_ * N_ * D_) * double(G_ * H_) * double(I_ + H_));
    build_primitive(node, rnn_act);
    pack_constants();
    description_ += std::string(present_[7] ? "; peepholes" : "") +
                    (constant_[1] && constant_[2] ? "; constant weights laid out once" : "") + "; " +
                    std::to_string(threads_) + " OpenMP threads";
  }

  const Shape& output_shape() const override { return out_shapes_.front(); }
  size_t num_outputs() const override { return out_shapes_.size(); }
  std::vector<Shape> output_shapes() const override { return out_shapes_; }
  void run(const std::vector<const float*>& in, float* out) const override { run_outputs(in, {out}); }

  void run_outputs(const std::vector<const float*>& given_in, const std::vector<float*>& out) const override {
    const std::array<const float*, 8> in = by_index(given_in, out.size());
    if (reference_only_ || !library_runs(in)) return run_reference(in, out);
    float* wanted[3] = {nullptr, nullptr, nullptr};
    for (size_t j = 0; j < outputs_.size(); ++j) wanted[outputs_[j]] = out[j];
    const Weights p = weights_of(in);
    const Sources src = sources_of(in);
    const size_t state = size_t(D_ * N_ * H_);
    float* y = D_ == 1 && wanted[0] && !batch_first_ ? wanted[0] : thread_buffer(4, size_t(T_ * N_ * D_ * H_) * sizeof(float));
    float* yh = wanted[1] && !batch_first_ ? wanted[1] : thread_buffer(5, state * sizeof(float));
    float* yc = cell_ == Cell::Lstm ? (wanted[2] && !batch_first_ ? wanted[2] : thread_buffer(6, state * sizeof(float))) : nullptr;
    float* scratch = thread_buffer(0, scratch_.get_size() + sizeof(float));
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC_LAYER, wrap(src_layer_, src.x)},
                                         {DNNL_ARG_WEIGHTS_LAYER, wrap(w_layer_, p.w)},
                                         {DNNL_ARG_WEIGHTS_ITER, wrap(w_iter_, p.r)},
                                         {DNNL_ARG_BIAS, wrap(bias_, p.b)},
                                         {DNNL_ARG_DST_LAYER, wrap(dst_layer_, y)},
                                         {DNNL_ARG_DST_ITER, wrap(dst_iter_, yh)}};
    auto zeros = [&]() -> const float* {
      float* z = thread_buffer(7, state * sizeof(float));
      std::fill(z, z + state, 0.0f);
      return z;
    };
    if (initial_) args.emplace(DNNL_ARG_SRC_ITER, wrap(src_iter_, src.init_h ? src.init_h : zeros()));
    if (cell_ == Cell::Lstm) {
      if (initial_) args.emplace(DNNL_ARG_SRC_ITER_C, wrap(src_iter_c_, src.init_c ? src.init_c : zeros()));
      args.emplace(DNNL_ARG_DST_ITER_C, wrap(dst_iter_c_, yc));
    }
    if (p.peep) args.emplace(DNNL_ARG_WEIGHTS_PEEPHOLE, wrap(peephole_, p.peep));
    if (scratch_.get_size() > 0) args.emplace(DNNL_ARG_SCRATCHPAD, memory(scratch_, cpu_engine(), scratch));
    execute_primitive(args);
    if (wanted[0] && y != wanted[0])  // [T, N, D*H] -> Y [T, D, N, H], or [N, T, D, H] for layout 1
      for (int64_t t = 0; t < T_; ++t)
        for (int64_t n = 0; n < N_; ++n)
          for (int64_t d = 0; d < D_; ++d)
            std::memcpy(wanted[0] + (batch_first_ ? ((n * T_ + t) * D_ + d) * H_ : ((t * D_ + d) * N_ + n) * H_),
                        y + (t * N_ + n) * D_ * H_ + d * H_, size_t(H_) * sizeof(float));
    if (batch_first_ && wanted[1]) swap_state(yh, wanted[1], false);
    if (batch_first_ && cell_ == Cell::Lstm && wanted[2]) swap_state(yc, wanted[2], false);
  }

 private:
  // The given inputs per ONNX input index (nullptr where absent).
  std::array<const float*, 8> by_index(const std::vector<const float*>& given_in, size_t outputs) const {
    std::array<const float*, 8> in{};
    size_t k = 0;
    for (size_t i = 0; i < 8; ++i)
      if (present_[i]) in[i] = given_in.at(k++);
    TERRACE_CHECK(k == given_in.size() && outputs == outputs_.size(), Internal, node_.describe(),
                  ": a recurrent primitive got ", given_in.size(), " inputs and ", outputs, " outputs");
    return in;
  }

  // Whether oneDNN runs this call: every input read on each call finite, and every sequence T long.
  bool library_runs(const std::array<const float*, 8>& in) const {
    bool finite = true;
    for (size_t i = 0; i < 8 && finite; ++i)
      if (present_[i] && !constant_[i] && i != 4) finite = all_finite(in[i], size_t(shape_numel(shapes_[i])), 1);
    // sequence_lens (int32): oneDNN runs every sequence to T; other lengths run the interpreter's kernel.
    bool full = true;
    if (present_[4])
      for (int64_t n = 0; n < N_ && full; ++n) full = reinterpret_cast<const int32_t*>(in[4])[n] == T_;
    return finite && full;
  }

  // W, R, B and P in oneDNN's layouts: the constants', else this call's, packed into thread buffers.
  struct Weights {
    const float *w, *r, *b, *peep;
  };
  Weights weights_of(const std::array<const float*, 8>& in) const {
    Weights p{packed_w_.empty() ? nullptr : packed_w_.data(), packed_r_.empty() ? nullptr : packed_r_.data(),
              packed_b_.empty() ? nullptr : packed_b_.data(), packed_p_.empty() ? nullptr : packed_p_.data()};
    if (!p.w) {
      float* buf = thread_buffer(1, size_t(D_ * I_ * G_ * H_) * sizeof(float));
      pack_weights(in[1], I_, buf);
      p.w = buf;
    }
    if (!p.r) {
      float* buf = thread_buffer(2, size_t(D_ * H_ * G_ * H_) * sizeof(float));
      pack_weights(in[2], H_, buf);
      p.r = buf;
    }
    if (!p.b) {
      float* buf = thread_buffer(3, size_t(D_ * bias_gates() * H_) * sizeof(float));
      pack_bias(in[3], buf);
      p.b = buf;
    }
    if (present_[7] && !p.peep) {
      float* buf = thread_buffer(8, size_t(D_ * 3 * H_) * sizeof(float));
      pack_peephole(in[7], buf);
      p.peep = buf;
    }
    return p;
  }

  // X and the initial states (nullptr where absent) in oneDNN's time-major order: for layout 1
  // (batch first) transposed into thread buffers here, the results transposed back after.
  struct Sources {
    const float *x, *init_h, *init_c;
  };
  Sources sources_of(const std::array<const float*, 8>& in) const {
    Sources s{in[0], present_[5] ? in[5] : nullptr, present_[6] ? in[6] : nullptr};
    if (!batch_first_) return s;
    const size_t state = size_t(D_ * N_ * H_);
    float* xt = thread_buffer(9, size_t(T_ * N_ * I_) * sizeof(float));
    for (int64_t n = 0; n < N_; ++n)
      for (int64_t t = 0; t < T_; ++t) std::memcpy(xt + (t * N_ + n) * I_, s.x + (n * T_ + t) * I_, size_t(I_) * sizeof(float));
    s.x = xt;
    if (s.init_h) s.init_h = swap_state(s.init_h, thread_buffer(10, state * sizeof(float)), true);
    if (s.init_c) s.init_c = swap_state(s.init_c, thread_buffer(11, state * sizeof(float)), true);
    return s;
  }

  void execute_primitive(const std::unordered_map<int, memory>& args) const {
    thread_local dnnl::stream stream(cpu_engine());
    ScopedOmpThreads scope(threads_to_run(threads_));
    try {
      prim_.execute(stream, args);
      stream.wait();
    } catch (const dnnl::error& e) {
      fail(ErrorCode::RuntimeError, node_.describe(), ": oneDNN could not run a recurrent primitive: ", e.what());
    }
  }
  // Shapes and constants per ONNX input index.
  void take_inputs(const std::vector<bool>& present, const std::vector<Shape>& shapes,
                   const std::vector<const Tensor*>& constants) {
    size_t k = 0;
    for (size_t i = 0; i < present.size() && i < 8; ++i) {
      present_[i] = present[i];
      if (!present[i]) continue;
      TERRACE_CHECK(k < shapes.size(), Internal, node_.describe(), ": fewer input shapes than inputs");
      shapes_[i] = shapes[k];
      constant_[i] = k < constants.size() ? constants[k] : nullptr;
      ++k;
    }
  }

  // T, N, I, H, D, G from X, R and the attributes; every input's and output's shape checked.
  void read_sizes(const Node& node, const std::string& direction) {
    TERRACE_CHECK(present_[0] && present_[1] && present_[2], InvalidArgument, node.describe(), ": X, W and R are required");
    const Shape &x = shapes_[0], &w = shapes_[1], &r = shapes_[2];
    TERRACE_CHECK(x.size() == 3 && w.size() == 3 && r.size() == 3, InvalidArgument, node.describe(),
                  ": X, W and R must have rank 3, got ", shape_str(x), ", ", shape_str(w), ", ", shape_str(r));
    D_ = direction == "bidirectional" ? 2 : 1;
    reverse_ = direction == "reverse";
    batch_first_ = node.attr_int("layout", 0) == 1;  // X [N, T, I], Y [N, T, D, H], states [N, D, H]
    T_ = x[batch_first_ ? 1 : 0];
    N_ = x[batch_first_ ? 0 : 1];
    I_ = x[2];
    H_ = node.attr_int("hidden_size", r[2]);
    G_ = gate_count(cell_);
    lbr_ = cell_ == Cell::Gru && node.attr_int("linear_before_reset", 0) != 0;
    TERRACE_CHECK(H_ > 0 && w == (Shape{D_, G_ * H_, I_}) && r == (Shape{D_, G_ * H_, H_}), InvalidArgument,
                  node.describe(), ": W ", shape_str(w), " and R ", shape_str(r), " do not fit X ", shape_str(x),
                  ", hidden_size ", H_, " and ", D_, " direction(s)");
    const Shape state = batch_first_ ? Shape{N_, D_, H_} : Shape{D_, N_, H_};
    if (present_[3])
      TERRACE_CHECK(shapes_[3] == (Shape{D_, 2 * G_ * H_}), InvalidArgument, node.describe(), ": B ", shape_str(shapes_[3]),
                    ", expected ", shape_str(Shape{D_, 2 * G_ * H_}));
    if (present_[4])
      TERRACE_CHECK(shapes_[4] == Shape{N_}, InvalidArgument, node.describe(), ": sequence_lens ", shape_str(shapes_[4]),
                    ", expected [", N_, "]");
    if (present_[7])
      TERRACE_CHECK(cell_ == Cell::Lstm && shapes_[7] == (Shape{D_, 3 * H_}), InvalidArgument, node.describe(), ": P ",
                    shape_str(shapes_[7]), ", expected ", shape_str(Shape{D_, 3 * H_}));
    for (size_t i : {size_t(5), size_t(6)})
      if (present_[i])
        TERRACE_CHECK(shapes_[i] == state, InvalidArgument, node.describe(), ": input ", i, " ", shape_str(shapes_[i]),
                      ", expected ", shape_str(state));
    for (int o : outputs_) {
      TERRACE_CHECK(o >= 0 && o <= (cell_ == Cell::Lstm ? 2 : 1), Internal, node.describe(), ": no output ", o);
      out_shapes_.push_back(o == 0 ? (batch_first_ ? Shape{N_, T_, D_, H_} : Shape{T_, D_, N_, H_}) : state);
    }
  }

  void set_descs() {
    auto desc = [](const Dims& d, Tag t) { return memory::desc(d, memory::data_type::f32, t); };
    src_layer_ = desc({T_, N_, I_}, Tag::tnc);
    // oneDNN's LSTM takes both initial states or neither: one given, the other is zeros.
    initial_ = present_[5] || (cell_ == Cell::Lstm && present_[6]);
    if (initial_) src_iter_ = desc({1, D_, N_, H_}, Tag::ldnc);
    if (cell_ == Cell::Lstm && initial_) src_iter_c_ = desc({1, D_, N_, H_}, Tag::ldnc);
    w_layer_ = desc({1, D_, I_, G_, H_}, Tag::ldigo);
    w_iter_ = desc({1, D_, H_, G_, H_}, Tag::ldigo);
    bias_ = desc({1, D_, bias_gates(), H_}, Tag::ldgo);
    dst_layer_ = desc({T_, N_, D_ * H_}, Tag::tnc);
    dst_iter_ = desc({1, D_, N_, H_}, Tag::ldnc);
    if (cell_ == Cell::Lstm) dst_iter_c_ = desc({1, D_, N_, H_}, Tag::ldnc);
    if (present_[7]) peephole_ = desc({1, D_, 3, H_}, Tag::ldgo);
  }

  // oneDNN's bias gates: linear_before_reset's h has a fourth, its Rb.
  int64_t bias_gates() const { return G_ + (lbr_ ? 1 : 0); }

  // The cell's oneDNN primitive into prim_ and scratch_; its implementation into the description.
  void build_primitive(const Node& node, const std::string& rnn_act) {
    const dnnl::rnn_direction dir = D_ == 2 ? dnnl::rnn_direction::bidirectional_concat
                                    : reverse_ ? dnnl::rnn_direction::unidirectional_right2left
                                               : dnnl::rnn_direction::unidirectional_left2right;
    const auto prop = dnnl::prop_kind::forward_inference;
    ScopedOmpThreads scope(threads_);
    auto take = [&](const auto& pd) {
      scratch_ = pd.scratchpad_desc();
      description_ += std::string("; ") + pd.impl_info_str();
    };
    try {
      dnnl::primitive_attr attr = user_scratchpad();
      if (cell_ == Cell::Lstm) {
        dnnl::lstm_forward::primitive_desc pd(
            present_[7] ? dnnl::lstm_forward::desc(prop, dir, src_layer_, src_iter_, src_iter_c_, w_layer_, w_iter_, peephole_,
                                                   bias_, dst_layer_, dst_iter_, dst_iter_c_)
                        : dnnl::lstm_forward::desc(prop, dir, src_layer_, src_iter_, src_iter_c_, w_layer_, w_iter_, bias_,
                                                   dst_layer_, dst_iter_, dst_iter_c_),
            attr, cpu_engine());
        prim_ = dnnl::lstm_forward(pd);
        take(pd);
      } else if (cell_ == Cell::Gru && lbr_) {
        dnnl::lbr_gru_forward::primitive_desc pd(
            dnnl::lbr_gru_forward::desc(prop, dir, src_layer_, src_iter_, w_layer_, w_iter_, bias_, dst_layer_, dst_iter_),
            attr, cpu_engine());
        prim_ = dnnl::lbr_gru_forward(pd);
        take(pd);
      } else if (cell_ == Cell::Gru) {
        dnnl::gru_forward::primitive_desc pd(
            dnnl::gru_forward::desc(prop, dir, src_layer_, src_iter_, w_layer_, w_iter_, bias_, dst_layer_, dst_iter_), attr,
            cpu_engine());
        prim_ = dnnl::gru_forward(pd);
        take(pd);
      } else {
        const dnnl::algorithm alg = rnn_act == "relu"      ? dnnl::algorithm::eltwise_relu
                                    : rnn_act == "sigmoid" ? dnnl::algorithm::eltwise_logistic
                                                           : dnnl::algorithm::eltwise_tanh;
        dnnl::vanilla_rnn_forward::primitive_desc pd(
            dnnl::vanilla_rnn_forward::desc(prop, alg, dir, src_layer_, src_iter_, w_layer_, w_iter_, bias_, dst_layer_,
                                            dst_iter_),
            attr, cpu_engine());
        prim_ = dnnl::vanilla_rnn_forward(pd);
        take(pd);
      }
    } catch (const dnnl::error& e) {
      fail(ErrorCode::CompileFailed, node.describe(), ": oneDNN builds no recurrent primitive: ", e.what());
    }
  }

  // Constant weights and biases in oneDNN's layout once; a non-finite constant sends every call
  // to the interpreter's kernel.
  void pack_constants() {
    for (size_t i : {size_t(1), size_t(2), size_t(3), size_t(7)})
      if (constant_[i] && !all_finite(constant_[i]->data<float>(), size_t(constant_[i]->numel()), 1)) reference_only_ = true;
    if (constant_[1]) pack_weights(constant_[1]->data<float>(), I_, packed_w_ = std::vector<float>(size_t(D_ * I_ * G_ * H_)));
    if (constant_[2]) pack_weights(constant_[2]->data<float>(), H_, packed_r_ = std::vector<float>(size_t(D_ * H_ * G_ * H_)));
    if (!present_[3] || constant_[3])
      pack_bias(present_[3] ? constant_[3]->data<float>() : nullptr,
                packed_b_ = std::vector<float>(size_t(D_ * bias_gates() * H_)));
    if (constant_[7]) pack_peephole(constant_[7]->data<float>(), packed_p_ = std::vector<float>(size_t(D_ * 3 * H_)));
  }
  // A state between layout 1's [N, D, H] and oneDNN's [D, N, H] (`to_onednn`: that way); returns dst.
  float* swap_state(const float* src, float* dst, bool to_onednn) const {
    for (int64_t n = 0; n < N_; ++n)
      for (int64_t d = 0; d < D_; ++d) {
        const int64_t nd = (n * D_ + d) * H_, dn = (d * N_ + n) * H_;
        std::memcpy(dst + (to_onednn ? dn : nd), src + (to_onednn ? nd : dn), size_t(H_) * sizeof(float));
      }
    return dst;
  }

  // ONNX W or R [D, G*H, K] (gate rows in ONNX's order) -> oneDNN ldigo [1, D, K, G, H].
  void pack_weights(const float* src, int64_t K, float* dst) const {
    for (int64_t d = 0; d < D_; ++d)
      for (int64_t g = 0; g < G_; ++g) {
        const float* rows = src + (d * G_ + onnx_gate(cell_, g)) * H_ * K;
        for (int64_t h = 0; h < H_; ++h)
          for (int64_t k = 0; k < K; ++k) dst[((d * K + k) * G_ + g) * H_ + h] = rows[h * K + k];
      }
  }
  void pack_weights(const float* src, int64_t K, std::vector<float>& dst) const { pack_weights(src, K, dst.data()); }
  // ONNX B [D, 2*G*H] (Wb, Rb; absent: zeros) -> oneDNN ldgo [1, D, G(+1), H]: Wb + Rb per gate;
  // for linear_before_reset, h's Wb and its Rb apart (the fourth gate).
  void pack_bias(const float* src, float* dst) const {
    const int64_t Gb = G_ + (lbr_ ? 1 : 0), GH = G_ * H_;
    for (int64_t d = 0; d < D_; ++d)
      for (int64_t g = 0; g < G_; ++g)
        for (int64_t h = 0; h < H_; ++h) {
          const int64_t row = onnx_gate(cell_, g) * H_ + h;
          const float wb = src ? src[d * 2 * GH + row] : 0.0f, rb = src ? src[d * 2 * GH + GH + row] : 0.0f;
          dst[(d * Gb + g) * H_ + h] = lbr_ && g == 2 ? wb : wb + rb;
          if (lbr_ && g == 2) dst[(d * Gb + 3) * H_ + h] = rb;
        }
  }
  void pack_bias(const float* src, std::vector<float>& dst) const { pack_bias(src, dst.data()); }
  // ONNX P [D, 3*H] (i, o, f) -> oneDNN's peephole weights ldgo [1, D, 3, H] (i, f, o).
  void pack_peephole(const float* src, float* dst) const {
    static const int64_t onnx[] = {0, 2, 1};
    for (int64_t d = 0; d < D_; ++d)
      for (int64_t g = 0; g < 3; ++g) std::memcpy(dst + (d * 3 + g) * H_, src + (d * 3 + onnx[g]) * H_, size_t(H_) * sizeof(float));
  }
  void pack_peephole(const float* src, std::vector<float>& dst) const { pack_peephole(src, dst.data()); }

  void run_reference(const std::array<const float*, 8>& in, const std::vector<float*>& out) const {
    std::vector<RValue> args;
    args.reserve(8);
    std::vector<const RValue*> ptrs;
    for (size_t i = 0; i < 8 && i < node_.inputs.size(); ++i) {
      if (!present_[i]) {
        ptrs.push_back(nullptr);
        continue;
      }
      Tensor t = Tensor::empty(i == 4 ? DType::Int32 : DType::Float32, shapes_[i]);
      if (t.numel() > 0) std::memcpy(t.raw(), in[i], t.nbytes());
      args.emplace_back(std::move(t));
      ptrs.push_back(&args.back());
    }
    std::vector<RValue> result = interpret_node(node_, ptrs);
    for (size_t j = 0; j < outputs_.size(); ++j) {
      const Tensor& t = result.at(size_t(outputs_[j])).tensor;
      if (t.numel() > 0) std::memcpy(out[j], t.data<float>(), t.nbytes());
    }
  }

  Node node_;
  Cell cell_;
  std::array<bool, 8> present_{};
  std::array<Shape, 8> shapes_;
  std::array<const Tensor*, 8> constant_{};
  std::vector<int> outputs_;
  std::vector<Shape> out_shapes_;
  int64_t T_ = 0, N_ = 0, I_ = 0, H_ = 0, D_ = 1, G_ = 1;
  bool reverse_ = false, lbr_ = false, reference_only_ = false, initial_ = false, batch_first_ = false;
  int threads_ = 1;
  memory::desc src_layer_, src_iter_, src_iter_c_, w_layer_, w_iter_, bias_, dst_layer_, dst_iter_, dst_iter_c_, scratch_,
      peephole_;
  dnnl::primitive prim_;
  std::vector<float> packed_w_, packed_r_, packed_b_, packed_p_;
};

// ---- The error bound ----

constexpr double kU = 1.0 / 16777216.0;  // 2^-24

// A sigmoid's or tanh's result and the bound on its error, from its argument a and that
// argument's error bound e: slope L times e, plus 16 ulps of the result and of the argument's
// scale (as jit/cpu/dnnl_activation.h).
struct Bounded {
  double v = 0, e = 0;
};
Bounded activate(const std::string& kind, double a, double e) {
  double v, L;
  if (kind == "sigmoid") {
    v = a >= 0 ? 1.0 / (1.0 + std::exp(-a)) : std::exp(a) / (1.0 + std::exp(a));
    L = 0.25;
  } else if (kind == "relu") {
    return {std::max(0.0, a), e};
  } else {
    v = std::tanh(a);
    L = 1.0;
  }
  return {v, L * e + 16 * kU * (std::abs(v) + L * (std::abs(a) + e))};
}

// x * y of two bounded values, rounded once.
Bounded mul(Bounded x, Bounded y) {
  const double v = x.v * y.v;
  return {v, std::abs(x.v) * y.e + (std::abs(y.v) + y.e) * x.e + kU * std::abs(v)};
}

// The error bounds of one direction's cells (dnnl_rnn_error_bound): its weights and biases as
// double, and the input row of the step being bounded.
struct CellBound {
  Cell cell;
  std::string rnn_act;
  bool lbr;
  int64_t I, H;
  double gamma;  // the relative bound of one fp32 sum of I + H + 4 terms
  const double *w, *r, *wb, *rb, *peep;
  const double* x = nullptr;

  // Row `row`'s Rb and recurrent part over state v, with its Wb and input part unless !with_x, as
  // one fp32 sum: the value and its error bound.
  Bounded pre(int64_t row, const std::vector<Bounded>& v, bool with_x = true) const {
    double val = rb[row], mag = std::abs(rb[row]), prop = 0;
    if (with_x) {
      val += wb[row];
      mag += std::abs(wb[row]);
      for (int64_t i = 0; i < I; ++i) {
        val += w[row * I + i] * x[i];
        mag += std::abs(w[row * I + i] * x[i]);
      }
    }
    for (int64_t m = 0; m < H; ++m) {
      val += r[row * H + m] * v[size_t(m)].v;
      mag += std::abs(r[row * H + m]) * (std::abs(v[size_t(m)].v) + v[size_t(m)].e);
      prop += std::abs(r[row * H + m]) * v[size_t(m)].e;
    }
    return Bounded{val, gamma * mag + prop};
  }

  // One step: h (and c for LSTM) become the next state's values and bounds.
  void step(std::vector<Bounded>& h, std::vector<Bounded>& c) const {
    std::vector<Bounded> next_h(static_cast<size_t>(H)), next_c(static_cast<size_t>(H));
    if (cell == Cell::Rnn) {
      for (int64_t j = 0; j < H; ++j) {
        const Bounded a = pre(j, h);
        next_h[size_t(j)] = activate(rnn_act, a.v, a.e);
      }
    } else if (cell == Cell::Lstm) {
      lstm_step(h, c, next_h, next_c);
    } else {
      gru_step(h, next_h);
    }
    h = next_h;
    if (cell == Cell::Lstm) c = next_c;
  }

  // ONNX rows: i, o, f, c; peepholes i, o, f.
  void lstm_step(const std::vector<Bounded>& h, const std::vector<Bounded>& c, std::vector<Bounded>& next_h,
                 std::vector<Bounded>& next_c) const {
    // A peephole term p * c added to a gate's sum: one more product in it.
    auto with_peephole = [&](Bounded a, double p, Bounded cj) {
      return Bounded{a.v + p * cj.v, a.e + gamma * std::abs(p) * (std::abs(cj.v) + cj.e) + std::abs(p) * cj.e};
    };
    for (int64_t j = 0; j < H; ++j) {
      const Bounded cj = c[size_t(j)];
      const Bounded pi = with_peephole(pre(j, h), peep[j], cj), pf = with_peephole(pre(2 * H + j, h), peep[2 * H + j], cj),
                    pc = pre(3 * H + j, h);
      const Bounded i = activate("sigmoid", pi.v, pi.e), f = activate("sigmoid", pf.v, pf.e),
                    g = activate("tanh", pc.v, pc.e);
      const Bounded fc = mul(f, cj), ig = mul(i, g);
      const Bounded cn{fc.v + ig.v, fc.e + ig.e + kU * std::abs(fc.v + ig.v)};
      const Bounded po = with_peephole(pre(H + j, h), peep[H + j], cn);
      const Bounded o = activate("sigmoid", po.v, po.e);
      const Bounded tc = activate("tanh", cn.v, cn.e);
      next_c[size_t(j)] = cn;
      next_h[size_t(j)] = mul(o, tc);
    }
  }

  // ONNX rows: z, r, h.
  void gru_step(const std::vector<Bounded>& h, std::vector<Bounded>& next_h) const {
    std::vector<Bounded> z(static_cast<size_t>(H)), rg(z.size()), rh(z.size());
    for (int64_t j = 0; j < H; ++j) {
      const Bounded pz = pre(j, h), pr = pre(H + j, h);
      z[size_t(j)] = activate("sigmoid", pz.v, pz.e);
      rg[size_t(j)] = activate("sigmoid", pr.v, pr.e);
      rh[size_t(j)] = mul(rg[size_t(j)], h[size_t(j)]);
    }
    for (int64_t j = 0; j < H; ++j) {
      const int64_t row = 2 * H + j;
      const Bounded a = lbr ? lbr_candidate_sum(row, h, rg[size_t(j)]) : pre(row, rh);
      const Bounded cand = activate("tanh", a.v, a.e), zj = z[size_t(j)], hj = h[size_t(j)];
      const Bounded one_minus_z{1 - zj.v, zj.e + kU * std::abs(1 - zj.v)};
      const Bounded p1 = mul(one_minus_z, cand), p2 = mul(zj, hj);
      next_h[size_t(j)] = {p1.v + p2.v, p1.e + p2.e + kU * std::abs(p1.v + p2.v)};
    }
  }

  // linear_before_reset's candidate sum: Wh x + Wbh + r * (Rh h + Rbh).
  Bounded lbr_candidate_sum(int64_t row, const std::vector<Bounded>& h, Bounded rj) const {
    const Bounded lin = pre(row, h, false), hr = mul(rj, lin);
    double val = wb[row] + hr.v, mag = std::abs(wb[row]) + std::abs(hr.v) + hr.e;
    for (int64_t i = 0; i < I; ++i) {
      val += w[row * I + i] * x[i];
      mag += std::abs(w[row * I + i] * x[i]);
    }
    return {val, gamma * mag + hr.e};
  }
};

// Input i as doubles; empty where not given.
std::vector<double> as_doubles(const std::vector<Tensor>& inputs, size_t i) {
  std::vector<double> v;
  if (i < inputs.size() && inputs[i].defined()) {
    Tensor t = inputs[i].cast(DType::Float64);
    v.assign(t.data<double>(), t.data<double>() + t.numel());
  }
  return v;
}

}  // namespace

std::string dnnl_rnn_can_compile(const Node& node, const std::vector<DType>& dtypes,
                                 const std::vector<std::optional<size_t>>& ranks) {
  if (node.op != Op::LSTM && node.op != Op::GRU && node.op != Op::RNN)
    return std::string("tier 1 has no recurrent kernel for ") + op_name(node.op);
  if (std::string why = refusal(node); !why.empty()) return why;
  size_t k = 0;  // dtypes holds the given inputs' in order; sequence_lens (input 4) is int32
  for (size_t i = 0; i < node.inputs.size() && k < dtypes.size(); ++i) {
    if (!given(node, i)) continue;
    const DType t = dtypes[k++], want = i == 4 ? DType::Int32 : DType::Float32;
    if (t != want)
      return std::string("tier 1 runs ") + op_name(node.op) + (i == 4 ? " with int32 sequence_lens, not " : " in float32 only, not ") +
             dtype_name(t);
  }
  if (!ranks.empty() && ranks[0] && *ranks[0] != 3) return std::string("tier 1 runs ") + op_name(node.op) + " on an X of rank 3";
  return "";
}

std::unique_ptr<DnnlPrimitive> make_dnnl_rnn(const Node& node, const std::vector<bool>& present,
                                             const std::vector<Shape>& shapes,
                                             const std::vector<const Tensor*>& constants,
                                             const std::vector<int>& outputs) {
  TERRACE_CHECK(node.op == Op::LSTM || node.op == Op::GRU || node.op == Op::RNN, Internal, node.describe(),
                ": not a recurrent op");
  return std::make_unique<Recurrent>(node, present, shapes, constants, outputs);
}

std::vector<Tensor> dnnl_rnn_error_bound(const Node& node, const std::vector<Tensor>& inputs) {
  const Cell cell = cell_of(node.op);
  std::string rnn_act = "tanh";
  TERRACE_CHECK(refusal(node, &rnn_act).empty(), Internal, node.describe(), ": no bound for a form tier 1 refuses");
  const Shape& xs = inputs.at(0).shape();
  const bool batch_first = node.attr_int("layout", 0) == 1;  // X [N, T, I], Y [N, T, D, H], states [N, D, H]
  const int64_t T = xs[batch_first ? 1 : 0], N = xs[batch_first ? 0 : 1], I = xs[2], H = inputs.at(2).shape()[2], G = gate_count(cell);
  const std::string direction = node.attr_string("direction", "forward");
  const int64_t D = direction == "bidirectional" ? 2 : 1, GH = G * H;
  const bool lbr = cell == Cell::Gru && node.attr_int("linear_before_reset", 0) != 0;
  const std::vector<double> X = as_doubles(inputs, 0), W = as_doubles(inputs, 1), R = as_doubles(inputs, 2);
  std::vector<double> B = as_doubles(inputs, 3), h0 = as_doubles(inputs, 5), c0 = as_doubles(inputs, 6),
                      P = as_doubles(inputs, 7);
  if (B.empty()) B.assign(size_t(D * 2 * GH), 0.0);
  if (h0.empty()) h0.assign(size_t(D * N * H), 0.0);
  if (c0.empty()) c0.assign(size_t(D * N * H), 0.0);
  if (P.empty()) P.assign(size_t(D * 3 * H), 0.0);
  const double K = double(I + H + 4), gamma = K * kU / (1 - K * kU);
  const Shape state = batch_first ? Shape{N, D, H} : Shape{D, N, H};
  Tensor ey = Tensor::zeros(DType::Float64, batch_first ? Shape{N, T, D, H} : Shape{T, D, N, H}),
         eh = Tensor::zeros(DType::Float64, state), ec = Tensor::zeros(DType::Float64, state);
  auto state_at = [&](int64_t d, int64_t n) { return (batch_first ? n * D + d : d * N + n) * H; };
  for (int64_t d = 0; d < D; ++d) {
    const double* wb = B.data() + d * 2 * GH;
    CellBound bound{cell, rnn_act, lbr, I, H, gamma, W.data() + d * GH * I, R.data() + d * GH * H, wb, wb + GH,
                    P.data() + d * 3 * H};
    for (int64_t n = 0; n < N; ++n) {
      std::vector<Bounded> h(static_cast<size_t>(H)), c(static_cast<size_t>(H));
      for (int64_t j = 0; j < H; ++j) {
        h[size_t(j)].v = h0[size_t(state_at(d, n) + j)];
        c[size_t(j)].v = c0[size_t(state_at(d, n) + j)];
      }
      for (int64_t s = 0; s < T; ++s) {
        const int64_t t = (d == 1 || direction == "reverse") ? T - 1 - s : s;
        bound.x = X.data() + (batch_first ? n * T + t : t * N + n) * I;
        bound.step(h, c);
        const int64_t y_at = batch_first ? ((n * T + t) * D + d) * H : ((t * D + d) * N + n) * H;
        for (int64_t j = 0; j < H; ++j) ey.data<double>()[y_at + j] = h[size_t(j)].e;
      }
      for (int64_t j = 0; j < H; ++j) {
        eh.data<double>()[state_at(d, n) + j] = h[size_t(j)].e;
        ec.data<double>()[state_at(d, n) + j] = c[size_t(j)].e;
      }
    }
  }
  std::vector<Tensor> out{std::move(ey), std::move(eh)};
  if (cell == Cell::Lstm) out.push_back(std::move(ec));
  // Infinite inputs make some terms 0 * inf: no bound there. Such calls run the interpreter's own
  // kernel (the primitive's fallback), so an unbounded allowance excuses no difference; a NaN one
  // would fail even equal values.
  for (Tensor& t : out)
    for (int64_t i = 0; i < t.numel(); ++i)
      if (std::isnan(t.data<double>()[i])) t.data<double>()[i] = std::numeric_limits<double>::infinity();
  return out;
}

}  // namespace terrace::jit
