// Helpers for running one elementwise node on given inputs in the elementwise kernel tests.
#pragma once
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "interp/interpreter.h"
#include "tests/support/node_runner.h"

namespace terrace::testing {

// Runs the node; an undefined tensor among the inputs is an absent optional input.
inline RValue run_value(const Node& n, const std::vector<RValue>& in) {
  std::vector<const RValue*> p;
  for (auto& v : in) p.push_back(v.defined() ? &v : nullptr);
  return interpret_node(n, p)[0];
}

inline Tensor run(Op op, const std::vector<Tensor>& in, std::map<std::string, Attr> attrs = {}) {
  return run1(op, in, std::move(attrs));
}

}  // namespace terrace::testing
