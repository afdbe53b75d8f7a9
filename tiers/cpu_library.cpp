// Tier 1's library regions through oneDNN (tiers/cpu_library.h).
#include "tiers/cpu_library.h"

#ifdef TERRACE_HAVE_CPU_JIT
#include <algorithm>
#include <cmath>
#include <optional>

#include "interp/interpreter.h"

namespace terrace::cpu_library {
namespace {

// The oneDNN activation a node can be: a Relu.
std::optional<jit::DnnlActivation> activation_of(const Graph&, const Node& n) {
#ifdef TERRACE_HAVE_DNNL
  if (n.op == Op::Relu && n.outputs.size() == 1) return jit::DnnlActivation{jit::DnnlActivation::Kind::Relu};
#else
  (void)n;
#endif
  return std::nullopt;
}

// The number of products summed into each output.
int64_t reduction_length(const Node& node, const Shape& a, const Shape& b) {
  if (node.op == Op::MatMul) return a.back();
  if (node.op == Op::Gemm) return node.attr_int("transA", 0) ? a[0] : a[1];
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

}  // namespace

bool is_library_op(Op op) { return op == Op::MatMul || op == Op::Gemm || op == Op::Conv; }

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
  return jit::dnnl_can_compile(node, dtypes, ranks);
#else
  (void)g;
  return std::string("tier 1 was built without oneDNN, which runs ") + op_name(node.op);
#endif
}

// A Relu after a library op runs inside its primitive.
bool absorbs(const Graph& g, const Node& node, const Node& next) {
  return is_library_op(node.op) && activation_of(g, next).has_value();
}

// For a region of one MatMul, Gemm or Conv: gamma_K * (|A| |B| + |C|), the classic bound on the
// rounding error of K-term fp32 dot products in any summation order (gamma_K = K u / (1 - K u),
// u = 2^-24), with K counting the bias and scaling too. |A| |B| is the interpreter's own result
// on the inputs' absolute values. A wrong kernel is off by the size of the terms, far outside it.
std::vector<Tensor> error_allowance(const Graph& g, const Region& region, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> out(region.outputs.size());
  // Relu moves no value further than it was: the bound holds after it too.
  if (region.nodes.size() > 2 || region.outputs.size() != 1) return out;
  const Node& node = g.nodes[size_t(region.nodes[0])];
  if (!is_library_op(node.op)) return out;
  if (region.nodes.size() == 2 && !activation_of(g, g.nodes[size_t(region.nodes[1])])) return out;
  Node magnitude = node;
  magnitude.inputs.clear();
  std::vector<RValue> abs_inputs;
  for (int v : node.inputs) {
    if (v < 0) { magnitude.inputs.push_back(-1); continue; }
    Tensor t = inputs[region_input_index(region, v)].cast(DType::Float64);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = std::abs(t.data<double>()[i]);
    magnitude.inputs.push_back(int(abs_inputs.size()));
    abs_inputs.emplace_back(std::move(t));
  }
  for (const char* k : {"alpha", "beta"})
    if (auto a = magnitude.attrs.find(k); a != magnitude.attrs.end()) a->second.f = std::abs(a->second.f);
  std::vector<const RValue*> args;
  for (int v : magnitude.inputs) args.push_back(v < 0 ? nullptr : &abs_inputs[size_t(v)]);
  Tensor m = interpret_node(magnitude, args).at(0).tensor;
  const double u = std::ldexp(1.0, -24), K = double(reduction_length(node, inputs[0].shape(), inputs[1].shape())) + 2;
  const double gamma = K * u / (1 - K * u);
  for (int64_t i = 0; i < m.numel(); ++i) m.data<double>()[i] *= gamma;
  out[0] = std::move(m);
  return out;
}

// A MatMul, Gemm or Conv (and the Relu it absorbed): one oneDNN primitive, reading the region's
// inputs and writing its one output. Inputs that are initializers (and not graph inputs) are
// handed over at compile time, so that constant weights are laid out once.
LibraryPart compile_library(const Graph& g, const Region& region, std::vector<kernels::TensorSig>& slots) {
  const Node& node = g.nodes[size_t(region.nodes[0])];
  TERRACE_CHECK(node.outputs.size() == 1 && node.outputs[0] >= 0, NotImplemented, node.describe(),
                ": tier 1 runs single-output library ops");
  TERRACE_ASSERT(region.nodes.size() <= 2 && region.outputs.size() == 1,
                 "tier 1: a library region holds its op and at most its activation");
  std::optional<jit::DnnlActivation> act;
  if (region.nodes.size() == 2) act = activation_of(g, g.nodes[size_t(region.nodes[1])]);
  TERRACE_ASSERT(region.nodes.size() == 1 || act, "tier 1: a library region's second node is no activation");
  std::vector<Shape> shapes;
  std::vector<const Tensor*> constants;
  LibraryPart part;
  for (int v : node.inputs) {
    if (v < 0) continue;
    const size_t slot = region_input_index(region, v);
    shapes.push_back(slots[slot].shape);
    auto init = g.initializers.find(v);
    bool constant = init != g.initializers.end() &&
                    std::find(g.inputs.begin(), g.inputs.end(), v) == g.inputs.end();
    constants.push_back(constant ? &init->second : nullptr);
    part.slots.push_back(int(slot));
  }
  part.node = node.describe();
  part.primitive = jit::make_dnnl_primitive(node, shapes, constants, act.value_or(jit::DnnlActivation{}));
  slots.push_back({DType::Float32, part.primitive->output_shape()});
  part.slots.push_back(int(slots.size()) - 1);
  return part;
}

}  // namespace terrace::cpu_library
#endif  // TERRACE_HAVE_CPU_JIT
