// What the pattern passes share (pattern.h).
#include "tiers/passes/pattern.h"

#include <cmath>

namespace terrace::passes {

PatternView::PatternView(const Graph& g)
    : g_(g), uses_(use_counts(g)), pinned_(pinned_values(g)), reader_(g.values.size(), -1) {
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (int v : g.nodes[i].inputs) {
      if (v < 0) continue;
      int& r = reader_[size_t(v)];
      r = r == -1 ? int(i) : -2;
    }
}

const Node* PatternView::producer(int v, Op op) const {
  const int p = producer_index(v);
  if (p < 0) return nullptr;
  const Node& n = g_.nodes[size_t(p)];
  return n.op == op && n.outputs.size() == 1 ? &n : nullptr;
}

int PatternView::only_reader(int v) const {
  if (v < 0 || uses_[size_t(v)] != 1) return -1;
  return reader_[size_t(v)] >= 0 ? reader_[size_t(v)] : -1;
}

bool PatternView::internal(int v, int reads) const {
  return v >= 0 && !pinned_[size_t(v)] && uses_[size_t(v)] == reads && !is_constant(g_, v);
}

std::optional<double> PatternView::float_scalar(int v) const {
  if (!is_constant(g_, v)) return std::nullopt;
  const Tensor& t = constant(g_, v);
  if (t.numel() != 1 || !is_float(t.dtype())) return std::nullopt;
  return t.get_as_double(0);
}

int PatternView::other_input(const Node& n, int v) {
  if (n.inputs.size() != 2) return -1;
  if (n.inputs[0] == v) return n.inputs[1];
  if (n.inputs[1] == v) return n.inputs[0];
  return -1;
}

std::optional<DType> PatternView::dtype(int v) const {
  if (v < 0) return std::nullopt;
  if (is_constant(g_, v)) return constant(g_, v).dtype();
  const ValueInfo& info = g_.values[size_t(v)].info;
  return info.kind == ValueKind::Tensor ? info.dtype : std::nullopt;
}

const Shape* PatternView::shape(int v) const {
  if (v < 0) return nullptr;
  if (is_constant(g_, v)) return &constant(g_, v).shape();
  const ValueInfo& info = g_.values[size_t(v)].info;
  return info.kind == ValueKind::Tensor && info.shape ? &*info.shape : nullptr;
}

bool close_to(double a, double b, double rtol) { return std::fabs(a - b) <= rtol * std::fabs(b); }

Attribute int_attribute(int64_t v) {
  Attribute a;
  a.kind = Attribute::Kind::Int;
  a.i = v;
  return a;
}

Attribute float_attribute(float v) {
  Attribute a;
  a.kind = Attribute::Kind::Float;
  a.f = v;
  return a;
}

Attribute string_attribute(std::string v) {
  Attribute a;
  a.kind = Attribute::Kind::String;
  a.s = std::move(v);
  return a;
}

Attribute ints_attribute(std::vector<int64_t> v) {
  Attribute a;
  a.kind = Attribute::Kind::Ints;
  a.ints = std::move(v);
  return a;
}

std::string fused_name(const Graph& g, const Node& base, const char* op) {
  std::string stem = base.name;
  if (stem.empty() && !base.outputs.empty() && base.outputs[0] >= 0) stem = g.values[size_t(base.outputs[0])].name;
  return stem + "/fused_" + op;
}

}  // namespace terrace::passes
