// Tier 1's library regions through oneDNN (tiers/cpu/cpu_library.h).
#include "tiers/cpu/cpu_library.h"

#ifdef TERRACE_HAVE_CPU_JIT
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>

#include "interp/interpreter.h"
#include "interp/ops/conv.h"
#include "jit/cpu/dnnl_activation.h"
#include "jit/cpu/dnnl_deconv.h"
#include "jit/cpu/dnnl_rnn.h"
#include "jit/cpu/winograd_conv.h"

namespace terrace::cpu_library {
namespace {

// An initializer that no caller can replace (not also a graph input), or nullptr.
const Tensor* constant_of(const Graph& g, int v) {
  if (v < 0) return nullptr;
  auto init = g.initializers.find(v);
  if (init == g.initializers.end() || std::find(g.inputs.begin(), g.inputs.end(), v) != g.inputs.end()) return nullptr;
  return &init->second;
}

// A Clip bound: an absent one is no bound; a present one must be a constant float32 scalar.
std::optional<float> clip_bound(const Graph& g, const Node& n, size_t index, float none) {
  if (n.inputs.size() <= index || n.inputs[index] < 0) return none;
  const Tensor* t = constant_of(g, n.inputs[index]);
  if (!t || t->dtype() != DType::Float32 || t->numel() != 1) return std::nullopt;
  return t->data<float>()[0];
}

bool is_float32(const Graph& g, int v) {
  const ValueInfo& info = g.values[size_t(v)].info;
  return info.kind == ValueKind::Tensor && info.dtype == DType::Float32;
}

// The oneDNN activation a node can be: a Relu, or a Clip with constant bounds lo <= hi (opset 11+
// inputs, or opset 6 attributes), both monotone and 1-Lipschitz, so an error bound before them
// holds after them; or a Sigmoid, Tanh, LeakyRelu, Elu, HardSwish or Gelu, whose bound follows
// their slope (jit/cpu/dnnl_activation.h).
std::optional<jit::DnnlActivation> activation_of(const Graph& g, const Node& n) {
#ifdef TERRACE_HAVE_DNNL
  if (n.outputs.size() != 1 || n.inputs.empty() || n.inputs[0] < 0 || !is_float32(g, n.inputs[0])) return std::nullopt;
  if (n.op == Op::Relu) return jit::DnnlActivation{jit::DnnlActivation::Kind::Relu};
  if (n.op == Op::Clip) {
    const float lowest = -std::numeric_limits<float>::max(), highest = std::numeric_limits<float>::max();
    std::optional<float> lo = clip_bound(g, n, 1, n.attr_float("min", lowest));
    std::optional<float> hi = clip_bound(g, n, 2, n.attr_float("max", highest));
    if (lo && hi && std::isfinite(*lo) && std::isfinite(*hi) && *lo <= *hi)
      return jit::DnnlActivation{jit::DnnlActivation::Kind::Clip, *lo, *hi};
  }
  return jit::dnnl_activation_of(n);
#else
  (void)g;
  (void)n;
#endif
  return std::nullopt;
}

// The number of products summed into each output.
int64_t reduction_length(const Node& node, const Shape& a, const Shape& b) {
  if (node.op == Op::MatMul) return a.back();
  if (node.op == Op::Gemm) return node.attr_int("transA", 0) ? a[0] : a[1];
  if (node.op == Op::ConvTranspose) {  // weights [C, M/group, k...]: C/group channels, each tap at most once
    int64_t k = b[0] / std::max<int64_t>(1, node.attr_int("group", 1));
    for (size_t i = 2; i < b.size(); ++i) k *= b[i];
    return k;
  }
  int64_t k = 1;  // Conv: weights [M, C/group, k...]
  for (size_t i = 1; i < b.size(); ++i) k *= b[i];
  return k;
}

// Where value v is among the region's inputs.
size_t region_input_index(const Region& region, int v) {
  auto it = std::find(region.inputs.begin(), region.inputs.end(), v);
  TERRACE_ASSERT(it != region.inputs.end(), "tier 1: a library op reads a value from inside its region");
  return size_t(it - region.inputs.begin());
}

// The node that produces v, or nullptr.
const Node* producer_of(const Graph& g, int v) {
  const int p = v < 0 ? -1 : g.values[size_t(v)].producer;
  return p < 0 ? nullptr : &g.nodes[size_t(p)];
}

// True when value v has one reader: one node input (captures by subgraphs count) and no graph output.
// How many times v is read: by nodes (each input and capture) and as a graph output.
int readers_of(const Graph& g, int v) {
  int readers = int(std::count(g.outputs.begin(), g.outputs.end(), v));
  for (const Node& n : g.nodes) {
    readers += int(std::count(n.inputs.begin(), n.inputs.end(), v));
    for (int c : g.captured_by(n)) readers += c == v;
  }
  return readers;
}

bool only_reader(const Graph& g, int v) { return readers_of(g, v) == 1; }

// SiLU as exporters write it, Mul(x, Sigmoid(x)) with x read by those two alone and the Sigmoid's
// result by the Mul alone: for `sigmoid`, its Mul, else nullptr. A chain runs the pair as one
// swish post-op of the op that made x.
const Node* swish_mul(const Graph& g, const Node& sigmoid) {
  if (sigmoid.op != Op::Sigmoid || sigmoid.inputs.size() != 1 || sigmoid.outputs.size() != 1) return nullptr;
  const int x = sigmoid.inputs[0], s = sigmoid.outputs[0];
  if (x < 0 || s < 0 || !is_float32(g, x) || readers_of(g, x) != 2 || readers_of(g, s) != 1) return nullptr;
  for (const Node& n : g.nodes)
    if (n.op == Op::Mul && n.inputs.size() == 2 && n.outputs.size() == 1 &&
        ((n.inputs[0] == x && n.inputs[1] == s) || (n.inputs[0] == s && n.inputs[1] == x)))
      return &n;
  return nullptr;
}

// The Sigmoid of the SiLU pair whose Mul `mul` is, or nullptr.
const Node* swish_sigmoid(const Graph& g, const Node& mul) {
  if (mul.op != Op::Mul || mul.inputs.size() != 2) return nullptr;
  for (int v : mul.inputs)
    if (const Node* p = producer_of(g, v); p && swish_mul(g, *p) == &mul) return p;
  return nullptr;
}

// True when `next` starts a SiLU of `last`'s result.
bool starts_swish(const Graph& g, const Node& last, const Node& next) {
  return next.op == Op::Sigmoid && next.inputs.size() == 1 && next.inputs[0] == last.outputs[0] &&
         swish_mul(g, next) != nullptr;
}

// True when v is one of `last`'s results (a Split has several).
bool produces(const Node& last, int v) {
  return v >= 0 && std::find(last.outputs.begin(), last.outputs.end(), v) != last.outputs.end();
}

// The channel count of a float32 value of rank 4 whose dim 1 is known, else 0.
int64_t channels_of(const Graph& g, int v) {
  if (v < 0 || !is_float32(g, v)) return 0;
  const ValueInfo& info = g.values[size_t(v)].info;
  return info.shape && info.shape->size() == 4 && (*info.shape)[1] > 0 ? (*info.shape)[1] : 0;
}

// For a Split of a 4-D float32 value along channels (axis 1) into pieces whose sizes are known
// (a constant `split` input, the opset-11 attribute, or equal parts), those sizes; else empty.
std::vector<int64_t> channel_split(const Graph& g, const Node& split) {
  if (split.op != Op::Split || split.inputs.empty() || split.outputs.empty()) return {};
  const int64_t c = channels_of(g, split.inputs[0]);
  if (c == 0 || (split.attr_int("axis", 0) != 1 && split.attr_int("axis", 0) != -3)) return {};
  std::vector<int64_t> sizes;
  if (split.inputs.size() > 1 && split.inputs[1] >= 0) {
    const Tensor* t = constant_of(g, split.inputs[1]);
    if (!t || t->dtype() != DType::Int64) return {};
    sizes.assign(t->data<int64_t>(), t->data<int64_t>() + t->numel());
  } else if (split.has_attr("split")) {
    sizes = split.attr_ints("split", {});
  } else {
    const int64_t n = int64_t(split.outputs.size());
    if (c % n != 0) return {};
    sizes.assign(size_t(n), c / n);
  }
  int64_t sum = 0;
  for (int64_t e : sizes) sum += e > 0 ? e : -c;  // an empty or negative piece: not chained
  if (sizes.size() != split.outputs.size() || sum != c) return {};
  return sizes;
}

// True for a Concat of 4-D float32 values along channels (axis 1), each one's channels known.
bool channel_concat(const Graph& g, const Node& concat) {
  if (concat.op != Op::Concat || concat.inputs.empty() || concat.outputs.size() != 1) return false;
  const int64_t axis = concat.attr_int("axis", 0);
  if (axis != 1 && axis != -3) return false;
  return std::all_of(concat.inputs.begin(), concat.inputs.end(), [&](int v) { return channels_of(g, v) > 0; });
}

// True when `next` is a channel Split or Concat reading a result of `last`: a step of the chain
// that copies channel runs in the chain's layout (YOLO's C2f, Inception's branches), instead of
// the region's end, a reorder of each branch to NCHW and one back.
bool chains_step(const Graph& g, const Node& last, const Node& next);
bool chains_copy(const Graph& g, const Node& last, const Node& next) {
  if (!channel_split(g, next).empty()) {
    // Only where the chain goes on after it: a Split whose pieces all leave the region (a
    // detection head's boxes and scores) would cost its Conv the plain layouts of a lone 1x1.
    auto continues = [&](const Node& reader) { return chains_step(g, next, reader); };
    return produces(last, next.inputs[0]) && std::any_of(g.nodes.begin(), g.nodes.end(), continues);
  }
  return channel_concat(g, next) &&
         std::any_of(next.inputs.begin(), next.inputs.end(), [&](int v) { return produces(last, v); });
}

// True when `next`, reading `last`'s result as its data input, can be the next Conv of a chain:
// constant weights and bias, float32, a shape tier 1 runs.
bool chains_conv(const Graph& g, const Node& last, const Node& next) {
  if (next.op != Op::Conv || next.inputs.size() < 2 || !produces(last, next.inputs[0]) || next.outputs.size() != 1)
    return false;
  for (size_t i = 1; i < next.inputs.size(); ++i)
    if (next.inputs[i] >= 0 && (!constant_of(g, next.inputs[i]) || next.inputs[i] == next.inputs[0])) return false;
  return can_compile(g, next).empty();
}

// True when `next` pools `last`'s result (its data input) and tier 1 runs it: it becomes a step of
// the chain, in the chain's blocked layout (ResNet's stem MaxPool between its first Conv and the
// first block, which otherwise cost two reorders and a pool in plain layout; the GlobalAveragePool
// that ends a CNN, which was a generated kernel of its own).
bool chains_pool(const Graph& g, const Node& last, const Node& next) {
  return is_pool(next.op) && !next.inputs.empty() && produces(last, next.inputs[0]) && next.outputs.size() == 1 &&
         is_float32(g, next.inputs[0]) && can_compile(g, next).empty();
}

// True when `next` is an Add of `conv`'s result and another value of the same shape, each dim
// known or the same symbolic dim ("batch"): a residual connection, oneDNN's sum post-op. (The
// chain checks the shapes again at compile time.)
bool chains_add(const Graph& g, const Node& conv, const Node& next) {
  if (next.op != Op::Add || next.inputs.size() != 2 || next.outputs.size() != 1) return false;
  const int mine = conv.outputs[0];
  const int other = next.inputs[0] == mine ? next.inputs[1] : next.inputs[0];
  if ((next.inputs[0] == mine) == (next.inputs[1] == mine) || other < 0) return false;  // exactly one operand
  const ValueInfo &a = g.values[size_t(mine)].info, &b = g.values[size_t(other)].info;
  if (!is_float32(g, other) || !a.shape || !b.shape || a.shape->size() != b.shape->size()) return false;
  auto name = [](const ValueInfo& i, size_t d) { return d < i.dim_names.size() ? i.dim_names[d] : std::string(); };
  for (size_t d = 0; d < a.shape->size(); ++d) {
    if ((*a.shape)[d] != (*b.shape)[d]) return false;
    if ((*a.shape)[d] < 0 && (name(a, d).empty() || name(a, d) != name(b, d))) return false;  // one symbolic dim
  }
  return true;
}

// For a Mul that multiplies a value x of rank >= 3 by one value per channel of it (shape [N or 1,
// C, 1, ...], a squeeze-and-excitation block's scale), the index of that per-channel operand;
// else -1. A SiLU's Mul is none. Dims must be known, or the same symbolic dim for N.
int channel_scale(const Graph& g, const Node& mul) {
  if (mul.op != Op::Mul || mul.inputs.size() != 2 || mul.outputs.size() != 1 || mul.inputs[0] < 0 ||
      mul.inputs[1] < 0 || mul.inputs[0] == mul.inputs[1] || !is_float32(g, mul.inputs[0]) || !is_float32(g, mul.inputs[1]) ||
      swish_sigmoid(g, mul))
    return -1;
  const ValueInfo &a = g.values[size_t(mul.inputs[0])].info, &b = g.values[size_t(mul.inputs[1])].info;
  if (!a.shape || !b.shape || a.shape->size() < 3 || a.shape->size() != b.shape->size()) return -1;
  auto name = [](const ValueInfo& i, size_t d) { return d < i.dim_names.size() ? i.dim_names[d] : std::string(); };
  auto per_channel = [&](const ValueInfo& x, const ValueInfo& sc) {
    const Shape &xs = *x.shape, &ss = *sc.shape;
    if (xs[1] <= 0 || ss[1] != xs[1]) return false;
    const bool same_n = ss[0] == 1 || (ss[0] > 0 && ss[0] == xs[0]) || (ss[0] < 0 && !name(sc, 0).empty() && name(sc, 0) == name(x, 0));
    if (!same_n) return false;
    bool spatial_one = true, spatial_differs = false;
    for (size_t d = 2; d < ss.size(); ++d) {
      spatial_one = spatial_one && ss[d] == 1;
      spatial_differs = spatial_differs || xs[d] != 1;
    }
    return spatial_one && spatial_differs;
  };
  if (per_channel(a, b)) return 1;
  if (per_channel(b, a)) return 0;
  return -1;
}

// True when `next` is a per-channel Mul (channel_scale) reading `last`'s result: a step of the
// chain in its blocked layout, instead of the region's end and a reorder each way.
bool chains_scale(const Graph& g, const Node& last, const Node& next) {
  return channel_scale(g, next) >= 0 && (produces(last, next.inputs[0]) || produces(last, next.inputs[1]));
}

// A step that may follow a chain's step (a Conv with its post-ops, a pool, a Scale, a Concat or a
// Split): the next Conv, pool, Scale, Concat or Split.
bool chains_step(const Graph& g, const Node& last, const Node& next) {
  return chains_conv(g, last, next) || chains_pool(g, last, next) || chains_scale(g, last, next) ||
         chains_copy(g, last, next);
}

// True when `next` adds a bias to `matmul`'s result: an Add whose other operand is a constant
// float32 holding one value per output column (shape [N], or [1, ..., N] no longer than the
// result), N the result's last dim, known; both operands of the MatMul at least matrices. It
// becomes the bias of oneDNN's matmul, added in the kernel instead of in a pass of its own.
bool matmul_bias(const Graph& g, const Node& matmul, const Node& next) {
  if (matmul.op != Op::MatMul || matmul.outputs.size() != 1 || next.op != Op::Add || next.inputs.size() != 2 ||
      next.outputs.size() != 1)
    return false;
  const int mine = matmul.outputs[0];
  if ((next.inputs[0] == mine) == (next.inputs[1] == mine)) return false;  // exactly one operand
  const Tensor* bias = constant_of(g, next.inputs[0] == mine ? next.inputs[1] : next.inputs[0]);
  auto rank = [&](int v) {
    if (v < 0) return size_t(0);
    const ValueInfo& i = g.values[size_t(v)].info;
    return i.shape ? i.shape->size() : size_t(0);
  };
  const ValueInfo& out = g.values[size_t(mine)].info;
  if (!bias || bias->dtype() != DType::Float32 || !is_float32(g, mine) || !out.shape || rank(matmul.inputs[0]) < 2 ||
      rank(matmul.inputs[1]) < 2 || bias->rank() == 0 || bias->rank() > out.shape->size())
    return false;
  const int64_t n = out.shape->back();
  if (n <= 0 || bias->shape().back() != n) return false;
  for (size_t d = 0; d + 1 < bias->shape().size(); ++d)
    if (bias->shape()[d] != 1) return false;
  return true;
}

// The MatMul whose bias `add` is (matmul_bias), or nullptr.
const Node* biased_matmul(const Graph& g, const Node& add) {
  if (add.op != Op::Add) return nullptr;
  for (int v : add.inputs)
    if (const Node* p = producer_of(g, v); p && matmul_bias(g, *p, add)) return p;
  return nullptr;
}

}  // namespace

bool is_library_op(Op op) {
  return op == Op::MatMul || op == Op::Gemm || op == Op::Conv || op == Op::MaxPool || op == Op::AveragePool ||
         op == Op::ConvTranspose || op == Op::LSTM || op == Op::GRU || op == Op::RNN;
}

std::string can_compile(const Graph& g, const Node& node) {
#ifdef TERRACE_HAVE_DNNL
  std::vector<DType> dtypes;
  std::vector<std::optional<size_t>> ranks;
  for (int v : node.inputs) {
    if (v < 0) continue;
    const ValueInfo& info = g.values[size_t(v)].info;
    if (info.kind != ValueKind::Tensor || !info.dtype)
      return "input '" + g.values[size_t(v)].name + "' has no known tensor dtype";
    dtypes.push_back(*info.dtype);
    ranks.push_back(info.shape ? std::optional(info.shape->size()) : std::nullopt);
  }
  if (node.op == Op::ConvTranspose) return jit::dnnl_deconv_can_compile(node, dtypes, ranks);
  if (node.op == Op::LSTM || node.op == Op::GRU || node.op == Op::RNN) return jit::dnnl_rnn_can_compile(node, dtypes, ranks);
  return jit::dnnl_can_compile(node, dtypes, ranks);
#else
  (void)g;
  return std::string("tier 1 was built without oneDNN, which runs ") + op_name(node.op);
#endif
}

// A library region grows from its op: a MatMul takes a bias Add and then the activation after
// them, a Gemm the activation after it; a Conv takes activations, the next Conv, pool, Scale,
// channel Concat or Split, and a residual Add after a Conv or its activation; a pool, Scale,
// Concat or Split takes the next of those steps. An activation or an Add becomes a post-op of the
// op before it, so it must be that op's result's only reader (the partition also asks about
// readers that are not).
bool absorbs(const Graph& g, const Node& last, const Node& next) {
  if (!channel_split(g, last).empty() || channel_concat(g, last)) return chains_step(g, last, next);
  if (last.outputs.size() != 1 || last.outputs[0] < 0) return false;
  const bool activation = activation_of(g, next).has_value() && only_reader(g, last.outputs[0]);
  if (is_pool(last.op)) return chains_step(g, last, next);  // YOLO's SPPF: pool, pool, pool, Concat
  if (last.op == Op::MatMul) return activation || (matmul_bias(g, last, next) && only_reader(g, last.outputs[0]));
  if (last.op == Op::Gemm || last.op == Op::ConvTranspose) return activation;
  if (last.op == Op::Conv)
    return activation || starts_swish(g, last, next) || chains_step(g, last, next) ||
           (chains_add(g, last, next) && only_reader(g, last.outputs[0]));
  if (channel_scale(g, last) >= 0) return chains_step(g, last, next);  // a Scale step ends like a pool
  // `last` is an activation or an Add already in a Conv's region: the next Conv, or an
  // activation after an Add; a SiLU's Sigmoid takes its Mul.
  if (last.op == Op::Sigmoid && swish_mul(g, last) == &next) return true;
  const Node* x_of = last.op == Op::Mul ? swish_sigmoid(g, last) : &last;  // a SiLU's Mul: its Sigmoid
  const Node* before = x_of ? producer_of(g, x_of->inputs.empty() ? -1 : x_of->inputs[0]) : nullptr;
  if (last.op == Op::Add)
    return activation || (!biased_matmul(g, last) && (starts_swish(g, last, next) || chains_step(g, last, next)));
  const bool after_activation = (activation_of(g, last) || x_of != &last) && x_of && before;
  if (!after_activation || (before->op != Op::Conv && before->op != Op::Add)) return false;
  // A residual Add after a Conv's activation (YOLO's bottleneck: Conv, SiLU, Add): a sum post-op
  // after the eltwise one, where the Conv has no sum yet.
  if (before->op == Op::Conv && chains_add(g, last, next) && only_reader(g, last.outputs[0])) return true;
  return chains_step(g, last, next);
}

// The allowance of a library region, computed op by op on the interpreter's values of the
// region's own intermediates. For y = op(a, b, c) computed in fp32 from a compiled a' with
// |a' - a| <= E_a (b and c: region inputs, exact):
//   |y' - y| <= gamma_K (|B| |a'| + |C|) + |B| E_a <= |B| (gamma_K |a| + (1 + gamma_K) E_a) + gamma_K |C|,
// one run of the op on magnitudes (|B|, |C| for the weights and bias, |alpha|, |beta|), with
// gamma_K = K u / (1 - K u), u = 2^-24, K the reduction length plus 2 (the bias, the scaling and
// the interpreter's own rounding of its double result). For a region of one op this is the
// classic gamma_K (|A| |B| + |C|). Relu and Clip are monotone and 1-Lipschitz: the bound passes
// through them. An Add of a' and an exact r rounds once: E = (1 + 2u) E_a + 2u |a + r|. A wrong
// kernel is off by the size of the terms, far outside.
namespace {

// Whether a chain may run this Conv on Winograd's F(2x2, 3x3) (jit/cpu/winograd_conv.h): a 3x3 of
// stride 1 and pads 1, one group, no dilation, channels winograd_enabled takes. Its allowance then
// adds winograd_rounding_bound (sound whichever kernel runs it).
bool may_run_winograd(const Node& node, const Tensor& x, const Tensor& w) {
  if (node.op != Op::Conv || x.shape().size() != 4 || w.shape().size() != 4 || w.shape()[2] != 3 || w.shape()[3] != 3 ||
      w.dtype() != DType::Float32 || !jit::winograd_enabled(x.shape()[1], w.shape()[0]))
    return false;
  const ops::ConvGeometry g = ops::conv_geometry(node, x.shape(), w.shape());
  for (size_t d = 0; d < 2; ++d)
    if (g.strides[d] != 1 || g.dilations[d] != 1 || g.pads_begin[d] != 1 || g.pads_end[d] != 1) return false;
  return g.group == 1;
}


// A recurrent region's bound: the recurrence's own (jit/cpu/dnnl_rnn.h), per output.
std::vector<Tensor> recurrent_allowance(const Graph& g, const Region& region, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> out(region.outputs.size());
  const Node& first = g.nodes[size_t(region.nodes[0])];
  std::vector<Tensor> node_inputs;
  for (int v : first.inputs) node_inputs.push_back(v >= 0 ? inputs[region_input_index(region, v)] : Tensor());
  const std::vector<Tensor> bounds = jit::dnnl_rnn_error_bound(first, node_inputs);
  for (size_t j = 0; j < region.outputs.size(); ++j)
    for (size_t k = 0; k < first.outputs.size() && k < bounds.size(); ++k)
      if (first.outputs[k] == region.outputs[j]) out[j] = bounds[k];
  return out;
}

Tensor abs64(const Tensor& t, double scale) {
  Tensor r = t.cast(DType::Float64);
  double* p = r.data<double>();
  for (int64_t i = 0; i < r.numel(); ++i) p[i] = scale * std::abs(p[i]);
  return r;
}

// The walk of a library region op by op: each value as the interpreter computes it, and the bound
// (float64) on the compiled version's error in it.
struct BoundWalk {
  BoundWalk(const Graph& graph, const Region& r, const std::vector<Tensor>& in) : g(graph), region(r), inputs(in) {}
  const Graph& g;
  const Region& region;
  const std::vector<Tensor>& inputs;
  const double u = std::ldexp(1.0, -24);
  std::map<int, Tensor> value, bound;  // per value id

  const Tensor& value_of(int v) const {
    if (auto it = value.find(v); it != value.end()) return it->second;
    return inputs[region_input_index(region, v)];
  }

  // A max moves by at most its window's largest input error: the max of the bounds (none for a
  // region input: oneDNN's max is one of the inputs, as the interpreter's). An average of K taps:
  // the average of the bounds, plus its own rounding, gamma_{K+2} times the average of |a|.
  Tensor pool(const Node& node) const {
    const Tensor& a = value_of(node.inputs[0]);
    auto e = bound.find(node.inputs[0]);
    RValue eb(e != bound.end() ? e->second : Tensor::zeros(DType::Float64, a.shape()));
    Tensor b = interpret_node(node, {&eb}).at(0).tensor;
    if (node.op != Op::AveragePool && node.op != Op::GlobalAveragePool) return b;
    int64_t taps = 1;
    if (node.op == Op::GlobalAveragePool)
      for (size_t d = 2; d < a.shape().size(); ++d) taps *= a.shape()[d];
    else
      for (int64_t k : node.attr_ints("kernel_shape", {})) taps *= k;
    const double K = 2 + double(taps);
    const double gamma = K * u / (1 - K * u);
    RValue mag(abs64(a, 1.0));
    const Tensor m = interpret_node(node, {&mag}).at(0).tensor;
    for (int64_t i = 0; i < b.numel(); ++i) b.data<double>()[i] += gamma * m.data<double>()[i];
    return b;
  }

  // A product of K terms: gamma_{K+2} |a| |b| + (1 + gamma) E_a |b| (+ gamma |c|), the node run on
  // magnitudes; plus Winograd's F(2x2, 3x3) rounding where it may run.
  Tensor product(const Node& node) const {
    const Tensor& a = value_of(node.inputs[0]);
    const double K = double(reduction_length(node, a.shape(), value_of(node.inputs[1]).shape())) + 2;
    const double gamma = K * u / (1 - K * u);
    Tensor z = abs64(a, gamma);  // gamma |a| + (1 + gamma) E_a
    if (auto e = bound.find(node.inputs[0]); e != bound.end())
      for (int64_t i = 0; i < z.numel(); ++i) z.data<double>()[i] += (1 + gamma) * e->second.data<double>()[i];
    Node magnitude = node;
    for (const char* key : {"alpha", "beta"})
      if (auto at = magnitude.attrs.find(key); at != magnitude.attrs.end()) at->second.f = std::abs(at->second.f);
    std::vector<RValue> args;
    args.reserve(node.inputs.size());
    std::vector<const RValue*> ptrs;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      if (node.inputs[i] < 0) { ptrs.push_back(nullptr); continue; }
      args.emplace_back(i == 0 ? z : abs64(value_of(node.inputs[i]), i == 2 ? gamma : 1.0));
      ptrs.push_back(&args.back());
    }
    Tensor b = interpret_node(magnitude, ptrs).at(0).tensor;
    if (may_run_winograd(node, a, value_of(node.inputs[1]))) {
      Tensor za = abs64(a, 1.0);
      if (auto e = bound.find(node.inputs[0]); e != bound.end())
        for (int64_t i = 0; i < za.numel(); ++i) za.data<double>()[i] += e->second.data<double>()[i];
      const Tensor w = jit::winograd_rounding_bound(za, value_of(node.inputs[1]));
      for (int64_t i = 0; i < w.numel(); ++i) b.data<double>()[i] += w.data<double>()[i];
    }
    return b;
  }

  // A residual Add: E = (1 + 2u) (E_a + E_b) + 2u |a + b|, either bound possibly 0; sets the
  // result's value too.
  Tensor add(const Node& node) {
    const int result = node.outputs[0];
    RValue x(value_of(node.inputs[0])), y(value_of(node.inputs[1]));
    value[result] = interpret_node(node, {&x, &y}).at(0).tensor;
    const float* s = value[result].data<float>();
    Tensor e = Tensor::zeros(DType::Float64, value[result].shape());
    double* pe = e.data<double>();
    for (int v : {node.inputs[0], node.inputs[1]})
      if (auto b = bound.find(v); b != bound.end())
        for (int64_t i = 0; i < e.numel(); ++i) pe[i] += b->second.data<double>()[i];
    for (int64_t i = 0; i < e.numel(); ++i) pe[i] = (1 + 2 * u) * pe[i] + 2 * u * std::abs(double(s[i]));
    return e;
  }

  // A Scale's product a' b', rounded once, against the interpreter's rounded a b:
  // E = (1 + 2u) (|a| E_b + E_a |b| + E_a E_b) + 2u |a b|, broadcast as the Mul broadcasts
  // (the node run on float64 magnitudes); sets the result's value too.
  Tensor mul(const Node& node) {
    const int result = node.outputs[0];
    RValue x(value_of(node.inputs[0])), y(value_of(node.inputs[1]));
    value[result] = interpret_node(node, {&x, &y}).at(0).tensor;
    auto error = [&](int v) {
      auto e = bound.find(v);
      return e != bound.end() ? e->second : Tensor::zeros(DType::Float64, value_of(v).shape());
    };
    RValue a(abs64(value_of(node.inputs[0]), 1.0)), b(abs64(value_of(node.inputs[1]), 1.0));
    RValue ea(error(node.inputs[0])), eb(error(node.inputs[1]));
    const Tensor t1 = interpret_node(node, {&a, &eb}).at(0).tensor, t2 = interpret_node(node, {&ea, &b}).at(0).tensor,
                 t3 = interpret_node(node, {&ea, &eb}).at(0).tensor, ab = interpret_node(node, {&a, &b}).at(0).tensor;
    Tensor e = Tensor::empty(DType::Float64, value[result].shape());
    double* pe = e.data<double>();
    for (int64_t i = 0; i < e.numel(); ++i)
      pe[i] = (1 + 2 * u) * (t1.data<double>()[i] + t2.data<double>()[i] + t3.data<double>()[i]) + 2 * u * ab.data<double>()[i];
    return e;
  }

  // A Split or Concat: the node run on the values, and on the bounds (zero where a value has
  // none), for its results' values and bounds.
  void copy(const Node& node) {
    std::vector<RValue> values, bounds;
    values.reserve(node.inputs.size());
    bounds.reserve(node.inputs.size());
    std::vector<const RValue*> v_ptrs, b_ptrs;
    for (int v : node.inputs) {
      if (v < 0) {
        v_ptrs.push_back(nullptr);
        b_ptrs.push_back(nullptr);
        continue;
      }
      values.emplace_back(value_of(v));
      v_ptrs.push_back(&values.back());
      auto e = bound.find(v);
      // The split sizes (an int64 input) are read as given; float values' bounds in float64.
      bounds.emplace_back(e != bound.end()                          ? e->second
                          : value_of(v).dtype() == DType::Float32 ? Tensor::zeros(DType::Float64, value_of(v).shape())
                                                                   : value_of(v));
      b_ptrs.push_back(&bounds.back());
    }
    std::vector<RValue> vs = interpret_node(node, v_ptrs), bs = interpret_node(node, b_ptrs);
    for (size_t j = 0; j < node.outputs.size(); ++j) {
      if (node.outputs[j] < 0) continue;
      value[node.outputs[j]] = vs.at(j).tensor;
      bound[node.outputs[j]] = bs.at(j).tensor;
    }
  }

  // The interpreter's value of the node's result, for the ops after it.
  void set_value(const Node& node) {
    std::vector<RValue> args;
    args.reserve(node.inputs.size());
    std::vector<const RValue*> ptrs;
    for (int v : node.inputs) {
      if (v < 0) { ptrs.push_back(nullptr); continue; }
      args.emplace_back(value_of(v));
      ptrs.push_back(&args.back());
    }
    value[node.outputs[0]] = interpret_node(node, ptrs).at(0).tensor;
  }
};

}  // namespace

std::vector<Tensor> error_allowance(const Graph& g, const Region& region, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> out(region.outputs.size());
  const Node& first = g.nodes[size_t(region.nodes[0])];
  if (!is_library_op(first.op)) return out;
  if (first.op == Op::LSTM || first.op == Op::GRU || first.op == Op::RNN) return recurrent_allowance(g, region, inputs);
  BoundWalk w(g, region, inputs);
  // Each value and bound is released after the region's last reader of it (a region output's bound
  // is kept): a ResNet-50 chain's intermediates in float64 were most of its peak memory.
  std::map<int, size_t> last_read;
  for (size_t k = 0; k < region.nodes.size(); ++k)
    for (int v : g.nodes[size_t(region.nodes[k])].inputs) last_read[v] = k;
  auto release_before = [&](size_t k) {
    auto dead = [&](int v) {
      auto it = last_read.find(v);
      return it == last_read.end() || it->second < k;
    };
    std::erase_if(w.value, [&](const auto& e) { return dead(e.first); });
    std::erase_if(w.bound, [&](const auto& e) {
      return dead(e.first) && std::find(region.outputs.begin(), region.outputs.end(), e.first) == region.outputs.end();
    });
  };
  for (size_t k = 0; k < region.nodes.size(); ++k) {
    release_before(k);
    const Node& node = g.nodes[size_t(region.nodes[k])];
    const int result = node.outputs[0];
    if (node.op == Op::Split || node.op == Op::Concat) {  // copies: each bound moves with its value
      w.copy(node);
      continue;
    }
    if (node.op == Op::Add) {
      w.bound[result] = w.add(node);  // its value set too
      continue;
    }
    if (channel_scale(g, node) >= 0) {
      w.bound[result] = w.mul(node);  // its value set too
      continue;
    }
    if (is_pool(node.op)) w.bound[result] = w.pool(node);
    else if (is_library_op(node.op)) w.bound[result] = w.product(node);
    else if (const Node* sigmoid = swish_sigmoid(g, node)) {  // a SiLU: the swish of the Sigmoid's input
      const int x = sigmoid->inputs[0];
      w.bound[result] = jit::dnnl_activation_bound({jit::DnnlActivation::Kind::Swish}, w.value_of(x), w.bound.at(x));
    } else {
      const std::optional<jit::DnnlActivation> act = activation_of(g, node);
      TERRACE_ASSERT(act.has_value(), "tier 1: a library region holds a node that is no activation");
      // Relu and Clip pass the bound on; the others scale it by their slope and add their own
      // rounding (jit/cpu/dnnl_activation.h).
      w.bound[result] = jit::dnnl_activation_bound(*act, w.value_of(node.inputs[0]), w.bound.at(node.inputs[0]));
    }
    if (k + 1 == region.nodes.size()) break;
    w.set_value(node);
  }
  for (size_t j = 0; j < region.outputs.size(); ++j) out[j] = w.bound.at(region.outputs[j]);
  return out;
}

namespace {

// The region's outputs as new slots after its inputs, in order.
void add_output_slots(LibraryPart& part, std::vector<kernels::TensorSig>& slots) {
  for (const Shape& s : part.primitive->output_shapes()) {
    slots.push_back({DType::Float32, s});
    part.slots.push_back(int(slots.size()) - 1);
  }
}

// LSTM, GRU or RNN: several outputs (jit/cpu/dnnl_rnn.h).
LibraryPart recurrent_part(const Graph& g, const Region& region, const Node& node,
                           std::vector<kernels::TensorSig>& slots) {
  LibraryPart part;
  part.node = node.describe();
  std::vector<bool> present;
  std::vector<Shape> shapes;
  std::vector<const Tensor*> constants;
  for (int v : node.inputs) {
    present.push_back(v >= 0);
    if (v < 0) continue;
    const size_t slot = region_input_index(region, v);
    shapes.push_back(slots[slot].shape);
    constants.push_back(constant_of(g, v));
    part.slots.push_back(int(slot));
  }
  std::vector<int> outputs;  // per region output: which of the node's
  for (int v : region.outputs) {
    auto it = std::find(node.outputs.begin(), node.outputs.end(), v);
    TERRACE_ASSERT(it != node.outputs.end(), "tier 1: a recurrent op's region outputs a value it does not produce");
    outputs.push_back(int(it - node.outputs.begin()));
  }
  part.primitive = jit::make_dnnl_rnn(node, present, shapes, constants, outputs);
  add_output_slots(part, slots);
  return part;
}

// A product, ConvTranspose or pool alone, with a MatMul's bias Add and an activation.
LibraryPart single_part(const Graph& g, const Region& region, const Node& node, std::vector<kernels::TensorSig>& slots) {
  TERRACE_ASSERT(region.nodes.size() <= 3 && region.outputs.size() == 1 &&
                     region.outputs[0] == g.nodes[size_t(region.nodes.back())].outputs[0],
                 "tier 1: a product's or pool's region holds it, a MatMul's bias and an activation, one output");
  LibraryPart part;
  part.node = node.describe();
  // A MatMul's bias Add: its constant operand becomes the primitive's third input.
  int bias = -1;
  size_t next = 1;
  if (region.nodes.size() > 1) {
    const Node& add = g.nodes[size_t(region.nodes[1])];
    if (node.op == Op::MatMul && matmul_bias(g, node, add)) {
      bias = add.inputs[0] == node.outputs[0] ? add.inputs[1] : add.inputs[0];
      next = 2;
    }
  }
  std::optional<jit::DnnlActivation> act;
  if (region.nodes.size() > next) act = activation_of(g, g.nodes[size_t(region.nodes[next])]);
  TERRACE_ASSERT(region.nodes.size() == next || (region.nodes.size() == next + 1 && act),
                 "tier 1: a library region's node after its op (and bias) is no activation");
  std::vector<Shape> shapes;
  std::vector<const Tensor*> constants;
  std::vector<int> reads(node.inputs.begin(), node.inputs.end());
  if (bias >= 0) reads.push_back(bias);
  for (int v : reads) {
    if (v < 0) continue;
    const size_t slot = region_input_index(region, v);
    shapes.push_back(slots[slot].shape);
    constants.push_back(constant_of(g, v));
    part.slots.push_back(int(slot));
  }
  part.primitive = node.op == Op::ConvTranspose
                       ? jit::make_dnnl_deconvolution(node, shapes, constants, act.value_or(jit::DnnlActivation{}))
                       : jit::make_dnnl_primitive(node, shapes, constants, act.value_or(jit::DnnlActivation{}));
  add_output_slots(part, slots);
  return part;
}

// A Conv region: a chain of convolutions (and pools) with their activations and residual Adds in
// oneDNN's blocked layouts.
LibraryPart chain_part(const Graph& g, const Region& region, const Node& node, std::vector<kernels::TensorSig>& slots) {
  LibraryPart part;
  part.node = node.describe();
  std::vector<Shape> shapes;
  std::vector<const Tensor*> constants;
  for (size_t i = 0; i < region.inputs.size(); ++i) {
    shapes.push_back(slots[i].shape);
    constants.push_back(constant_of(g, region.inputs[i]));
    part.slots.push_back(int(i));
  }
  std::vector<jit::DnnlChainOp> ops;
  std::map<int, int> op_of;  // value id -> the op (index) that produces it
  int previous = -1;         // the value the last op produced
  // A post-op (activation, residual Add) extends the step of the op just before it, so it must
  // read that op's result: a region whose branches interleave is refused, not misread.
  auto follows = [&](const Node& op, bool reads_previous) {
    TERRACE_CHECK(reads_previous, CompileFailed, op.describe(),
                  ": tier 1 chains a post-op right after the op whose result it reads");
  };
  // A chain input's index, or -1 - k for op k's result.
  auto index = [&](int v) {
    auto it = op_of.find(v);
    return it != op_of.end() ? -1 - it->second : int(region_input_index(region, v));
  };
  for (int n : region.nodes) {
    const Node& op = g.nodes[size_t(n)];
    jit::DnnlChainOp c;
    c.node = op;
    if (op.op == Op::Conv || is_pool(op.op)) {
      c.kind = op.op == Op::Conv ? jit::DnnlChainOp::Kind::Conv : jit::DnnlChainOp::Kind::Pool;
      for (int v : op.inputs)
        if (v >= 0) c.inputs.push_back(index(v));
    } else if (op.op == Op::Split) {  // one Slice per piece, each a step (its result)
      const std::vector<int64_t> sizes = channel_split(g, op);
      TERRACE_ASSERT(sizes.size() == op.outputs.size(), "tier 1: a chained Split is no channel split");
      int64_t begin = 0;
      for (size_t j = 0; j < sizes.size(); begin += sizes[j++]) {
        if (op.outputs[j] < 0) continue;
        jit::DnnlChainOp piece{jit::DnnlChainOp::Kind::Slice, op, {index(op.inputs[0])}, {}, begin, begin + sizes[j]};
        op_of[op.outputs[j]] = int(ops.size());
        ops.push_back(std::move(piece));
      }
      previous = -1;  // no post-op follows a Split
      continue;
    } else if (op.op == Op::Concat) {
      c.kind = jit::DnnlChainOp::Kind::Concat;
      for (int v : op.inputs) c.inputs.push_back(index(v));
    } else if (op.op == Op::Add) {
      c.kind = jit::DnnlChainOp::Kind::Add;
      follows(op, op.inputs[0] == previous || op.inputs[1] == previous);
      c.inputs.push_back(index(op.inputs[0] == previous ? op.inputs[1] : op.inputs[0]));
    } else if (swish_mul(g, op)) {
      continue;  // a SiLU's Sigmoid: its Mul is the chain's swish
    } else if (channel_scale(g, op) >= 0) {
      c.kind = jit::DnnlChainOp::Kind::Scale;
      c.inputs = {index(op.inputs[0]), index(op.inputs[1])};
    } else if (const Node* sigmoid = swish_sigmoid(g, op)) {
      follows(op, sigmoid->inputs[0] == previous);
      c.kind = jit::DnnlChainOp::Kind::Activation;
      c.activation = jit::DnnlActivation{jit::DnnlActivation::Kind::Swish};
    } else {
      follows(op, op.inputs[0] == previous);
      c.kind = jit::DnnlChainOp::Kind::Activation;
      std::optional<jit::DnnlActivation> act = activation_of(g, op);
      TERRACE_ASSERT(act.has_value(), "tier 1: a convolution region holds a node that is no activation");
      c.activation = *act;
    }
    op_of[op.outputs[0]] = int(ops.size());
    ops.push_back(std::move(c));
    previous = op.outputs[0];
  }
  std::vector<int> outputs;
  for (int v : region.outputs) outputs.push_back(op_of.at(v));
  part.primitive = jit::make_dnnl_conv_chain(ops, shapes, constants, outputs);
  add_output_slots(part, slots);
  return part;
}

}  // namespace

// A MatMul or Gemm (and the activation it absorbed): one oneDNN primitive. A Conv region: a chain
// of convolutions with their activations and residual Adds in oneDNN's blocked layouts. Inputs
// that are initializers (and not graph inputs) are handed over at compile time, so that constant
// weights are laid out once.
LibraryPart compile_library(const Graph& g, const Region& region, std::vector<kernels::TensorSig>& slots) {
  const Node& node = g.nodes[size_t(region.nodes[0])];
  if (node.op == Op::LSTM || node.op == Op::GRU || node.op == Op::RNN) return recurrent_part(g, region, node, slots);
  TERRACE_CHECK(node.outputs.size() == 1 && node.outputs[0] >= 0, NotImplemented, node.describe(),
                ": tier 1 runs single-output library ops");
  if (node.op != Op::Conv && !(is_pool(node.op) && region.nodes.size() > 1))  // a pool chains with Convs
    return single_part(g, region, node, slots);
  return chain_part(g, region, node, slots);
}

namespace {

// A product of two computed operands of one rank >= 3 and equal leading (batch) dims, the symbol
// in their matrices' dims only: one batched primitive taking m, k and n per call.
LibraryPart batched_part(const Graph& g, const Region& region, const Node& node,
                         std::vector<kernels::TensorSig>& slots, const std::vector<std::pair<int, int>>& positions,
                         std::string& why) {
  LibraryPart part;
  const size_t a = region_input_index(region, node.inputs[0]), b = region_input_index(region, node.inputs[1]);
  const Shape as = slots[a].shape, bs = slots[b].shape;
  const size_t r = as.size();
  // oneDNN must never see a zero-sized dim (make_matmul's rule): such shapes keep static versions.
  if (r < 3 || bs.size() != r || shape_numel(as) == 0 || shape_numel(bs) == 0 || !is_float32(g, node.inputs[0]) ||
      !is_float32(g, node.inputs[1]) ||
      !std::equal(as.begin(), as.end() - 2, bs.begin()) || bs[r - 2] != as[r - 1]) {
    why = "a product of computed operands that is no batched product of equal batch dims: " + node.describe() +
          "'s oneDNN primitive is made for one shape";
    return part;
  }
  for (auto [i, d] : positions)
    if ((size_t(i) != a && size_t(i) != b) || size_t(d) + 2 < r) {
      why = "a batched product whose symbolic dim is a batch dim: " + node.describe() +
            "'s oneDNN primitive is made for one shape";
      return part;
    }
  part.node = node.describe();
  part.slots = {int(a), int(b)};
  part.primitive = jit::make_batched_matmul(node, shape_numel(Shape(as.begin(), as.end() - 2)));
  Shape out(as.begin(), as.end() - 1);
  out.push_back(bs.back());
  slots.push_back({DType::Float32, out});
  part.slots.push_back(int(slots.size()) - 1);
  return part;
}

}  // namespace

LibraryPart compile_rows_matmul(const Graph& g, const Region& region, std::vector<kernels::TensorSig>& slots,
                                const std::vector<std::pair<int, int>>& positions, std::string& why) {
  LibraryPart part;
  const Node& node = g.nodes[size_t(region.nodes[0])];
  const std::string one_shape = node.describe() + "'s oneDNN primitive is made for one shape";
  if (node.op != Op::MatMul) {
    why = "a library region: " + one_shape;
    return part;
  }
  const bool bias = region.nodes.size() == 2 && matmul_bias(g, node, g.nodes[size_t(region.nodes[1])]);
  if (region.nodes.size() != (bias ? 2u : 1u)) {
    why = "a MatMul region with an activation: " + one_shape;
    return part;
  }
  const Tensor* w = constant_of(g, node.inputs[1]);
  const size_t a = region_input_index(region, node.inputs[0]);
  const Shape& as = slots[a].shape;
  if (!w && !bias) return batched_part(g, region, node, slots, positions, why);
  if (!w || w->dtype() != DType::Float32 || w->rank() != 2 || as.size() < 2 || !is_float32(g, node.inputs[0]) ||
      w->dim(0) != as.back() || w->numel() == 0 || shape_numel(as) == 0) {
    why = "a MatMul whose weights are no constant float32 matrix: " + one_shape;
    return part;
  }
  for (auto [i, d] : positions)
    if (size_t(i) != a || size_t(d) + 1 == as.size()) {
      why = "a MatMul whose symbolic dim is not a row of its first operand: " + one_shape;
      return part;
    }
  part.node = node.describe();
  part.slots = {int(a), int(region_input_index(region, node.inputs[1]))};
  if (bias) {
    const Node& add = g.nodes[size_t(region.nodes[1])];
    part.slots.push_back(int(region_input_index(region, add.inputs[0] == node.outputs[0] ? add.inputs[1] : add.inputs[0])));
  }
  part.primitive = jit::make_rows_matmul(node, as.back(), w->dim(1), bias);
  Shape out(as.begin(), as.end() - 1);
  out.push_back(w->dim(1));
  slots.push_back({DType::Float32, out});
  part.slots.push_back(int(slots.size()) - 1);
  return part;
}

}  // namespace terrace::cpu_library
#endif  // TERRACE_HAVE_CPU_JIT

