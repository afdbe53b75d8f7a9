// If, Loop and Scan reference kernels, on small hand-built graphs whose bodies use no other ops.
#include <gtest/gtest.h>

#include "interp/interpreter.h"
#include "tests/support/node_runner.h"

namespace terrace {
namespace {

using testing::graph_attr;
using testing::ints_attr;

// A graph whose outputs are values it names: inputs, captures or node outputs.
struct GraphBuilder {
  std::shared_ptr<Graph> g = std::make_shared<Graph>();
  int value(const std::string& name) {
    int id = g->find_value(name);
    return id >= 0 ? id : g->add_value(name);
  }
  GraphBuilder& input(const std::string& n) { g->inputs.push_back(value(n)); return *this; }
  GraphBuilder& capture(const std::string& n) { g->captures.push_back(value(n)); return *this; }
  GraphBuilder& output(const std::string& n) { g->outputs.push_back(value(n)); return *this; }
  Node& node(Op op, std::vector<std::string> ins, std::vector<std::string> outs) {
    Node n;
    n.op = op;
    n.name = std::string(op_name(op)) + "_" + std::to_string(g->nodes.size());
    for (auto& s : ins) n.inputs.push_back(s.empty() ? -1 : value(s));
    for (auto& s : outs) n.outputs.push_back(value(s));
    int idx = int(g->nodes.size());
    for (int o : n.outputs) g->values[size_t(o)].producer = idx;
    g->nodes.push_back(std::move(n));
    return g->nodes.back();
  }
};


std::vector<float> floats(const Tensor& t) {
  std::vector<float> v;
  for (int64_t i = 0; i < t.numel(); ++i) v.push_back(float(t.get_as_double(i)));
  return v;
}

// Runs one node with the given inputs (absent ones as default RValues).
std::vector<RValue> run(const Node& n, const std::vector<RValue>& in) {
  std::vector<const RValue*> p;
  for (auto& v : in) p.push_back(v.defined() ? &v : nullptr);
  return interpret_node(n, p);
}

Node if_node(std::shared_ptr<Graph> then_g, std::shared_ptr<Graph> else_g, int n_out) {
  Node n;
  n.op = Op::If;
  n.name = "branch";
  n.inputs = {0};
  for (int i = 0; i < n_out; ++i) n.outputs.push_back(1 + i);
  n.attrs["then_branch"] = graph_attr(std::move(then_g));
  n.attrs["else_branch"] = graph_attr(std::move(else_g));
  return n;
}

// A branch that returns `len`, computed by inserting the outer value t into a sequence len times.
std::shared_ptr<Graph> branch_returning_length(int64_t len) {
  GraphBuilder b;
  b.node(Op::SequenceEmpty, {}, {"s0"});
  for (int64_t i = 0; i < len; ++i)
    b.node(Op::SequenceInsert, {"s" + std::to_string(i), "t"}, {"s" + std::to_string(i + 1)});
  if (len > 0) b.capture("t");
  b.node(Op::SequenceLength, {"s" + std::to_string(len)}, {"n"});
  b.output("n");
  return b.g;
}

TEST(ControlFlow, if_runs_the_branch_its_condition_selects) {
  // Outer graph: If(cond) with branches that read the outer value t.
  GraphBuilder outer;
  outer.input("cond").input("t");
  Node& n = outer.node(Op::If, {"cond"}, {"r"});
  n.attrs["then_branch"] = graph_attr(branch_returning_length(3));
  n.attrs["else_branch"] = graph_attr(branch_returning_length(1));
  outer.output("r");
  for (bool c : {true, false}) {
    auto out = interpret(*outer.g, {RValue(Tensor::scalar<bool>(c)), RValue(Tensor::scalar<float>(1))});
    EXPECT_EQ(out[0].tensor.get_as_int64(0), c ? 3 : 1);
  }
}

TEST(ControlFlow, if_rejects_a_condition_that_is_not_one_bool) {
  Node n = if_node(branch_returning_length(0), branch_returning_length(0), 1);
  try {
    run(n, {RValue(Tensor::from_vector<bool>({2}, {true, false}))});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("If 'branch'"), std::string::npos) << e.what();
  }
}

TEST(ControlFlow, if_rejects_a_branch_with_the_wrong_number_of_outputs) {
  Node n = if_node(branch_returning_length(0), branch_returning_length(0), 2);
  EXPECT_THROW(run(n, {RValue(Tensor::scalar<bool>(true))}), Error);
}

// Loop body (i, cond, carried) -> (cond, i as carried, i as scan output): passes values through.
std::shared_ptr<Graph> counting_body() {
  GraphBuilder b;
  b.input("i").input("c").input("v");
  b.output("c").output("i").output("i");
  return b.g;
}

Node loop_node(std::shared_ptr<Graph> body, int n_in, int n_out) {
  Node n;
  n.op = Op::Loop;
  n.name = "loop";
  for (int i = 0; i < n_in; ++i) n.inputs.push_back(i);
  for (int i = 0; i < n_out; ++i) n.outputs.push_back(n_in + i);
  n.attrs["body"] = graph_attr(std::move(body));
  return n;
}

TEST(ControlFlow, loop_carries_values_and_stacks_scan_outputs_along_a_new_axis) {
  Node n = loop_node(counting_body(), 3, 2);
  auto out = run(n, {RValue(Tensor::scalar<int64_t>(4)), RValue(), RValue(Tensor::scalar<int64_t>(-1))});
  EXPECT_EQ(out[0].tensor.get_as_int64(0), 3);
  EXPECT_EQ(out[1].tensor.shape(), (Shape{4}));
  EXPECT_EQ(out[1].tensor.to_int64_vector(), (std::vector<int64_t>{0, 1, 2, 3}));
}

TEST(ControlFlow, loop_with_false_condition_runs_zero_times) {
  Node n = loop_node(counting_body(), 3, 2);
  auto out = run(n, {RValue(Tensor::scalar<int64_t>(4)), RValue(Tensor::scalar<bool>(false)),
                     RValue(Tensor::scalar<int64_t>(-1))});
  EXPECT_EQ(out[0].tensor.get_as_int64(0), -1);
  EXPECT_EQ(out[1].tensor.numel(), 0);
}

TEST(ControlFlow, loop_with_many_iterations_is_linear) {
  Node n = loop_node(counting_body(), 3, 2);
  auto out = run(n, {RValue(Tensor::scalar<int64_t>(20000)), RValue(Tensor::scalar<bool>(true)),
                     RValue(Tensor::scalar<int64_t>(0))});
  ASSERT_EQ(out[1].tensor.numel(), 20000);
  EXPECT_EQ(out[1].tensor.get_as_int64(19999), 19999);
}

TEST(ControlFlow, loop_rejects_a_body_with_the_wrong_number_of_outputs) {
  GraphBuilder b;
  b.input("i").input("c").input("v").output("c");
  Node n = loop_node(b.g, 3, 1);
  try {
    run(n, {RValue(Tensor::scalar<int64_t>(1)), RValue(), RValue(Tensor::scalar<int64_t>(0))});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidModel);
    EXPECT_NE(std::string(e.what()).find("Loop 'loop'"), std::string::npos) << e.what();
  }
}

// A scan output whose shape changes is an error at the iteration where it changes, not after the
// last one: with a trip count of 2^62 the loop would otherwise never end.
TEST(ControlFlow, loop_reports_a_scan_output_changing_shape_at_that_iteration) {
  GraphBuilder b;
  b.input("i").input("c").input("v");
  b.node(Op::Concat, {"v", "v"}, {"v2"}).attrs["axis"] = testing::int_attr(0);  // doubles every iteration
  b.output("c").output("v2").output("v2");
  Node n = loop_node(b.g, 3, 2);
  try {
    run(n, {RValue(Tensor::scalar<int64_t>(int64_t(1) << 62)), RValue(Tensor::scalar<bool>(true)),
            RValue(Tensor::from_vector<float>({1}, {1.0f}))});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("Loop 'loop': scan output 0 of iteration 1 is float32[4]"), std::string::npos)
        << e.what();
  }
}

TEST(ControlFlow, loop_carries_sequences) {
  GraphBuilder b;
  b.input("i").input("c").input("s");
  b.node(Op::SequenceInsert, {"s", "i"}, {"s2"});
  b.output("c").output("s2");
  Node n = loop_node(b.g, 3, 1);
  auto out = run(n, {RValue(Tensor::scalar<int64_t>(3)), RValue(Tensor::scalar<bool>(true)),
                     RValue::sequence({})});
  ASSERT_EQ(out[0].kind, ValueKind::Sequence);
  ASSERT_EQ(out[0].seq.size(), 3u);
  EXPECT_EQ(out[0].seq[2].get_as_int64(0), 2);
}

// Scan body (state, x) -> (state, x): the scan output replays the slices it was given.
Node scan_node(std::vector<int64_t> in_dirs, std::vector<int64_t> out_axes) {
  GraphBuilder b;
  b.input("s").input("x").output("s").output("x");
  Node n;
  n.op = Op::Scan;
  n.name = "scan";
  n.inputs = {0, 1};
  n.outputs = {2, 3};
  n.attrs["body"] = graph_attr(b.g);
  Attribute m;
  m.i = 1;
  n.attrs["num_scan_inputs"] = m;
  n.attrs["scan_input_directions"] = ints_attr(std::move(in_dirs));
  n.attrs["scan_output_axes"] = ints_attr(std::move(out_axes));
  return n;
}

TEST(ControlFlow, scan_reverses_inputs_and_places_outputs_on_the_requested_axis) {
  Tensor x = Tensor::from_vector<float>({3, 2}, {1, 2, 3, 4, 5, 6});
  auto out = run(scan_node({1}, {1}), {RValue(Tensor::scalar<float>(7)), RValue(x)});
  EXPECT_EQ(out[0].tensor.get_as_double(0), 7);
  EXPECT_EQ(out[1].tensor.shape(), (Shape{2, 3}));
  // Slices in reverse order [5,6],[3,4],[1,2], stacked along axis 1.
  EXPECT_EQ(floats(out[1].tensor), (std::vector<float>{5, 3, 1, 6, 4, 2}));
}

TEST(ControlFlow, scan_forward_stacks_along_axis_0) {
  Tensor x = Tensor::from_vector<float>({3, 2}, {1, 2, 3, 4, 5, 6});
  auto out = run(scan_node({0}, {0}), {RValue(Tensor::scalar<float>(7)), RValue(x)});
  EXPECT_EQ(out[1].tensor.shape(), (Shape{3, 2}));
  EXPECT_EQ(floats(out[1].tensor), floats(x));
}

}  // namespace
}  // namespace terrace
