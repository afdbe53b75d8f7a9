// Helpers for the shape-family kernel tests: build one node with attributes, run it, read results.
#pragma once
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "interp/interpreter.h"

namespace terrace::shape_testing {

// An attribute value: an int, float, string, or a list of ints or floats.
struct Attr {
  Attribute a;
  Attr(int64_t i) { a.kind = Attribute::Kind::Int; a.i = i; }
  Attr(int i) : Attr(int64_t(i)) {}
  Attr(float f) { a.kind = Attribute::Kind::Float; a.f = f; }
  Attr(const char* s) { a.kind = Attribute::Kind::String; a.s = s; }
  Attr(std::vector<int64_t> v) { a.kind = Attribute::Kind::Ints; a.ints = std::move(v); }
  Attr(std::vector<float> v) { a.kind = Attribute::Kind::Floats; a.floats = std::move(v); }
};

// Runs `op` on the inputs (undefined tensors are absent optional inputs); returns n_out outputs.
inline std::vector<Tensor> run_op(Op op, const std::vector<Tensor>& in,
                                  std::map<std::string, Attr> attrs = {}, size_t n_out = 1) {
  Node n;
  n.op = op;
  n.name = "node_under_test";
  for (size_t i = 0; i < in.size(); ++i) n.inputs.push_back(in[i].defined() ? int(i) : -1);
  for (size_t i = 0; i < n_out; ++i) n.outputs.push_back(int(in.size() + i));
  for (auto& [k, v] : attrs) n.attrs[k] = v.a;
  std::vector<RValue> values(in.begin(), in.end());
  std::vector<const RValue*> p;
  for (auto& v : values) p.push_back(v.defined() ? &v : nullptr);
  std::vector<Tensor> out;
  for (RValue& v : interpret_node(n, p)) out.push_back(v.tensor);
  return out;
}

inline Tensor run1(Op op, const std::vector<Tensor>& in, std::map<std::string, Attr> attrs = {}) {
  return run_op(op, in, std::move(attrs))[0];
}

template <typename T>
std::vector<T> values_of(const Tensor& t) {
  const T* p = t.data<T>();
  return std::vector<T>(p, p + t.numel());
}

inline std::vector<int64_t> i64(std::initializer_list<int64_t> v) { return v; }

// 0, 1, 2, ... as float32 of the given shape.
inline Tensor iota(Shape shape) {
  Tensor t = Tensor::empty(DType::Float32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = float(i);
  return t;
}

inline Tensor ints(Shape shape, std::vector<int64_t> v) {
  return Tensor::from_vector<int64_t>(std::move(shape), v);
}

// The error a call throws (fails the test if it throws none).
template <typename F>
Error error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected a terrace::Error";
  return Error(ErrorCode::Internal, "no error");
}

}  // namespace terrace::shape_testing
