// Test helpers shared by the kernel tests: attributes, running one node, reading results, errors.
#pragma once
#include <gtest/gtest.h>
#include <omp.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "interp/interpreter.h"
#include "interp/omp_threads.h"
#include "tests/support/attrs.h"

namespace terrace::testing {

// An attribute written as a plain value: an int, float, string, or a list of ints or floats.
struct Attr {
  Attribute a;
  Attr(Attribute x) : a(std::move(x)) {}
  Attr(int64_t i) : a(int_attr(i)) {}
  Attr(int i) : Attr(int64_t(i)) {}
  Attr(float f) : a(float_attr(f)) {}
  Attr(const char* s) : a(str_attr(s)) {}
  Attr(std::vector<int64_t> v) : a(ints_attr(std::move(v))) {}
  Attr(std::vector<float> v) : a(floats_attr(std::move(v))) {}
};

// A node named "node_under_test" reading values 0..n_in-1 and writing value n_in.
inline Node make_node(Op op, size_t n_in, std::map<std::string, Attr> attrs = {}) {
  Node n;
  n.op = op;
  n.name = "node_under_test";
  for (size_t i = 0; i < n_in; ++i) n.inputs.push_back(int(i));
  n.outputs = {int(n_in)};
  for (auto& [k, v] : attrs) n.attrs[k] = v.a;
  return n;
}

// Runs a node on the inputs (an undefined tensor is an absent optional input); returns its outputs.
inline std::vector<Tensor> run_node(const Node& node, const std::vector<Tensor>& in) {
  std::vector<RValue> values(in.begin(), in.end());
  std::vector<const RValue*> p;
  for (auto& v : values) p.push_back(v.defined() ? &v : nullptr);
  std::vector<Tensor> out;
  for (RValue& v : interpret_node(node, p)) out.push_back(v.tensor);
  return out;
}

// Runs `op` named "node_under_test" on the inputs (an undefined tensor is an absent optional
// input); returns its n_out outputs.
inline std::vector<Tensor> run_op(Op op, const std::vector<Tensor>& in,
                                  std::map<std::string, Attr> attrs = {}, size_t n_out = 1) {
  Node n;
  n.op = op;
  n.name = "node_under_test";
  for (size_t i = 0; i < in.size(); ++i) n.inputs.push_back(in[i].defined() ? int(i) : -1);
  for (size_t i = 0; i < n_out; ++i) n.outputs.push_back(int(in.size() + i));
  for (auto& [k, v] : attrs) n.attrs[k] = v.a;
  return run_node(n, in);
}

inline Tensor run1(Op op, const std::vector<Tensor>& in, std::map<std::string, Attr> attrs = {}) {
  return run_op(op, in, std::move(attrs))[0];
}

template <typename T>
std::vector<T> values_of(const Tensor& t) {
  const T* p = t.data<T>();
  return std::vector<T>(p, p + t.numel());
}

// Runs f with OpenMP limited to `threads` threads, restoring the previous limit.
template <typename F>
auto with_threads(int threads, F&& f) {
  ScopedOmpThreads scope(threads);
  return f();
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
