// Constant folding: a node whose inputs are all constants (initializers, or none at all, as for
// Constant) is run once, here, by the interpreter's own kernel (interpret_node), and its results
// become initializers. So a folded graph computes exactly what the original computes. Not folded:
// random ops and training-mode Dropout (a different draw each call), nodes with bodies
// (If/Loop/Scan), results that are sequences or optionals, and results over the size cap
// (PassConfig::fold_max_bytes) that would make the model's constants grow. A node whose kernel
// fails stays, so that it fails at run time as it did before.
#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "interp/interpreter.h"
#include "tiers/passes/graph_edit.h"
#include "tiers/passes/passes.h"

namespace terrace::passes {
namespace {

bool random_op(Op op) {
  return op == Op::Bernoulli || op == Op::RandomNormal || op == Op::RandomNormalLike ||
         op == Op::RandomUniform || op == Op::RandomUniformLike;
}

// Ops whose result may be much larger than their inputs: folded only when their result's size
// is known before running them.
bool expanding_op(Op op) {
  switch (op) {
    case Op::ConstantOfShape: case Op::Expand: case Op::Tile: case Op::Range: case Op::Pad:
    case Op::Resize: case Op::Upsample: case Op::OneHot: case Op::EyeLike: case Op::MelWeightMatrix:
    case Op::BlackmanWindow: case Op::HammingWindow: case Op::HannWindow: case Op::DFT: case Op::STFT:
      return true;
    default:
      return false;
  }
}

bool dropout_in_training(const Graph& g, const Node& n) {
  if (n.inputs.size() < 3 || n.inputs[2] < 0) return false;
  const Tensor& t = constant(g, n.inputs[2]);
  return t.numel() == 1 && t.get_as_double(0) != 0;
}

// The bytes of a result whose shape is known statically (nullopt when it is not, or overflows).
std::optional<double> static_bytes(const Graph& g, const Node& n, int out) {
  const ValueInfo& info = g.values[size_t(out)].info;
  if (n.op == Op::ConstantOfShape && !n.inputs.empty() && n.inputs[0] >= 0) {
    const Tensor& shape = constant(g, n.inputs[0]);
    if (!is_integer(shape.dtype())) return std::nullopt;
    double count = 1;
    for (int64_t d : shape.to_int64_vector()) count *= double(std::max<int64_t>(d, 0));
    return count * double(info.dtype ? dtype_size(*info.dtype) : 8);
  }
  if (n.op == Op::Range && n.inputs.size() == 3) {
    const Tensor &start = constant(g, n.inputs[0]), &limit = constant(g, n.inputs[1]), &delta = constant(g, n.inputs[2]);
    if (start.numel() != 1 || limit.numel() != 1 || delta.numel() != 1 || start.dtype() == DType::String)
      return std::nullopt;
    const double d = delta.get_as_double(0);
    if (d == 0 || !std::isfinite(d)) return std::nullopt;
    const double count = std::ceil((limit.get_as_double(0) - start.get_as_double(0)) / d);
    if (!std::isfinite(count)) return std::nullopt;
    return std::max(count, 0.0) * double(dtype_size(start.dtype()));
  }
  const Shape* s = static_shape(g, out);
  if (!s || !info.dtype || *info.dtype == DType::String) return std::nullopt;
  double count = 1;
  for (int64_t d : *s) count *= double(d);
  return count * double(dtype_size(*info.dtype));
}

}  // namespace

int fold_constants(Graph& g, const PassConfig& config) {
  Frame frame;  // for kernels that ask the opset
  frame.graph = &g;
  frame.env.resize(g.values.size());
  std::vector<bool> dead(g.nodes.size(), false);
  int folded = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (random_op(n.op) || !n.subgraphs().empty()) continue;
    bool all_constant = true;
    double in_bytes = 0;
    std::set<int> seen;
    for (int v : n.inputs) {
      if (v < 0) continue;
      if (!is_constant(g, v)) {
        all_constant = false;
        break;
      }
      if (seen.insert(v).second) in_bytes += double(constant(g, v).nbytes());
    }
    if (!all_constant) continue;
    if (n.op == Op::Dropout && dropout_in_training(g, n)) continue;
    // A Constant's value is in the model already: it moves to the initializers whatever its size.
    const double cap = n.op == Op::Constant ? 1e300 : std::max(double(config.fold_max_bytes), in_bytes);
    bool too_big = false, unknown = false;
    for (int out : n.outputs) {
      if (out < 0) continue;
      std::optional<double> b = static_bytes(g, n, out);
      if (!b) unknown = true;
      else too_big = too_big || *b > cap;
    }
    if (too_big || (unknown && expanding_op(n.op))) continue;
    std::vector<RValue> in_values;
    in_values.reserve(n.inputs.size());
    for (int v : n.inputs) in_values.push_back(v >= 0 ? RValue(constant(g, v)) : RValue());
    std::vector<const RValue*> in;
    for (size_t k = 0; k < n.inputs.size(); ++k) in.push_back(n.inputs[k] >= 0 ? &in_values[k] : nullptr);
    std::vector<RValue> out;
    try {
      out = interpret_node(n, in, &frame);
    } catch (const std::exception&) {
      continue;  // it fails at run time instead, as it did before
    }
    bool ok = true;
    double out_bytes = 0;
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      if (n.outputs[k] < 0) continue;
      if (k >= out.size() || out[k].kind != ValueKind::Tensor || !out[k].tensor.defined()) ok = false;
      else out_bytes += double(out[k].tensor.nbytes());
    }
    if (!ok || out_bytes > cap) continue;
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      if (n.outputs[k] < 0) continue;
      Tensor& t = out[k].tensor;
      if (config.deliberately_wrong && t.dtype() == DType::Float32) {  // a wrong fold, for tests (passes.h)
        t = t.clone();
        for (int64_t e = 0; e < t.numel(); ++e) t.data<float>()[e] *= 2;
      }
      make_constant(g, n.outputs[k], std::move(t));
    }
    dead[i] = true;
    ++folded;
  }
  if (folded) remove_nodes(g, std::move(dead));
  return folded;
}

}  // namespace terrace::passes
