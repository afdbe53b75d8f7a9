// Helpers for the reduce/linalg kernel tests: run one node, make tensors, run at a thread count.
#pragma once
#include <gtest/gtest.h>
#include <omp.h>

#include <random>
#include <string>
#include <vector>

#include "interp/interpreter.h"

namespace terrace::testing {

inline Attribute int_attr(int64_t v) { Attribute a; a.kind = Attribute::Kind::Int; a.i = v; return a; }
inline Attribute float_attr(float v) { Attribute a; a.kind = Attribute::Kind::Float; a.f = v; return a; }
inline Attribute str_attr(std::string s) { Attribute a; a.kind = Attribute::Kind::String; a.s = std::move(s); return a; }
inline Attribute ints_attr(std::vector<int64_t> v) {
  Attribute a; a.kind = Attribute::Kind::Ints; a.ints = std::move(v); return a;
}

// Runs `op` on the inputs (an undefined tensor is an absent optional input); returns all outputs.
inline std::vector<Tensor> run_node(Op op, const std::vector<Tensor>& in,
                                    std::map<std::string, Attribute> attrs = {}, int n_out = 1) {
  Node n;
  n.op = op;
  n.name = "under_test";
  n.attrs = std::move(attrs);
  std::vector<RValue> vals(in.begin(), in.end());
  std::vector<const RValue*> p;
  for (size_t i = 0; i < in.size(); ++i) {
    n.inputs.push_back(in[i].defined() ? int(i) : -1);
    p.push_back(in[i].defined() ? &vals[i] : nullptr);
  }
  for (int i = 0; i < n_out; ++i) n.outputs.push_back(int(in.size()) + i);
  std::vector<Tensor> out;
  for (auto& v : interpret_node(n, p)) out.push_back(v.tensor);
  return out;
}

inline Tensor run1(Op op, const std::vector<Tensor>& in, std::map<std::string, Attribute> attrs = {}) {
  return run_node(op, in, std::move(attrs))[0];
}

// A float tensor of uniform values in [-1, 1) from a fixed seed.
inline Tensor random_tensor(Shape shape, unsigned seed) {
  Tensor t = Tensor::empty(DType::Float32, std::move(shape));
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(gen);
  return t;
}

template <typename T>
std::vector<T> values_of(const Tensor& t) {
  return std::vector<T>(t.data<T>(), t.data<T>() + t.numel());
}

// Runs f with OpenMP limited to `threads` threads, restoring the previous limit.
template <typename F>
auto with_threads(int threads, F&& f) {
  const int before = omp_get_max_threads();
  omp_set_num_threads(threads);
  auto r = f();
  omp_set_num_threads(before);
  return r;
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
