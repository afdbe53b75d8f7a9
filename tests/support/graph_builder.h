// Builds small graphs in C++ for tests (no ONNX file needed).
#pragma once
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "interp/graph.h"
#include "tests/support/attrs.h"

namespace terrace::testing {

class GraphBuilder {
 public:
  GraphBuilder() : g_(std::make_shared<Graph>()) { g_->name = "test"; }

  int input(const std::string& name, DType dtype, Shape shape) {
    ValueInfo info;
    info.dtype = dtype;
    info.shape = std::move(shape);
    int id = g_->add_value(name, info);
    g_->inputs.push_back(id);
    return id;
  }
  int constant(const std::string& name, Tensor t) {
    ValueInfo info;
    info.dtype = t.dtype();
    info.shape = t.shape();
    int id = g_->add_value(name, info);
    g_->initializers[id] = std::move(t);
    return id;
  }
  // Adds a node and returns its first output's id (outputs are named "<op><n>_<k>").
  int node(Op op, std::vector<int> inputs, std::map<std::string, Attribute> attrs = {}, int outputs = 1,
           std::optional<DType> out_dtype = std::nullopt) {
    Node n;
    n.op = op;
    n.name = std::string(op_name(op)) + std::to_string(g_->nodes.size());
    n.inputs = std::move(inputs);
    n.attrs = std::move(attrs);
    int first = -1;
    for (int k = 0; k < outputs; ++k) {
      ValueInfo info;
      info.dtype = out_dtype ? out_dtype : dtype_of_input(n);
      int id = g_->add_value(n.name + "_" + std::to_string(k), info);
      g_->values[size_t(id)].producer = int(g_->nodes.size());
      n.outputs.push_back(id);
      if (k == 0) first = id;
    }
    g_->nodes.push_back(std::move(n));
    return first;
  }
  void output(int id) { g_->outputs.push_back(id); }
  std::shared_ptr<Graph> build() { return g_; }

  static Attribute attr_int(int64_t v) { return int_attr(v); }
  static Attribute attr_float(float v) { return float_attr(v); }
  static Attribute attr_ints(std::vector<int64_t> v) { return ints_attr(std::move(v)); }

 private:
  std::optional<DType> dtype_of_input(const Node& n) const {
    for (int v : n.inputs)
      if (v >= 0) return g_->values[size_t(v)].info.dtype;
    return std::nullopt;
  }
  std::shared_ptr<Graph> g_;
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
