// Graph, Node, Value and attributes: Terrace's in-memory model of an ONNX graph (SSA values).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "interp/tensor.h"

namespace terrace {

enum class Op : uint16_t {
#define TERRACE_OP(name, family) name,
#include "interp/ops.def"
#undef TERRACE_OP
  kCount
};
const char* op_name(Op op);
const char* op_family(Op op);  // "elementwise", "reduce", ...
std::optional<Op> op_from_name(const std::string& name);

struct Graph;

struct Attribute {
  enum class Kind { Int, Float, String, Tensor, Graph, Ints, Floats, Strings, Tensors, Graphs };
  Kind kind = Kind::Int;
  int64_t i = 0;
  float f = 0;
  std::string s;
  terrace::Tensor t;
  std::shared_ptr<terrace::Graph> g;
  std::vector<int64_t> ints;
  std::vector<float> floats;
  std::vector<std::string> strings;
  std::vector<terrace::Tensor> tensors;
  std::vector<std::shared_ptr<terrace::Graph>> graphs;
};

// What a value holds at run time. Sequences and optionals exist for control-flow ops.
enum class ValueKind : uint8_t { Tensor, Sequence, Optional, Unknown };

// Static facts about a value; a dim of -1 is unknown (symbolic or not inferred).
struct ValueInfo {
  ValueKind kind = ValueKind::Tensor;
  std::optional<DType> dtype;
  std::optional<std::vector<int64_t>> shape;  // absent: rank unknown
  std::vector<std::string> dim_names;          // symbolic dim names where known, else ""
};

struct Value {
  std::string name;
  ValueInfo info;
  int producer = -1;  // node index, or -1 for graph inputs, initializers and captures
};

struct Node {
  Op op = Op::Identity;
  std::string name;       // the ONNX node name (may be empty)
  std::string anonymous;  // for a node without a name, how errors point to it: "#7 -> 'y'"
  std::vector<int> inputs;   // value ids; -1 is an absent optional input
  std::vector<int> outputs;  // value ids; -1 is an absent optional output
  std::map<std::string, Attribute> attrs;

  bool has_attr(const std::string& k) const { return attrs.count(k) != 0; }
  // Typed attribute access; the defaulted forms return the default when the attribute is absent.
  // A present attribute of the wrong kind is an InvalidModel error naming node and attribute.
  int64_t attr_int(const std::string& k) const;
  int64_t attr_int(const std::string& k, int64_t def) const;
  float attr_float(const std::string& k, float def) const;
  std::string attr_string(const std::string& k, const std::string& def) const;
  std::vector<int64_t> attr_ints(const std::string& k, std::vector<int64_t> def = {}) const;
  std::vector<float> attr_floats(const std::string& k, std::vector<float> def = {}) const;
  std::vector<std::string> attr_strings(const std::string& k, std::vector<std::string> def = {}) const;
  const Tensor& attr_tensor(const std::string& k) const;
  const Graph& attr_graph(const std::string& k) const;
  const Attribute* find_attr(const std::string& k) const;
  std::string describe() const;  // "Conv 'conv1'", or "Conv #7 -> 'y'" for a node without a name
  // The graphs held in this node's attributes (If/Loop/Scan bodies).
  std::vector<const Graph*> subgraphs() const;
};

struct Graph {
  std::string name;
  std::vector<Value> values;
  std::vector<Node> nodes;  // topologically sorted
  std::vector<int> inputs;   // value ids of graph inputs (initializers excluded)
  std::vector<int> outputs;  // value ids of graph outputs
  std::unordered_map<int, Tensor> initializers;  // value id -> constant
  // Values a subgraph reads from enclosing graphs, by name (resolved at run time).
  std::vector<int> captures;
  int opset = 17;  // default-domain opset version
  // What loading noticed and worked around (declared shapes the graph contradicts, ...): logged
  // at load and repeated in Session reports.
  std::vector<std::string> warnings;

  int find_value(const std::string& name) const;  // -1 if absent
  int add_value(std::string name, ValueInfo info = {});
  const Value& value(int id) const { return values.at(size_t(id)); }
  // Values of this graph that the subgraphs of `node` read from their enclosing scope.
  std::vector<int> captured_by(const Node& node) const;

  std::unordered_map<std::string, int> value_index;
};

// A runtime value: a tensor, a sequence of tensors, or an optional (present or empty).
struct RValue {
  ValueKind kind = ValueKind::Tensor;
  Tensor tensor;                // Tensor kind, or the element of a present optional tensor
  std::vector<Tensor> seq;      // Sequence kind, or the element of a present optional sequence
  bool has_element = false;     // Optional kind
  ValueKind elem_kind = ValueKind::Tensor;  // Optional kind: what it holds (or would hold)

  RValue() = default;
  RValue(Tensor t) : kind(ValueKind::Tensor), tensor(std::move(t)) {}
  static RValue sequence(std::vector<Tensor> s) {
    RValue v; v.kind = ValueKind::Sequence; v.seq = std::move(s); return v;
  }
  bool defined() const { return kind != ValueKind::Tensor || tensor.defined(); }
};

}  // namespace terrace
