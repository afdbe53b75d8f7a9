// Recurrent reference kernels: RNN, GRU and LSTM (all directions, layouts, optional inputs),
// stepping one shared driver with a cell per op; state and gate sums are kept in double.
#include <algorithm>
#include <cctype>
#include <cmath>

#include "interp/ops/nn.h"

namespace terrace::ops {
namespace {

enum class Cell { Rnn, Gru, Lstm };

int gate_count(Cell c) { return c == Cell::Rnn ? 1 : c == Cell::Gru ? 3 : 4; }
int activation_count(Cell c) { return c == Cell::Rnn ? 1 : c == Cell::Gru ? 2 : 3; }

// One of the activation functions the recurrent ops accept, with its alpha/beta.
struct Activation {
  enum Kind {
    Sigmoid,
    Tanh,
    Relu,
    Affine,
    LeakyRelu,
    ThresholdedRelu,
    ScaledTanh,
    HardSigmoid,
    Elu,
    Softsign,
    Softplus
  } kind = Tanh;
  double alpha = 0, beta = 0;

  double operator()(double x) const {
    switch (kind) {
      case Sigmoid: return 1.0 / (1.0 + std::exp(-x));
      case Tanh: return std::tanh(x);
      case Relu: return std::max(0.0, x);
      case Affine: return alpha * x + beta;
      case LeakyRelu: return x >= 0 ? x : alpha * x;
      case ThresholdedRelu: return x > alpha ? x : 0.0;
      case ScaledTanh: return alpha * std::tanh(beta * x);
      case HardSigmoid: return std::clamp(alpha * x + beta, 0.0, 1.0);
      case Elu: return x >= 0 ? x : alpha * (std::exp(x) - 1.0);
      case Softsign: return x / (1.0 + std::fabs(x));
      case Softplus: return std::log1p(std::exp(x));
    }
    return x;
  }
};

// Parses the activation names; alphas and betas are consumed in order by the functions that use
// them (as ONNX Runtime does), the ONNX operators' defaults filling in for missing ones.
std::vector<Activation> parse_activations(const Node& node, const std::vector<std::string>& names) {
  struct Info {
    const char* name;
    Activation::Kind kind;
    int params;
    double alpha, beta;
  };
  static const Info kInfos[] = {{"sigmoid", Activation::Sigmoid, 0, 0, 0},
                                {"tanh", Activation::Tanh, 0, 0, 0},
                                {"relu", Activation::Relu, 0, 0, 0},
                                {"affine", Activation::Affine, 2, 1, 0},
                                {"leakyrelu", Activation::LeakyRelu, 1, 0.01, 0},
                                {"thresholdedrelu", Activation::ThresholdedRelu, 1, 1, 0},
                                {"scaledtanh", Activation::ScaledTanh, 2, 1, 1},
                                {"hardsigmoid", Activation::HardSigmoid, 2, 0.2, 0.5},
                                {"elu", Activation::Elu, 1, 1, 0},
                                {"softsign", Activation::Softsign, 0, 0, 0},
                                {"softplus", Activation::Softplus, 0, 0, 0}};
  std::vector<float> alphas = node.attr_floats("activation_alpha");
  std::vector<float> betas = node.attr_floats("activation_beta");
  size_t next_alpha = 0, next_beta = 0;
  std::vector<Activation> out;
  for (const std::string& name : names) {
    std::string lower = name;
    for (char& ch : lower) ch = char(std::tolower(static_cast<unsigned char>(ch)));
    const Info* info = nullptr;
    for (const Info& i : kInfos)
      if (lower == i.name) info = &i;
    TERRACE_CHECK(info, NotImplemented, node.describe(), ": activation '", name,
                  "' is not supported");
    Activation a{info->kind, info->alpha, info->beta};
    if (info->params >= 1 && next_alpha < alphas.size()) a.alpha = alphas[next_alpha++];
    if (info->params >= 2 && next_beta < betas.size()) a.beta = betas[next_beta++];
    out.push_back(a);
  }
  return out;
}

// Everything the driver needs, validated up front (no error can arise while stepping).
struct RnnProblem {
  Cell cell = Cell::Rnn;
  int64_t seq = 0, batch = 0, input = 0, hidden = 0, dirs = 1, gates = 1;
  bool layout_batch_first = false, reverse_only = false, linear_before_reset = false;
  bool input_forget = false;
  double clip = 0;                            // 0: no clipping
  std::vector<double> x, w, r, b, p, h0, c0;  // per direction blocks, in double
  std::vector<int64_t> lens;
  std::vector<Activation> acts;  // activation_count(cell) per direction

  bool reversed(int64_t d) const { return reverse_only || d == 1; }
  int64_t x_off(int64_t t, int64_t n) const {
    return (layout_batch_first ? n * seq + t : t * batch + n) * input;
  }
  int64_t y_off(int64_t t, int64_t d, int64_t n) const {
    return (layout_batch_first ? (n * seq + t) * dirs + d : (t * dirs + d) * batch + n) * hidden;
  }
  int64_t state_off(int64_t d, int64_t n) const {  // Y_h, Y_c, initial_h, initial_c
    return (layout_batch_first ? n * dirs + d : d * batch + n) * hidden;
  }
};

// An optional input as doubles with the expected shape, or `fill` repeated when absent.
std::vector<double> optional_input(const KernelContext& ctx, size_t i, const Shape& shape,
                                   const char* what, double fill) {
  if (!ctx.has_input(i)) return std::vector<double>(size_t(shape_numel(shape)), fill);
  check_shape(ctx.node, ctx.input(i), shape, what);
  return tensor_to_doubles(ctx.input(i));
}

RnnProblem make_problem(const KernelContext& ctx, Cell cell) {
  const Node& node = ctx.node;
  RnnProblem p;
  p.cell = cell;
  p.gates = gate_count(cell);
  const Tensor& x = ctx.input(0);
  check_float(node, x.dtype(), "input X");
  TERRACE_CHECK(x.rank() == 3, InvalidArgument, node.describe(), ": input X must have rank 3, got ",
                shape_str(x.shape()));
  p.layout_batch_first = node.attr_int("layout", 0) != 0;
  p.seq = x.dim(p.layout_batch_first ? 1 : 0);
  p.batch = x.dim(p.layout_batch_first ? 0 : 1);
  p.input = x.dim(2);
  std::string direction = node.attr_string("direction", "forward");
  TERRACE_CHECK(direction == "forward" || direction == "reverse" || direction == "bidirectional",
                InvalidModel, node.describe(), ": unknown direction '", direction, "'");
  p.dirs = direction == "bidirectional" ? 2 : 1;
  p.reverse_only = direction == "reverse";
  const Tensor& r = ctx.input(2);
  p.hidden = node.attr_int("hidden_size", r.rank() == 3 ? r.dim(2) : 0);
  TERRACE_CHECK(p.hidden > 0, InvalidModel, node.describe(), ": hidden_size must be > 0");
  // R is [dirs, gates * hidden, hidden]: an attribute that no R can match is named as such, not
  // reported as a wrong W (gates * hidden overflowing to a negative size).
  TERRACE_CHECK(r.rank() != 3 || r.dim(2) == p.hidden, InvalidModel, node.describe(), ": attribute hidden_size = ",
                p.hidden, " does not match input R ", shape_str(r.shape()), " (its last dimension is the hidden size)");
  checked_numel(node, {p.seq, p.dirs, p.batch, p.gates, p.hidden}, "attribute hidden_size");
  p.linear_before_reset = node.attr_int("linear_before_reset", 0) != 0;
  p.input_forget = node.attr_int("input_forget", 0) != 0;
  p.clip = node.has_attr("clip") ? node.attr_float("clip", 0) : 0.0;
  TERRACE_CHECK(p.clip >= 0, InvalidModel, node.describe(), ": clip must be >= 0");

  int64_t gh = p.gates * p.hidden;
  p.x = tensor_to_doubles(x);
  check_shape(node, ctx.input(1), {p.dirs, gh, p.input}, "input W");
  p.w = tensor_to_doubles(ctx.input(1));
  check_shape(node, r, {p.dirs, gh, p.hidden}, "input R");
  p.r = tensor_to_doubles(r);
  p.b = optional_input(ctx, 3, {p.dirs, 2 * gh}, "input B", 0.0);
  p.lens.assign(size_t(p.batch), p.seq);
  if (ctx.has_input(4)) {
    check_shape(node, ctx.input(4), {p.batch}, "input sequence_lens");
    p.lens = ctx.input(4).to_int64_vector();
    for (int64_t len : p.lens)
      TERRACE_CHECK(len >= 0 && len <= p.seq, InvalidArgument, node.describe(),
                    ": sequence length ", len, " is outside [0, ", p.seq, "]");
  }
  Shape state =
      p.layout_batch_first ? Shape{p.batch, p.dirs, p.hidden} : Shape{p.dirs, p.batch, p.hidden};
  p.h0 = optional_input(ctx, 5, state, "input initial_h", 0.0);
  if (cell == Cell::Lstm) {
    p.c0 = optional_input(ctx, 6, state, "input initial_c", 0.0);
    p.p = optional_input(ctx, 7, {p.dirs, 3 * p.hidden}, "input P", 0.0);
  }

  static const std::vector<std::string> kDefaults[] = {
      {"Tanh"}, {"Sigmoid", "Tanh"}, {"Sigmoid", "Tanh", "Tanh"}};
  size_t per_dir = size_t(activation_count(cell));
  std::vector<std::string> names = node.attr_strings("activations", kDefaults[int(cell)]);
  if (names.size() == per_dir && p.dirs == 2) {  // one list serves both directions
    std::vector<std::string> once = names;
    names.insert(names.end(), once.begin(), once.end());
  }
  TERRACE_CHECK(names.size() == per_dir * size_t(p.dirs), InvalidModel, node.describe(),
                ": expected ", per_dir * size_t(p.dirs), " activations, got ", names.size());
  p.acts = parse_activations(node, names);
  return p;
}

double dot(const double* a, const double* b, int64_t n) {
  double s = 0;
  for (int64_t k = 0; k < n; ++k) s += a[k] * b[k];
  return s;
}

// The recurrent state of one direction: hidden (and cell) state per batch entry.
struct State {
  std::vector<double> h, c;
};

// One time step of direction d for batch entry n at time t: updates that entry's hidden (and
// cell) state in st from its previous value, following the ONNX equations of each cell.
void step(const RnnProblem& p, int64_t d, int64_t n, int64_t t, State& st) {
  int64_t H = p.hidden, gh = p.gates * H;
  const double* x = &p.x[size_t(p.x_off(t, n))];
  const double* w = &p.w[size_t(d * gh * p.input)];
  const double* r = &p.r[size_t(d * gh * H)];
  const double* wb = &p.b[size_t(d * 2 * gh)];
  const double* rb = wb + gh;
  const Activation* act = &p.acts[size_t(d * activation_count(p.cell))];
  double* h = &st.h[size_t(n * H)];
  std::vector<double> h_prev(h, h + H);
  auto clip = [&](double v) { return p.clip > 0 ? std::clamp(v, -p.clip, p.clip) : v; };
  // Gate row g*H+j: input part and recurrent part (with their biases).
  auto xin = [&](int64_t row) { return dot(w + row * p.input, x, p.input) + wb[row]; };
  auto rec = [&](int64_t row, const double* hv) { return dot(r + row * H, hv, H) + rb[row]; };

  switch (p.cell) {
    case Cell::Rnn:
      for (int64_t j = 0; j < H; ++j) h[j] = act[0](clip(xin(j) + rec(j, h_prev.data())));
      break;
    case Cell::Gru: {  // gates z, r, h
      std::vector<double> z(static_cast<size_t>(H)), rg(z.size()), rh(z.size());
      for (int64_t j = 0; j < H; ++j) {
        z[size_t(j)] = act[0](clip(xin(j) + rec(j, h_prev.data())));
        rg[size_t(j)] = act[0](clip(xin(H + j) + rec(H + j, h_prev.data())));
        rh[size_t(j)] = rg[size_t(j)] * h_prev[size_t(j)];
      }
      for (int64_t j = 0; j < H; ++j) {
        double hr = p.linear_before_reset ? rg[size_t(j)] * rec(2 * H + j, h_prev.data())
                                          : rec(2 * H + j, rh.data());
        double cand = act[1](clip(xin(2 * H + j) + hr));
        h[j] = (1 - z[size_t(j)]) * cand + z[size_t(j)] * h_prev[size_t(j)];
      }
      break;
    }
    case Cell::Lstm: {  // gates i, o, f, c; peepholes i, o, f
      const double* peep = &p.p[size_t(d * 3 * H)];
      double* c = &st.c[size_t(n * H)];
      for (int64_t j = 0; j < H; ++j) {
        auto pre = [&](int64_t gate) {
          return xin(gate * H + j) + rec(gate * H + j, h_prev.data());
        };
        double i = act[0](clip(pre(0) + peep[j] * c[j]));
        double f = p.input_forget ? 1 - i : act[0](clip(pre(2) + peep[2 * H + j] * c[j]));
        double cand = act[1](clip(pre(3)));
        c[j] = f * c[j] + i * cand;
        double o = act[0](clip(pre(1) + peep[H + j] * c[j]));
        h[j] = o * act[2](c[j]);
      }
      break;
    }
  }
}

void recurrent_kernel(KernelContext& ctx, Cell cell) {
  RnnProblem p = make_problem(ctx, cell);
  int64_t H = p.hidden;
  std::vector<double> y(size_t(p.seq * p.dirs * p.batch * H), 0.0);
  std::vector<double> yh(static_cast<size_t>(p.dirs * p.batch * H)), yc(yh.size());
  for (int64_t d = 0; d < p.dirs; ++d) {
    State st{std::vector<double>(size_t(p.batch * H)), std::vector<double>(size_t(p.batch * H))};
    for (int64_t n = 0; n < p.batch; ++n)
      for (int64_t j = 0; j < H; ++j) {
        st.h[size_t(n * H + j)] = p.h0[size_t(p.state_off(d, n) + j)];
        if (cell == Cell::Lstm) st.c[size_t(n * H + j)] = p.c0[size_t(p.state_off(d, n) + j)];
      }
      // Batch entries are independent: each thread steps its own entries through time.
    parallel_for(p.batch, [&](int64_t n) {
      int64_t len = p.lens[size_t(n)];
      for (int64_t s = 0; s < len; ++s) {
        int64_t t = p.reversed(d) ? len - 1 - s : s;
        step(p, d, n, t, st);
        std::copy_n(&st.h[size_t(n * H)], H, &y[size_t(p.y_off(t, d, n))]);
      }
      std::copy_n(&st.h[size_t(n * H)], H, &yh[size_t(p.state_off(d, n))]);
      std::copy_n(&st.c[size_t(n * H)], H, &yc[size_t(p.state_off(d, n))]);
    });
  }
  DType dt = ctx.input(0).dtype();
  Shape y_shape =
      p.layout_batch_first ? Shape{p.batch, p.seq, p.dirs, H} : Shape{p.seq, p.dirs, p.batch, H};
  Shape state = p.layout_batch_first ? Shape{p.batch, p.dirs, H} : Shape{p.dirs, p.batch, H};
  if (ctx.wants_output(0)) ctx.set_output(0, tensor_from_doubles(ctx.node, dt, y_shape, y));
  if (ctx.wants_output(1)) ctx.set_output(1, tensor_from_doubles(ctx.node, dt, state, yh));
  if (cell == Cell::Lstm && ctx.wants_output(2))
    ctx.set_output(2, tensor_from_doubles(ctx.node, dt, state, yc));
}

}  // namespace

void register_nn_rnn_kernels(KernelTable& t) {
  t.add(Op::RNN, [](KernelContext& c) { recurrent_kernel(c, Cell::Rnn); });
  t.add(Op::GRU, [](KernelContext& c) { recurrent_kernel(c, Cell::Gru); });
  t.add(Op::LSTM, [](KernelContext& c) { recurrent_kernel(c, Cell::Lstm); });
}

}  // namespace terrace::ops
