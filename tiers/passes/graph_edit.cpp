// Helpers the graph passes share (graph_edit.h).
#include "tiers/passes/graph_edit.h"

#include <algorithm>
#include <sstream>

namespace terrace::passes {

std::vector<int> use_counts(const Graph& g) {
  std::vector<int> uses(g.values.size(), 0);
  for (const Node& n : g.nodes) {
    for (int v : n.inputs)
      if (v >= 0) ++uses[size_t(v)];
    for (int v : g.captured_by(n)) ++uses[size_t(v)];
  }
  for (int v : g.outputs) ++uses[size_t(v)];
  return uses;
}

std::vector<bool> pinned_values(const Graph& g) {
  std::vector<bool> pinned(g.values.size(), false);
  for (int v : g.inputs) pinned[size_t(v)] = true;
  for (int v : g.outputs) pinned[size_t(v)] = true;
  for (int v : g.captures) pinned[size_t(v)] = true;
  for (const Node& n : g.nodes)
    for (int v : g.captured_by(n)) pinned[size_t(v)] = true;
  return pinned;
}

const Shape* static_shape(const Graph& g, int v) {
  if (v < 0) return nullptr;
  if (auto it = g.initializers.find(v); it != g.initializers.end()) return &it->second.shape();
  const ValueInfo& info = g.values[size_t(v)].info;
  if (info.kind != ValueKind::Tensor || !info.shape) return nullptr;
  for (int64_t d : *info.shape)
    if (d < 0) return nullptr;
  return &*info.shape;
}

void make_constant(Graph& g, int v, Tensor t) {
  Value& val = g.values[size_t(v)];
  val.info.kind = ValueKind::Tensor;
  val.info.dtype = t.dtype();
  val.info.shape = t.shape();
  val.info.dim_names.assign(t.shape().size(), "");
  val.producer = -1;
  g.initializers[v] = std::move(t);
}

int add_constant(Graph& g, const std::string& base, Tensor t) {
  std::string name = base;
  for (int k = 1; g.find_value(name) >= 0; ++k) name = base + "_" + std::to_string(k);
  int id = g.add_value(name);
  make_constant(g, id, std::move(t));
  return id;
}

int new_value(Graph& g, const std::string& base, ValueInfo info, int producer) {
  std::string name = base;
  for (int k = 1; g.find_value(name) >= 0; ++k) name = base + "_" + std::to_string(k);
  const int id = g.add_value(name, std::move(info));
  g.values[size_t(id)].producer = producer;
  return id;
}

void replace_uses(Graph& g, int from, int to) {
  for (Node& n : g.nodes)
    for (int& v : n.inputs)
      if (v == from) v = to;
}

bool bypass(Graph& g, int n, int in, int out, const std::vector<bool>& pinned) {
  if (in < 0 || out < 0 || in == out) return false;
  if (!pinned[size_t(out)]) {
    replace_uses(g, out, in);
    return true;
  }
  // `out` keeps its identity: it takes over `in`'s role instead.
  if (is_constant(g, in)) {
    make_constant(g, out, constant(g, in));
    return true;
  }
  int p = g.values[size_t(in)].producer;
  if (pinned[size_t(in)] || p < 0 || p == n) return false;
  Node& producer = g.nodes[size_t(p)];
  replace_uses(g, in, out);
  for (int& o : producer.outputs)
    if (o == in) o = out;
  g.values[size_t(out)].producer = p;
  g.values[size_t(in)].producer = -1;
  return true;
}

int remove_nodes(Graph& g, std::vector<bool> dead) {
  dead.resize(g.nodes.size(), false);
  // Reads by live nodes and graph outputs; then nodes nobody reads die, last to first.
  std::vector<int> uses(g.values.size(), 0);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (dead[i]) continue;
    for (int v : g.nodes[i].inputs)
      if (v >= 0) ++uses[size_t(v)];
    for (int v : g.captured_by(g.nodes[i])) ++uses[size_t(v)];
  }
  for (int v : g.outputs) ++uses[size_t(v)];
  for (int v : g.captures) ++uses[size_t(v)];
  for (size_t i = g.nodes.size(); i-- > 0;) {
    if (dead[i]) continue;
    bool read = false;
    for (int v : g.nodes[i].outputs) read = read || (v >= 0 && uses[size_t(v)] > 0);
    if (read) continue;
    dead[i] = true;
    for (int v : g.nodes[i].inputs)
      if (v >= 0) --uses[size_t(v)];
    for (int v : g.captured_by(g.nodes[i])) --uses[size_t(v)];
  }
  int removed = 0;
  std::vector<Node> kept;
  kept.reserve(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (dead[i]) ++removed;
    else kept.push_back(std::move(g.nodes[i]));
  }
  g.nodes = std::move(kept);
  // Values still referred to, renumbered in their old order.
  std::vector<bool> live(g.values.size(), false);
  auto mark = [&](int v) {
    if (v >= 0) live[size_t(v)] = true;
  };
  for (int v : g.inputs) mark(v);
  for (int v : g.outputs) mark(v);
  for (int v : g.captures) mark(v);
  for (const Node& n : g.nodes) {
    for (int v : n.inputs) mark(v);
    for (int v : n.outputs) mark(v);
    for (int v : g.captured_by(n)) mark(v);
  }
  std::vector<int> remap(g.values.size(), -1);
  std::vector<Value> values;
  for (size_t v = 0; v < g.values.size(); ++v)
    if (live[v]) {
      remap[v] = int(values.size());
      values.push_back(std::move(g.values[v]));
    }
  auto re = [&](int& v) {
    if (v >= 0) v = remap[size_t(v)];
  };
  for (int& v : g.inputs) re(v);
  for (int& v : g.outputs) re(v);
  for (int& v : g.captures) re(v);
  for (Value& val : values) val.producer = -1;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (int& v : g.nodes[i].inputs) re(v);
    for (int& v : g.nodes[i].outputs) {
      re(v);
      if (v >= 0) values[size_t(v)].producer = int(i);
    }
  }
  std::unordered_map<int, Tensor> inits;
  for (auto& [v, t] : g.initializers)
    if (live[size_t(v)]) inits.emplace(remap[size_t(v)], std::move(t));
  g.initializers = std::move(inits);
  g.values = std::move(values);
  g.value_index.clear();
  for (size_t v = 0; v < g.values.size(); ++v)
    if (!g.values[v].name.empty()) g.value_index.emplace(g.values[v].name, int(v));
  return removed;
}

namespace {

std::string value_type(const Graph& g, int v) {
  if (auto it = g.initializers.find(v); it != g.initializers.end())
    return std::string(dtype_name(it->second.dtype())) + shape_str(it->second.shape());
  const ValueInfo& info = g.values[size_t(v)].info;
  if (info.kind == ValueKind::Sequence) return "sequence";
  if (info.kind == ValueKind::Optional) return "optional";
  std::string s = info.dtype ? dtype_name(*info.dtype) : "?";
  if (!info.shape) return s + "[?]";
  s += "[";
  for (size_t d = 0; d < info.shape->size(); ++d) {
    const int64_t dim = (*info.shape)[d];
    const bool named = dim < 0 && d < info.dim_names.size() && !info.dim_names[d].empty();
    s += (d ? "," : "") + (named ? info.dim_names[d] : std::to_string(dim));
  }
  return s + "]";
}

std::string attr_text(const Attribute& a) {
  std::ostringstream o;
  using K = Attribute::Kind;
  auto list = [&](const auto& xs) {
    o << '[';
    for (size_t i = 0; i < xs.size(); ++i) o << (i ? "," : "") << xs[i];
    o << ']';
  };
  switch (a.kind) {
    case K::Int: o << a.i; break;
    case K::Float: o << a.f; break;
    case K::String: o << '"' << a.s << '"'; break;
    case K::Tensor: o << (a.t.defined() && a.t.dtype() != DType::String ? a.t.str(4) : "tensor"); break;
    case K::Graph: o << "<graph of " << (a.g ? a.g->nodes.size() : 0) << " nodes>"; break;
    case K::Ints: list(a.ints); break;
    case K::Floats: list(a.floats); break;
    case K::Strings: list(a.strings); break;
    case K::Tensors: o << "<" << a.tensors.size() << " tensors>"; break;
    case K::Graphs: o << "<" << a.graphs.size() << " graphs>"; break;
  }
  return o.str();
}

}  // namespace

std::string graph_text(const Graph& g) {
  std::ostringstream o;
  auto name = [&](int v) { return v < 0 ? std::string("<absent>") : "'" + g.values[size_t(v)].name + "'"; };
  o << "graph '" << g.name << "' (opset " << g.opset << "): " << g.inputs.size() << " inputs, "
    << g.initializers.size() << " initializers, " << g.nodes.size() << " nodes, " << g.outputs.size()
    << " outputs\n";
  for (int v : g.inputs) o << "input  " << name(v) << ": " << value_type(g, v) << "\n";
  std::vector<int> inits;
  for (auto& [v, t] : g.initializers) inits.push_back(v);
  std::sort(inits.begin(), inits.end());
  for (int v : inits) {
    const Tensor& t = g.initializers.at(v);
    o << "const  " << name(v) << ": " << value_type(g, v);
    if (t.numel() <= 8 && t.dtype() != DType::String) o << " = " << t.str(8);
    o << "\n";
  }
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    o << "node " << i << ": ";
    for (size_t k = 0; k < n.outputs.size(); ++k)
      o << (k ? ", " : "") << name(n.outputs[k])
        << (n.outputs[k] >= 0 ? ": " + value_type(g, n.outputs[k]) : std::string());
    o << " = " << n.describe() << "(";
    for (size_t k = 0; k < n.inputs.size(); ++k) o << (k ? ", " : "") << name(n.inputs[k]);
    o << ")";
    if (!n.attrs.empty()) {
      o << " {";
      bool first = true;
      for (auto& [k, a] : n.attrs) {
        o << (first ? "" : ", ") << k << "=" << attr_text(a);
        first = false;
      }
      o << "}";
    }
    o << "\n";
  }
  for (int v : g.outputs) o << "output " << name(v) << ": " << value_type(g, v) << "\n";
  return o.str();
}

}  // namespace terrace::passes
