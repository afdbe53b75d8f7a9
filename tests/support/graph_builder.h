// Builds small graphs in C++ for tests (no ONNX file needed).
#pragma once
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "interp/graph.h"
#include "interp/graph_builder.h"
#include "tests/support/attrs.h"

namespace terrace::testing {

// The public builder (interp/graph_builder.h) with tests' conveniences: values as ids, ops as
// Op, a node's output dtype given or taken from its first input, and build() returning the
// recorded graph as written (no validation or inference), which tests of the passes and tiers
// need and may edit. A test that wants the import's validation calls validated().
class GraphBuilder {
 public:
  GraphBuilder() : b_("test") {}

  int input(const std::string& name, DType dtype, Shape shape) {
    b_.input(name, dtype, std::vector<Dim>(shape.begin(), shape.end()));
    return id_of(name);
  }
  int constant(const std::string& name, Tensor t) { return id_of(b_.constant(name, std::move(t))); }
  // Adds a node and returns its first output's id (outputs are named "<op><n>_<k>").
  int node(Op op, std::vector<int> inputs, std::map<std::string, Attribute> attrs = {}, int outputs = 1,
           std::optional<DType> out_dtype = std::nullopt) {
    std::vector<std::string> names;
    std::optional<DType> first_input_dtype;
    for (int v : inputs) {
      names.push_back(v >= 0 ? graph().value(v).name : "");
      if (v >= 0 && !first_input_dtype) first_input_dtype = graph().value(v).info.dtype;
    }
    Attrs a;
    for (auto& [k, v] : attrs) a.emplace(k, std::move(v));
    std::vector<std::string> outs = b_.op(op_name(op), names, a, outputs);
    for (const std::string& o : outs) graph().values[size_t(id_of(o))].info.dtype = out_dtype ? out_dtype : first_input_dtype;
    return id_of(outs[0]);
  }
  void output(int id) { b_.output(graph().value(id).name); }
  std::shared_ptr<Graph> build() { return b_.recorded(); }
  // The graph as Session::load would give it: validated and inferred by the import path.
  std::shared_ptr<Graph> validated() const { return b_.build(); }
  terrace::GraphBuilder& public_builder() { return b_; }

  static Attribute attr_int(int64_t v) { return int_attr(v); }
  static Attribute attr_float(float v) { return float_attr(v); }
  static Attribute attr_ints(std::vector<int64_t> v) { return ints_attr(std::move(v)); }

 private:
  Graph& graph() { return *b_.recorded(); }
  int id_of(const std::string& name) { return graph().find_value(name); }
  terrace::GraphBuilder b_;
};

// A float32 tensor of the given shape with values uniform in [lo, hi), from a fixed seed.
inline Tensor random_tensor(Shape shape, uint64_t seed, float lo = -1, float hi = 1) {
  Tensor t = Tensor::empty(DType::Float32, std::move(shape));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

}  // namespace terrace::testing
