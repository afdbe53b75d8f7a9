// Helpers for the reduce/linalg kernel tests: run one node, make tensors, run at a thread count.
#pragma once
#include <random>
#include <vector>

#include "interp/interpreter.h"
#include "tests/support/node_runner.h"

namespace terrace::testing {

// Runs `op` on the inputs; returns all n_out outputs (tests/support/node_runner.h's run_op).
inline std::vector<Tensor> run_node(Op op, const std::vector<Tensor>& in, std::map<std::string, Attr> attrs = {},
                                    int n_out = 1) {
  return run_op(op, in, std::move(attrs), size_t(n_out));
}

// A float tensor of uniform values in [-1, 1) from a fixed seed.
inline Tensor random_tensor(Shape shape, unsigned seed) {
  Tensor t = Tensor::empty(DType::Float32, std::move(shape));
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(gen);
  return t;
}

}  // namespace terrace::testing
