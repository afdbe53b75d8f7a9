// Terrace's own model validation: structure, tensors, types, ops, scoping and node order.
#include "interp/verify.h"

#include <algorithm>
#include <climits>
#include <queue>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include <onnx/defs/schema.h>

#include "interp/graph.h"
#include "interp/kernel.h"
#include "interp/log.h"
#include "interp/op_versions.h"
#include "interp/shape_infer.h"
#include "interp/tensor_proto.h"

namespace terrace {

bool is_default_domain(const std::string& domain) { return domain.empty() || domain == "ai.onnx"; }

int default_opset(const onnx::ModelProto& m) {
  for (const auto& o : m.opset_import())  // clamped, so a huge version cannot wrap into range
    if (is_default_domain(o.domain())) return int(std::clamp<int64_t>(o.version(), 0, INT_MAX));
  return -1;
}

namespace {

// The names visible to a graph: its own, then its enclosing graphs'.
struct Scope {
  const Scope* parent = nullptr;
  std::unordered_set<std::string> names;
  bool defines(const std::string& n) const {
    for (const Scope* s = this; s; s = s->parent)
      if (s->names.count(n)) return true;
    return false;
  }
};

std::string node_what(const onnx::NodeProto& n, int index, const std::string& where) {
  std::string s = where + "node " + std::to_string(index) + " (" + n.op_type();
  if (!n.name().empty()) s += " '" + n.name() + "'";
  return s + ")";
}

// A declared dim of -1 is how paddle2onnx and older exporters mark a dynamic dim; ONNX Runtime
// reads it so. It becomes an unknown dim here; returns how many were rewritten.
int dynamic_minus_one(onnx::TypeProto& t) {
  switch (t.value_case()) {
    case onnx::TypeProto::kTensorType: {
      int n = 0;
      if (!t.tensor_type().has_shape()) return 0;
      for (auto& d : *t.mutable_tensor_type()->mutable_shape()->mutable_dim())
        if (d.has_dim_value() && d.dim_value() == -1) {
          d.clear_dim_value();
          ++n;
        }
      return n;
    }
    case onnx::TypeProto::kSequenceType:
      return t.sequence_type().has_elem_type() ? dynamic_minus_one(*t.mutable_sequence_type()->mutable_elem_type()) : 0;
    case onnx::TypeProto::kOptionalType:
      return t.optional_type().has_elem_type() ? dynamic_minus_one(*t.mutable_optional_type()->mutable_elem_type()) : 0;
    default: return 0;
  }
}

void check_type(const onnx::TypeProto& t, const std::string& what) {
  switch (t.value_case()) {
    case onnx::TypeProto::kTensorType:
      if (t.tensor_type().elem_type() != 0) dtype_from_proto_code(t.tensor_type().elem_type(), what);
      for (const auto& d : t.tensor_type().shape().dim())
        TERRACE_CHECK(!d.has_dim_value() || d.dim_value() >= 0, InvalidModel, what,
                      ": negative dimension ", d.dim_value());
      return;
    case onnx::TypeProto::kSequenceType:
      if (t.sequence_type().has_elem_type()) check_type(t.sequence_type().elem_type(), what);
      return;
    case onnx::TypeProto::kOptionalType:
      if (t.optional_type().has_elem_type()) check_type(t.optional_type().elem_type(), what);
      return;
    case onnx::TypeProto::VALUE_NOT_SET: return;
    default: fail(ErrorCode::NotImplemented, what, ": map and sparse-tensor types are not supported");
  }
}

// An input whose length is a result's rank (shape_infer.h) declared longer than kMaxRank.
// `lengths`: the largest dim each graph input, value_info or initializer is declared with.
void check_rank_inputs(const onnx::NodeProto& n, const std::unordered_map<std::string, int64_t>& lengths,
                       const std::string& what) {
  int second = -1;
  for (int i : {rank_giving_input(n.op_type(), &second), second}) {
    if (i < 0 || i >= n.input_size()) continue;
    auto it = lengths.find(n.input(i));
    TERRACE_CHECK(it == lengths.end() || it->second <= kMaxRank, InvalidModel, what, ": input ", i, " ('",
                  n.input(i), "') is declared with ", it->second, " values, but its length is the rank of ",
                  n.op_type(), "'s result, at most ", kMaxRank);
  }
}

class Verifier {
 public:
  Verifier(std::string base_dir, std::string link_root, int opset)
      : base_dir_(std::move(base_dir)), link_root_(std::move(link_root)), opset_(opset) {}

  // Checks a graph and sorts its nodes; returns the names it reads from enclosing graphs.
  std::set<std::string> graph(onnx::GraphProto& g, const Scope* outer, const std::string& where);
  // Once the graph is checked: the warning for the declared dims of -1 it read as dynamic, or "".
  std::string minus_one_warning() const {
    return minus_one_dims_ == 0 ? ""
                                : std::to_string(minus_one_dims_) + " declared dim(s) of -1 (the first in " +
                                      first_minus_one_ + ") read as dynamic, as older exporters mean them";
  }

 private:
  void tensor(onnx::TensorProto& t, const std::string& what) {
    load_external_data(t, base_dir_, what, link_root_);
    check_tensor_proto(t, what);
  }
  void op(const onnx::NodeProto& n, const std::string& what);
  void check_pre_opset7_semantics(const onnx::NodeProto& n, const std::string& what);
  void check_new_version(const onnx::NodeProto& n, const OpVersion& v, const std::string& what);
  // Checks a node's attributes; returns the names its subgraphs read from enclosing graphs.
  std::set<std::string> attributes(onnx::NodeProto& n, const Scope& scope, const std::string& what);
  void declare(Scope& scope, const std::string& name, const std::string& what);
  // Checks a graph input's, output's or value_info's type, reading a dim of -1 as dynamic.
  void declared_type(onnx::ValueInfoProto& v, const std::string& what) {
    if (int n = dynamic_minus_one(*v.mutable_type()); n > 0 && minus_one_dims_++ == 0) first_minus_one_ = what;
    check_type(v.type(), what);
  }

  std::string base_dir_, link_root_;
  int opset_;
  int minus_one_dims_ = 0;       // declared dims of -1 read as dynamic
  std::string first_minus_one_;  // where the first was
};

// Models of opsets below 7 load when each of their ops means what it means at opset 7 (the same
// schema version), which holds for many ops and for most old exported models' layers.
void Verifier::check_pre_opset7_semantics(const onnx::NodeProto& n, const std::string& what) {
  const onnx::OpSchema* old = onnx::OpSchemaRegistry::Schema(n.op_type(), opset_, "");
  const onnx::OpSchema* v7 = onnx::OpSchemaRegistry::Schema(n.op_type(), kMinOpset, "");
  TERRACE_CHECK(old && v7 && old->since_version() == v7->since_version(), NotImplemented, what,
                ": op '", n.op_type(), "' at opset ", opset_,
                " differs from its opset-7 form; Terrace implements opsets ", kMinOpset, " to ",
                kMaxOpset);
}

// A version from opset 18 on: ONNX 1.12 knows nothing of it, so Terrace checks what its schema
// declares (interp/op_versions.def): implemented at all, the number of inputs and outputs, and
// the attribute names.
void Verifier::check_new_version(const onnx::NodeProto& n, const OpVersion& v, const std::string& what) {
  TERRACE_CHECK(v.form != VersionForm::Missing, NotImplemented, what, ": op '", n.op_type(),
                "' version ", v.since, " (in force at opset ", opset_, ") is not implemented by Terrace: ",
                v.note);
  if (v.form != VersionForm::Own) return;  // ONNX's checker checks it as its opset-17 version
  TERRACE_CHECK(n.input_size() >= v.min_inputs && n.input_size() <= v.max_inputs, InvalidModel, what,
                " has ", n.input_size(), " inputs; version ", v.since, " of ", n.op_type(), " takes ",
                v.min_inputs, v.min_inputs == v.max_inputs ? "" : " to " + std::to_string(v.max_inputs));
  TERRACE_CHECK(n.output_size() >= v.min_outputs && n.output_size() <= v.max_outputs, InvalidModel, what,
                " has ", n.output_size(), " outputs; version ", v.since, " of ", n.op_type(), " gives ",
                v.min_outputs, v.min_outputs == v.max_outputs ? "" : " to " + std::to_string(v.max_outputs));
  for (const auto& a : n.attribute())
    TERRACE_CHECK(version_has_attribute(v, a.name()), InvalidModel, what, ": unknown attribute '",
                  a.name(), "' (version ", v.since, " of ", n.op_type(), " has: ",
                  *v.attributes ? v.attributes : "none", ")");
}

void Verifier::op(const onnx::NodeProto& n, const std::string& what) {
  TERRACE_CHECK(!n.op_type().empty(), InvalidModel, what, " has no op type");
  TERRACE_CHECK(is_default_domain(n.domain()), NotImplemented, what, ": op '", n.op_type(),
                "' of domain '", n.domain(), "' is not supported (only the default ONNX domain is)");
  if (std::optional<Op> known = op_from_name(n.op_type())) {
    if (opset_ < kMinOpset) check_pre_opset7_semantics(n, what);
    if (const OpVersion* v = op_version_in_force(*known, opset_)) check_new_version(n, *v, what);
    TERRACE_CHECK(has_kernel(*known), NotImplemented, what, ": ONNX op '", n.op_type(),
                  "' is not implemented by Terrace (no kernel yet)");
    return;
  }
  TERRACE_CHECK(!onnx::OpSchemaRegistry::Schema(n.op_type(), opset_, ""), NotImplemented, what,
                ": ONNX op '", n.op_type(), "' is not implemented by Terrace");
  // Ops newer than ONNX 1.12's registry that Terrace lacks (ops.def lists every other one).
  for (const char* newer : {"ImageDecoder"})
    TERRACE_CHECK(n.op_type() != newer || opset_ < 20, NotImplemented, what, ": ONNX op '",
                  n.op_type(), "' (opset 20) is not implemented by Terrace");
  fail(ErrorCode::InvalidModel, what, ": unknown op '", n.op_type(), "' (no such ONNX op in opset ",
       opset_, ")");
}

std::set<std::string> Verifier::attributes(onnx::NodeProto& n, const Scope& scope,
                                           const std::string& what) {
  std::set<std::string> reads;
  std::unordered_set<std::string> seen;
  auto subgraph = [&](onnx::GraphProto& g, const std::string& attr_what) {
    for (const std::string& r : graph(g, &scope, attr_what + ": ")) reads.insert(r);
  };
  for (auto& a : *n.mutable_attribute()) {
    std::string aw = what + ", attribute '" + a.name() + "'";
    TERRACE_CHECK(!a.name().empty(), InvalidModel, what, " has an attribute without a name");
    TERRACE_CHECK(seen.insert(a.name()).second, InvalidModel, aw, " is given twice");
    TERRACE_CHECK(a.ref_attr_name().empty(), InvalidModel, aw,
                  " refers to a function attribute outside a function");
    TERRACE_CHECK(!a.has_sparse_tensor() && a.sparse_tensors_size() == 0, NotImplemented, aw,
                  ": sparse tensors are not supported");
    if (a.has_t()) tensor(*a.mutable_t(), aw);
    for (auto& t : *a.mutable_tensors()) tensor(t, aw);
    if (a.has_tp()) check_type(a.tp(), aw);
    for (const auto& tp : a.type_protos()) check_type(tp, aw);
    if (a.has_g()) subgraph(*a.mutable_g(), aw);
    for (auto& g : *a.mutable_graphs()) subgraph(g, aw);
  }
  return reads;
}

void Verifier::declare(Scope& scope, const std::string& name, const std::string& what) {
  TERRACE_CHECK(!name.empty(), InvalidModel, what, " has no name");
  TERRACE_CHECK(scope.names.insert(name).second, InvalidModel, what, ": value '", name,
                "' is defined more than once (the graph must be in SSA form)");
}

// Orders nodes so each comes after the producers of everything it reads (explicitly or through
// its subgraphs); among ready nodes the original order wins, so sorted graphs stay unchanged.
void sort_nodes(onnx::GraphProto& g, const std::vector<std::set<std::string>>& reads,
                const std::string& where) {
  int n = g.node_size();
  std::unordered_map<std::string, int> producer;
  for (int i = 0; i < n; ++i)
    for (const auto& o : g.node(i).output())
      if (!o.empty()) producer[o] = i;
  std::vector<std::vector<int>> users(static_cast<size_t>(n));
  std::vector<int> pending(static_cast<size_t>(n), 0);
  for (int i = 0; i < n; ++i)
    for (const std::string& r : reads[size_t(i)]) {
      auto it = producer.find(r);
      if (it == producer.end()) continue;
      users[size_t(it->second)].push_back(i);
      ++pending[size_t(i)];
    }
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int i = 0; i < n; ++i)
    if (pending[size_t(i)] == 0) ready.push(i);
  std::vector<int> order;
  while (!ready.empty()) {
    int i = ready.top();
    ready.pop();
    order.push_back(i);
    for (int u : users[size_t(i)])
      if (--pending[size_t(u)] == 0) ready.push(u);
  }
  if (int(order.size()) != n) {
    int stuck = 0;
    while (pending[size_t(stuck)] == 0) ++stuck;
    fail(ErrorCode::InvalidModel, node_what(g.node(stuck), stuck, where),
         " is part of a cycle: the graph has no topological order");
  }
  bool sorted = true;
  for (int i = 0; i < n; ++i) sorted = sorted && order[size_t(i)] == i;
  if (sorted) return;
  std::vector<onnx::NodeProto*> nodes(static_cast<size_t>(n));
  g.mutable_node()->ExtractSubrange(0, n, nodes.data());
  for (int i : order) g.mutable_node()->AddAllocated(nodes[size_t(i)]);
}

std::set<std::string> Verifier::graph(onnx::GraphProto& g, const Scope* outer,
                                      const std::string& where) {
  TERRACE_CHECK(g.sparse_initializer_size() == 0, NotImplemented, where,
                "sparse initializers are not supported");
  Scope scope{outer, {}};
  for (auto& t : *g.mutable_initializer()) {
    std::string what = where + "initializer '" + t.name() + "'";
    declare(scope, t.name(), what);
    tensor(t, what);
  }
  std::unordered_set<std::string> input_names;
  for (auto& v : *g.mutable_input()) {
    std::string what = where + "graph input '" + v.name() + "'";
    TERRACE_CHECK(!v.name().empty() && input_names.insert(v.name()).second, InvalidModel, what,
                  " is empty or listed twice");
    scope.names.insert(v.name());  // an input may share an initializer's name (its default)
    declared_type(v, what);
  }
  for (int i = 0; i < g.node_size(); ++i)
    for (const auto& o : g.node(i).output())
      if (!o.empty()) declare(scope, o, node_what(g.node(i), i, where) + " output");
  for (auto& v : *g.mutable_value_info()) declared_type(v, where + "value info '" + v.name() + "'");

  std::unordered_map<std::string, int64_t> lengths;  // for check_rank_inputs
  auto longest = [&](const std::string& name, const auto& dims, auto value) {
    for (const auto& d : dims) lengths[name] = std::max(lengths[name], value(d));
  };
  for (const auto& t : g.initializer()) longest(t.name(), t.dims(), [](int64_t d) { return d; });
  for (const auto* list : {&g.input(), &g.value_info()})
    for (const auto& v : *list)
      if (v.type().has_tensor_type())
        longest(v.name(), v.type().tensor_type().shape().dim(),
                [](const onnx::TensorShapeProto_Dimension& d) { return d.has_dim_value() ? d.dim_value() : 0; });

  std::set<std::string> free;  // names read here but defined by enclosing graphs
  auto read = [&](const std::string& name, const std::string& what) {
    TERRACE_CHECK(scope.defines(name), InvalidModel, what, " reads '", name,
                  "', which is not defined");
    if (!scope.names.count(name)) free.insert(name);
  };
  std::vector<std::set<std::string>> reads(size_t(g.node_size()));
  for (int i = 0; i < g.node_size(); ++i) {
    onnx::NodeProto& n = *g.mutable_node(i);
    std::string what = node_what(n, i, where);
    op(n, what);
    check_rank_inputs(n, lengths, what);
    reads[size_t(i)] = attributes(n, scope, what);
    for (const std::string& r : reads[size_t(i)]) read(r, what);
    for (const auto& in : n.input())
      if (!in.empty()) {
        read(in, what);
        reads[size_t(i)].insert(in);
      }
  }
  for (auto& v : *g.mutable_output()) {
    std::string what = where + "graph output '" + v.name() + "'";
    TERRACE_CHECK(!v.name().empty(), InvalidModel, what, " has no name");
    read(v.name(), what);
    declared_type(v, what);
  }
  sort_nodes(g, reads, where);
  return free;
}

}  // namespace

void verify_model(onnx::ModelProto& m, const std::string& base_dir, const std::string& link_root) {
  TERRACE_CHECK(m.has_graph(), InvalidModel, "the model has no graph (is this an ONNX file?)");
  int opset = default_opset(m);
  if (opset == -1) {  // fine for a model of other domains only, which Terrace does not support
    for (const auto& n : m.graph().node())
      TERRACE_CHECK(is_default_domain(n.domain()), NotImplemented, "op '", n.op_type(),
                    "' of domain '", n.domain(), "' is not supported (only the default ONNX domain is)");
    fail(ErrorCode::InvalidModel, "the model imports no opset of the default ONNX domain");
  }
  TERRACE_CHECK(opset > 0, InvalidModel, "the default-domain opset version must be positive");
  TERRACE_CHECK(opset <= kMaxOpset, NotImplemented, "default-domain opset ", opset,
                " is not supported (Terrace supports ", kMinOpset, " to ", kMaxOpset, ")");
  Verifier verifier(base_dir, link_root, opset);
  verifier.graph(*m.mutable_graph(), nullptr, "");
  if (std::string w = verifier.minus_one_warning(); !w.empty()) log(LogLevel::Warn, "model: ", w);
}

}  // namespace terrace
