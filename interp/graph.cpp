// Op name tables, attribute access and value lookup for Graph.
#include "interp/graph.h"

namespace terrace {

namespace {
const char* const kOpNames[] = {
#define TERRACE_OP(name, family) #name,
#include "interp/ops.def"
#undef TERRACE_OP
};
const char* const kOpFamilies[] = {
#define TERRACE_OP(name, family) #family,
#include "interp/ops.def"
#undef TERRACE_OP
};
}  // namespace

const char* op_name(Op op) { return kOpNames[size_t(op)]; }
const char* op_family(Op op) { return kOpFamilies[size_t(op)]; }

std::optional<Op> op_from_name(const std::string& name) {
  static const std::unordered_map<std::string, Op> table = [] {
    std::unordered_map<std::string, Op> t;
    for (size_t i = 0; i < size_t(Op::kCount); ++i) t.emplace(kOpNames[i], Op(i));
    return t;
  }();
  auto it = table.find(name);
  if (it == table.end()) return std::nullopt;
  return it->second;
}

std::string Node::describe() const {
  std::string s = op_name(op);
  if (!name.empty()) s += " '" + name + "'";
  else if (!anonymous.empty()) s += " " + anonymous;
  return s;
}

const Attribute* Node::find_attr(const std::string& k) const {
  auto it = attrs.find(k);
  return it == attrs.end() ? nullptr : &it->second;
}

namespace {
const Attribute& expect(const Node& n, const std::string& k, Attribute::Kind kind, const char* what) {
  const Attribute* a = n.find_attr(k);
  TERRACE_CHECK(a, InvalidModel, n.describe(), ": required attribute '", k, "' is missing");
  TERRACE_CHECK(a->kind == kind, InvalidModel, n.describe(), ": attribute '", k, "' must be ",
                what);
  return *a;
}
}  // namespace

int64_t Node::attr_int(const std::string& k) const {
  return expect(*this, k, Attribute::Kind::Int, "an int").i;
}
int64_t Node::attr_int(const std::string& k, int64_t def) const {
  return has_attr(k) ? attr_int(k) : def;
}
float Node::attr_float(const std::string& k, float def) const {
  return has_attr(k) ? expect(*this, k, Attribute::Kind::Float, "a float").f : def;
}
std::string Node::attr_string(const std::string& k, const std::string& def) const {
  return has_attr(k) ? expect(*this, k, Attribute::Kind::String, "a string").s : def;
}
std::vector<int64_t> Node::attr_ints(const std::string& k, std::vector<int64_t> def) const {
  return has_attr(k) ? expect(*this, k, Attribute::Kind::Ints, "a list of ints").ints : def;
}
std::vector<float> Node::attr_floats(const std::string& k, std::vector<float> def) const {
  return has_attr(k) ? expect(*this, k, Attribute::Kind::Floats, "a list of floats").floats : def;
}
std::vector<std::string> Node::attr_strings(const std::string& k,
                                            std::vector<std::string> def) const {
  return has_attr(k) ? expect(*this, k, Attribute::Kind::Strings, "a list of strings").strings
                     : def;
}
const Tensor& Node::attr_tensor(const std::string& k) const {
  return expect(*this, k, Attribute::Kind::Tensor, "a tensor").t;
}
const Graph& Node::attr_graph(const std::string& k) const {
  const Attribute& a = expect(*this, k, Attribute::Kind::Graph, "a graph");
  TERRACE_CHECK(a.g, InvalidModel, describe(), ": attribute '", k, "' holds no graph");
  return *a.g;
}

std::vector<const Graph*> Node::subgraphs() const {
  std::vector<const Graph*> r;
  for (auto& [k, a] : attrs) {
    if (a.g) r.push_back(a.g.get());
    for (auto& g : a.graphs) r.push_back(g.get());
  }
  return r;
}

std::vector<int> Graph::captured_by(const Node& node) const {
  std::vector<int> out;
  for (const Graph* body : node.subgraphs())
    for (int c : body->captures) {
      int v = find_value(body->values[size_t(c)].name);
      if (v >= 0) out.push_back(v);
    }
  return out;
}

int Graph::find_value(const std::string& n) const {
  auto it = value_index.find(n);
  return it == value_index.end() ? -1 : it->second;
}

int Graph::add_value(std::string n, ValueInfo info) {
  int id = int(values.size());
  if (!n.empty()) value_index.emplace(n, id);
  values.push_back(Value{std::move(n), std::move(info), -1});
  return id;
}

}  // namespace terrace
