// Helpers for the graph-pass tests: shapes on built graphs, running graphs on the interpreter,
// comparing the optimized graph's outputs with the original's.
#pragma once
#include <gtest/gtest.h>

#include "interp/compare.h"
#include "interp/interpreter.h"
#include "tests/support/graph_builder.h"
#include "tiers/passes/graph_edit.h"
#include "tiers/passes/pipeline.h"

namespace terrace::testing {

inline void set_shape(Graph& g, int v, Shape s) { g.values[size_t(v)].info.shape = std::move(s); }

inline Attribute tensor_attr(Tensor t) {
  Attribute a;
  a.kind = Attribute::Kind::Tensor;
  a.t = std::move(t);
  return a;
}

inline int count_ops(const Graph& g, Op op) {
  int n = 0;
  for (const Node& node : g.nodes) n += node.op == op;
  return n;
}

inline std::vector<std::string> output_names(const Graph& g) {
  std::vector<std::string> names;
  for (int v : g.outputs) names.push_back(g.value(v).name);
  return names;
}

inline std::vector<std::string> input_names(const Graph& g) {
  std::vector<std::string> names;
  for (int v : g.inputs) names.push_back(g.value(v).name);
  return names;
}

// Runs both graphs on the interpreter and checks every output: bitwise (NaNs where the original
// has them) when `exact`, else within the dtype's tolerance.
inline void expect_same_outputs(const Graph& original, const Graph& optimized, const std::vector<RValue>& inputs,
                                bool exact = true) {
  ASSERT_EQ(input_names(original), input_names(optimized));
  ASSERT_EQ(output_names(original), output_names(optimized));
  std::vector<RValue> want = interpret(original, inputs);
  std::vector<RValue> got = interpret(optimized, inputs);
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(want[i].kind, ValueKind::Tensor);
    ASSERT_EQ(got[i].kind, ValueKind::Tensor);
    Tolerance tol = Tolerance::for_dtype(want[i].tensor.dtype());
    if (exact) tol.rtol = tol.atol = 0;
    Comparison c = compare_tensors(want[i].tensor, got[i].tensor, tol);
    EXPECT_TRUE(c.equal) << "output " << original.value(original.outputs[i]).name << ": " << c.message;
  }
}

inline std::shared_ptr<Graph> optimized(const std::shared_ptr<Graph>& g, OptimizeLevel level = OptimizeLevel::Extended,
                                        const passes::PassConfig& config = {}) {
  return std::const_pointer_cast<Graph>(optimize_graph(g, level, config));
}

// A fusion pass's checks: `g` optimized holds one `op` among `nodes` nodes and gives the
// interpreter's answers within tolerance (returned, for more checks); or none, bitwise the same.
inline std::shared_ptr<Graph> expect_fused_into(const std::shared_ptr<Graph>& g, Op op, size_t nodes,
                                                const std::vector<RValue>& inputs) {
  auto opt = optimized(g);
  EXPECT_EQ(count_ops(*opt, op), 1) << passes::graph_text(*opt);
  EXPECT_EQ(opt->nodes.size(), nodes) << passes::graph_text(*opt);
  expect_same_outputs(*g, *opt, inputs, /*exact=*/false);
  return opt;
}
inline void expect_not_fused_into(const std::shared_ptr<Graph>& g, Op op, const std::vector<RValue>& inputs) {
  auto opt = optimized(g);
  EXPECT_EQ(count_ops(*opt, op), 0) << passes::graph_text(*opt);
  expect_same_outputs(*g, *opt, inputs);
}

}  // namespace terrace::testing
