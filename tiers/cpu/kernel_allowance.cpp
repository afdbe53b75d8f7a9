// The error allowance of tier 1's generated regions (tiers/cpu/kernel_allowance.h).
//
// Each float32 value v of the region gets a bound E_v on |v' - v| (v' tier 1's value, v the
// interpreter's), in float64, from the interpreter's own intermediates; u = 2^-24. Both sides
// round an op's exact result once (libm and the prelude approximate it instead), so an op whose
// inputs are off by E_a, E_b is off by at most the change of its exact result over those
// intervals plus both sides' own error:
//  - data movement moves the bounds with the data (the op run on them);
//  - a + b: (1 + 2u)(E_a + E_b) + 2u |r|; a b: (1 + 2u)(|a| E_b + E_a |b| + E_a E_b) + 2u |r|;
//    a / b: (1 + 2u)(E_a + |r| E_b) / (|b| - E_b) + 2u |r|, none where |b| <= E_b; max and min:
//    the largest bound (they are 1-Lipschitz in each input). The 2u |r| also covers a
//    multiply-add the compiler contracts (one rounding fewer on tier 1's side);
//  - a monotone f (Tanh, Exp, Sigmoid, Sqrt, Reciprocal): max |f(x +- E) - f(x)| in double, plus
//    both sides' own relative error at |r|: the prelude's (kernels/prelude_accuracy.h) or a
//    correctly rounded u, and the interpreter's libm or float formula, 2 ulp (4u); Neg, Abs and
//    Relu are exact and 1-Lipschitz: E passes;
//  - a sum of n terms, accumulated in double on both sides and rounded once:
//    (1 + 2u)(R(E) + 2 gamma_n R(|x|)) + 2u |r|, R the reduction run on float64 tensors,
//    gamma_n = n 2^-53 / (1 - n 2^-53) (each side's order of accumulation); a max or min of n
//    terms: the largest of their bounds.
// So a formula that cancels (a variance as E[x^2] - E[x]^2: magika's layer norm, where |x|^2 is
// 961 times the variance) gets the allowance its float32 evaluation needs, and a well-conditioned
// one stays within a few u of its values: a wrong kernel is off by far more.
#include "tiers/cpu/kernel_allowance.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <span>

#include "interp/interpreter.h"
#include "kernels/prelude_accuracy.h"

namespace terrace::cpu_kernels {
namespace {

constexpr double u = 0x1p-24;
constexpr double kLibmRel = 4 * u;  // the interpreter's tanhf, expf, float sigmoid: 2 ulp

enum class Rule { Move, Meta, Cast, Sum, Product, Quotient, Extremum, Monotone, Exact, Reduce, ReduceExtremum };

// How the walk carries bounds through `op`; nullopt: not modelled (the region gets no allowance).
std::optional<Rule> rule_of(Op op) {
  switch (op) {
    case Op::Reshape: case Op::Expand: case Op::Unsqueeze: case Op::Squeeze: case Op::Flatten:
    case Op::Slice: case Op::Transpose: case Op::Concat: case Op::Identity: case Op::Tile: case Op::Gather:
      return Rule::Move;
    case Op::Shape: case Op::Size: return Rule::Meta;
    case Op::Cast: return Rule::Cast;
    case Op::Add: case Op::Sub: return Rule::Sum;
    case Op::Mul: return Rule::Product;
    case Op::Div: return Rule::Quotient;
    case Op::Max: case Op::Min: return Rule::Extremum;
    case Op::Tanh: case Op::Exp: case Op::Sigmoid: case Op::Sqrt: case Op::Reciprocal: return Rule::Monotone;
    case Op::Neg: case Op::Abs: case Op::Relu: return Rule::Exact;
    case Op::ReduceSum: case Op::ReduceMean: return Rule::Reduce;
    case Op::ReduceMax: case Op::ReduceMin: return Rule::ReduceExtremum;
    default: return std::nullopt;
  }
}

// Both sides' own relative error of a monotone op at its result.
double own_rel(Op op) {
  switch (op) {
    case Op::Tanh: return kernels::kTanhMaxRel + kLibmRel;
    case Op::Exp: return kernels::kExpMaxRel + kLibmRel;
    case Op::Sigmoid: return kernels::kSigmoidMaxRel + kLibmRel;
    default: return 2 * u;  // Sqrt, Reciprocal: correctly rounded on both sides
  }
}

bool is_f32(const Tensor& t) { return t.defined() && t.dtype() == DType::Float32; }
bool is_floating(const Tensor& t) { return t.defined() && is_float(t.dtype()); }

Tensor abs64(const Tensor& t) {
  Tensor r = t.cast(DType::Float64);
  for (double& x : std::span(r.data<double>(), size_t(r.numel()))) x = std::abs(x);
  return r;
}

std::vector<Tensor> run(const Node& node, const std::vector<Tensor>& args) {
  std::vector<RValue> vals(args.begin(), args.end());
  std::vector<const RValue*> ptrs;
  for (const RValue& v : vals) ptrs.push_back(v.tensor.defined() ? &v : nullptr);
  std::vector<Tensor> out;
  for (RValue& r : interpret_node(node, ptrs)) out.push_back(r.tensor);
  return out;
}

// `t` broadcast to `shape` (ONNX's multidirectional broadcasting, as the elementwise ops read it).
Tensor expand(const Tensor& t, const Shape& shape) {
  if (t.shape() == shape) return t;
  Node n;
  n.op = Op::Expand;
  n.outputs = {0};
  return run(n, {t, Tensor::from_vector<int64_t>({int64_t(shape.size())}, std::vector<int64_t>(shape.begin(), shape.end()))})[0];
}

class Walk {
 public:
  Walk(const Region& r, const std::vector<Tensor>& in) : region_(r), inputs_(in) {}

  std::map<int, Tensor> value, bound;  // per value id: the interpreter's value, the bound on tier 1's error

  const Tensor& value_of(int v) const {
    if (auto it = value.find(v); it != value.end()) return it->second;
    auto at = std::find(region_.inputs.begin(), region_.inputs.end(), v);
    TERRACE_ASSERT(at != region_.inputs.end(), "tier 1 allowance: a node reads a value its region does not hold");
    return inputs_[size_t(at - region_.inputs.begin())];
  }
  // A region input's bound is 0: both sides read the same tensor.
  Tensor bound_of(int v) const {
    if (auto it = bound.find(v); it != bound.end()) return it->second;
    return Tensor::zeros(DType::Float64, value_of(v).shape());
  }

  // Runs the node for its values and sets its float outputs' bounds; false when the node is
  // outside the model (an op without a rule, a float type other than float32, a discrete result
  // of an inexact value, a quotient whose divisor's interval holds 0, a bound that overflows).
  bool step(const Node& node) {
    std::vector<Tensor> args;
    for (int v : node.inputs) args.push_back(v >= 0 ? value_of(v) : Tensor());
    const std::vector<Tensor> out = run(node, args);
    for (size_t k = 0; k < out.size() && k < node.outputs.size(); ++k)
      if (node.outputs[k] >= 0) value[node.outputs[k]] = out[k];
    const std::optional<Rule> rule = rule_of(node.op);
    if (!rule) return false;
    if (*rule == Rule::Meta) return true;
    bool inexact_in = false;  // a float input computed in the region (its bound may be nonzero)
    for (int v : node.inputs) inexact_in = inexact_in || (v >= 0 && bound.count(v));
    for (const Tensor& t : out) {
      if (is_floating(t) && !is_f32(t)) return false;
      if (t.defined() && !is_floating(t) && inexact_in && *rule != Rule::Move) return false;
    }
    const std::vector<Tensor> b = bounds(node, *rule, args, out);
    for (size_t k = 0; k < out.size() && k < node.outputs.size(); ++k) {
      if (!is_f32(out[k]) || node.outputs[k] < 0) continue;
      if (k >= b.size() || !b[k].defined()) return false;
      for (double x : std::span(b[k].data<double>(), size_t(b[k].numel())))
        if (!std::isfinite(x)) return false;
      bound[node.outputs[k]] = b[k];
    }
    return true;
  }

 private:
  const Region& region_;
  const std::vector<Tensor>& inputs_;

  // The bounds of the node's outputs (undefined for a non-float one); empty when unmodelled.
  std::vector<Tensor> bounds(const Node& node, Rule rule, const std::vector<Tensor>& args, const std::vector<Tensor>& out) {
    const Tensor& r = out[0];
    switch (rule) {
      case Rule::Move: {
        std::vector<Tensor> moved = args;
        for (size_t i = 0; i < args.size(); ++i)
          if (is_floating(args[i])) moved[i] = bound_of(node.inputs[i]);
        std::vector<Tensor> b = run(node, moved);
        for (size_t k = 0; k < b.size(); ++k)
          if (!is_floating(out[k])) b[k] = Tensor();
        return b;
      }
      case Rule::Cast:  // float32 to float32 passes the bound; from an integer both sides convert alike
        return {is_floating(args[0]) ? bound_of(node.inputs[0]) : Tensor::zeros(DType::Float64, r.shape())};
      case Rule::Exact:
        return {bound_of(node.inputs[0])};
      case Rule::Monotone: return {monotone(node, args[0], bound_of(node.inputs[0]), r)};
      case Rule::Reduce: return {reduce(node, args, r)};
      case Rule::ReduceExtremum: {
        Node max = node;
        max.op = Op::ReduceMax;
        std::vector<Tensor> b = args;
        b[0] = bound_of(node.inputs[0]);
        return {run(max, b)[0]};
      }
      default: return elementwise(node, rule, args, r);
    }
  }

  // Add, Sub, Mul, Div, Max, Min, per element of the broadcast result.
  std::vector<Tensor> elementwise(const Node& node, Rule rule, const std::vector<Tensor>& args, const Tensor& r) {
    const Shape& shape = r.shape();
    std::vector<Tensor> mag, err;
    for (size_t i = 0; i < args.size(); ++i) {
      mag.push_back(expand(abs64(args[i]), shape));
      err.push_back(expand(bound_of(node.inputs[i]), shape));
    }
    const Tensor rv = abs64(r);
    Tensor e = Tensor::empty(DType::Float64, shape);
    double* pe = e.data<double>();
    const double* pr = rv.data<double>();
    auto m = [&](size_t i, int64_t k) { return mag[i].data<double>()[k]; };
    auto d = [&](size_t i, int64_t k) { return err[i].data<double>()[k]; };
    for (int64_t k = 0; k < e.numel(); ++k) {
      double v = 0;
      if (rule == Rule::Extremum) {
        for (size_t i = 0; i < args.size(); ++i) v = std::max(v, d(i, k));
        pe[k] = v;
        continue;
      }
      if (rule == Rule::Sum) v = d(0, k) + d(1, k);
      if (rule == Rule::Product) v = m(0, k) * d(1, k) + d(0, k) * m(1, k) + d(0, k) * d(1, k);
      if (rule == Rule::Quotient) {
        if (m(1, k) <= d(1, k)) return {};
        v = (d(0, k) + pr[k] * d(1, k)) / (m(1, k) - d(1, k));
      }
      pe[k] = (1 + 2 * u) * v + 2 * u * pr[k];
    }
    return {e};
  }

  // max |f(x +- E) - f(x)| in double, plus both sides' own error; undefined across a pole.
  Tensor monotone(const Node& node, const Tensor& x, const Tensor& ex, const Tensor& r) {
    Tensor lo = x.cast(DType::Float64), hi = x.cast(DType::Float64), mid = x.cast(DType::Float64);
    double *pl = lo.data<double>(), *ph = hi.data<double>();
    const double* pe = ex.data<double>();
    for (int64_t k = 0; k < lo.numel(); ++k) {
      pl[k] -= pe[k], ph[k] += pe[k];
      if (node.op == Op::Sqrt) pl[k] = std::max(pl[k], 0.0);
      if (node.op == Op::Reciprocal && pl[k] <= 0 && ph[k] >= 0 && pe[k] > 0) return Tensor();
    }
    const Tensor flo = run(node, {lo})[0], fhi = run(node, {hi})[0], fx = run(node, {mid})[0];
    Tensor e = Tensor::empty(DType::Float64, r.shape());
    const double rel = own_rel(node.op);
    for (int64_t k = 0; k < e.numel(); ++k) {
      const double f = fx.data<double>()[k];
      const double slope = std::max(std::abs(flo.data<double>()[k] - f), std::abs(fhi.data<double>()[k] - f));
      // The own error at the larger of |f(x)| and |f(x')|; the smallest normal for a subnormal result.
      e.data<double>()[k] = slope + rel * (std::abs(f) + slope) + 0x1p-126;
    }
    return e;
  }

  Tensor reduce(const Node& node, const std::vector<Tensor>& args, const Tensor& r) {
    const double n = r.numel() ? double(args[0].numel()) / double(r.numel()) : 0;
    const double gamma = n * 0x1p-53 / (1 - n * 0x1p-53);
    std::vector<Tensor> a = args;
    a[0] = bound_of(node.inputs[0]);
    Tensor e = run(node, a)[0];
    a[0] = abs64(args[0]);
    const Tensor mag = run(node, a)[0];
    for (int64_t k = 0; k < e.numel(); ++k) {
      double& v = e.data<double>()[k];
      v = (1 + 2 * u) * (v + 2 * gamma * mag.data<double>()[k]) + 2 * u * std::abs(double(r.data<float>()[k]));
    }
    return e;
  }
};

}  // namespace

std::vector<Tensor> error_allowance(const Graph& g, const Region& region, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> out(region.outputs.size());
  Walk w(region, inputs);
  // Each value and bound is released after the region's last reader of it (a region output's is
  // kept), as cpu_library's walk does.
  std::map<int, size_t> last_read;
  for (size_t k = 0; k < region.nodes.size(); ++k)
    for (int v : g.nodes[size_t(region.nodes[k])].inputs) last_read[v] = k;
  auto keep = [&](int v, size_t k) {
    auto it = last_read.find(v);
    return (it != last_read.end() && it->second >= k) ||
           std::find(region.outputs.begin(), region.outputs.end(), v) != region.outputs.end();
  };
  for (size_t k = 0; k < region.nodes.size(); ++k) {
    std::erase_if(w.value, [&](const auto& e) { return !keep(e.first, k); });
    std::erase_if(w.bound, [&](const auto& e) { return !keep(e.first, k); });
    if (!w.step(g.nodes[size_t(region.nodes[k])])) return out;
  }
  for (size_t j = 0; j < region.outputs.size(); ++j)
    if (auto it = w.bound.find(region.outputs[j]); it != w.bound.end()) out[j] = it->second;
  return out;
}

}  // namespace terrace::cpu_kernels
