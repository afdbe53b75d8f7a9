// Helpers for running one elementwise node on given inputs in the elementwise kernel tests.
#pragma once
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "interp/interpreter.h"

namespace terrace::testing {

// An attribute value for make_node: an int, a float or a string.
struct Attr {
  Attribute a;
  Attr(int64_t i) { a.kind = Attribute::Kind::Int; a.i = i; }
  Attr(int i) : Attr(int64_t(i)) {}
  Attr(float f) { a.kind = Attribute::Kind::Float; a.f = f; }
  Attr(const char* s) { a.kind = Attribute::Kind::String; a.s = s; }
};

inline Node make_node(Op op, size_t n_in, std::map<std::string, Attr> attrs = {}) {
  Node n;
  n.op = op;
  n.name = "node_under_test";
  for (size_t i = 0; i < n_in; ++i) n.inputs.push_back(int(i));
  n.outputs = {int(n_in)};
  for (auto& [k, v] : attrs) n.attrs[k] = v.a;
  return n;
}

// Runs the node; an undefined tensor among the inputs is an absent optional input.
inline RValue run_value(const Node& n, const std::vector<RValue>& in) {
  std::vector<const RValue*> p;
  for (auto& v : in) p.push_back(v.defined() ? &v : nullptr);
  return interpret_node(n, p)[0];
}

inline Tensor run(Op op, const std::vector<Tensor>& in, std::map<std::string, Attr> attrs = {}) {
  std::vector<RValue> values(in.begin(), in.end());
  return run_value(make_node(op, in.size(), std::move(attrs)), values).tensor;
}

template <typename T>
std::vector<T> values_of(const Tensor& t) {
  const T* p = t.data<T>();
  return std::vector<T>(p, p + t.numel());
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

}  // namespace terrace::testing
