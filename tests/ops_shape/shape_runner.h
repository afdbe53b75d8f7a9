// Helpers for the shape-family kernel tests: build one node with attributes, run it, read results.
#pragma once
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "interp/interpreter.h"
#include "tests/support/node_runner.h"

namespace terrace::shape_testing {

using testing::Attr;
using testing::error_of;
using testing::run1;
using testing::run_op;
using testing::values_of;

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

}  // namespace terrace::shape_testing
