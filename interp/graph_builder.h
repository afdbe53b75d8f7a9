// GraphBuilder: the public C++ API for building a graph in code (no ONNX file), for
// Session::from_graph. Values are named as in ONNX; build() validates as ONNX import does.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "interp/graph.h"
#include "interp/tensor.h"

namespace terrace {

// One dim of a declared shape: a size, or a symbolic name ("batch") whose size each run binds
// (-1: a size unknown and unnamed).
struct Dim {
  int64_t size = -1;
  std::string name;
  Dim(int64_t s) : size(s) {}
  Dim(int s) : size(s) {}
  Dim(const char* n) : name(n) {}
  Dim(std::string n) : name(std::move(n)) {}
};

class GraphBuilder;

// An attribute written as a plain value: 1, 0.5f, "same", std::vector<int64_t>{0, 2, 1},
// std::vector<float>{...}, std::vector<std::string>{...}, a Tensor, or a GraphBuilder (an
// If/Loop/Scan body: a copy of its graph as recorded so far, validated with the graph holding it).
struct AttrValue {
  Attribute attr;
  AttrValue(Attribute a) : attr(std::move(a)) {}
  AttrValue(int64_t v);
  AttrValue(int v) : AttrValue(int64_t(v)) {}
  AttrValue(float v);
  AttrValue(double v) : AttrValue(float(v)) {}
  AttrValue(const char* v) : AttrValue(std::string(v)) {}
  AttrValue(std::string v);
  AttrValue(std::vector<int64_t> v);
  AttrValue(std::vector<float> v);
  AttrValue(std::vector<std::string> v);
  AttrValue(Tensor v);
  AttrValue(const GraphBuilder& body);
};
using Attrs = std::map<std::string, AttrValue>;

// Records inputs, constants, nodes and outputs, then build() gives a Graph:
//
//   terrace::GraphBuilder b;
//   auto x = b.input("x", terrace::DType::Float32, {"batch", 4});
//   auto w = b.constant("w", terrace::Tensor::from_vector<float>({4, 2}, {...}));
//   b.output(b.op("Relu", {b.op("MatMul", {x, w})}));
//   auto session = terrace::Session::from_graph(b.build());
//
// Methods that add a value return its name. Errors are terrace::Error naming the node,
// attribute or value at fault: an unknown op type when the node is added (NotImplemented),
// the rest when build() validates.
class GraphBuilder {
 public:
  explicit GraphBuilder(std::string graph_name = "graph", int opset = 17);
  // A copy records on its own copy of the graph.
  GraphBuilder(const GraphBuilder& other) : g_(std::make_shared<Graph>(*other.g_)) {}
  GraphBuilder& operator=(const GraphBuilder& other) {
    g_ = std::make_shared<Graph>(*other.g_);
    return *this;
  }
  GraphBuilder(GraphBuilder&&) = default;
  GraphBuilder& operator=(GraphBuilder&&) = default;

  // A graph input of the given dtype and shape.
  std::string input(const std::string& name, DType dtype, const std::vector<Dim>& shape);
  // A constant (an ONNX initializer).
  std::string constant(const std::string& name, Tensor value);
  // A node of `op_type` (an ONNX op of the default domain: "MatMul", "Conv", ...) reading
  // `inputs` by name ("" for an absent optional input); a name no input, constant or node of
  // this graph defines is read from the enclosing graph (a body's capture). The node is named
  // "<op_type><index>", its outputs "<node name>_<k>". The one-output form returns that output.
  std::string op(const std::string& op_type, const std::vector<std::string>& inputs, const Attrs& attrs = {});
  std::vector<std::string> op(const std::string& op_type, const std::vector<std::string>& inputs,
                              const Attrs& attrs, int num_outputs);
  // The same with the node's name and its output names chosen ("" for an absent optional output).
  std::vector<std::string> node(const std::string& op_type, const std::string& node_name,
                                const std::vector<std::string>& inputs, const Attrs& attrs,
                                const std::vector<std::string>& outputs);
  // Marks a value as a graph output; its type is inferred at build().
  void output(const std::string& name);
  // The same with its type declared (required for the outputs of a body, whose types ONNX's
  // checker wants before inference runs).
  void output(const std::string& name, DType dtype, const std::vector<Dim>& shape);

  // Validates the recorded graph exactly as ONNX import validates a loaded model (Terrace's
  // checks, ONNX's checker, shape inference) and returns the graph it converts to: what
  // Session::load would give for the same model. Throws terrace::Error (InvalidModel,
  // NotImplemented, ...) naming what is at fault.
  std::shared_ptr<Graph> build() const;
  // The same, serialized as an ONNX model (for other tools, or Session::load_bytes).
  std::string to_onnx() const;

  // The graph as recorded, neither validated nor inferred: for tests of what comes after import
  // (passes, tiers) on graphs import would reject or annotate. Session users want build().
  const std::shared_ptr<Graph>& recorded() const { return g_; }

 private:
  int value_for_read(const std::string& name);
  std::shared_ptr<Graph> g_;
};

}  // namespace terrace
