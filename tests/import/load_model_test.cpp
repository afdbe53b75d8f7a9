// Importer tests on valid models: values, initializers, attributes, subgraphs and node order.
#include <algorithm>
#include <filesystem>
#include <fstream>

#include "tests/import/import_util.h"

namespace terrace::test {
namespace {

const Value& value_named(const Graph& g, const std::string& name) {
  int id = g.find_value(name);
  EXPECT_GE(id, 0) << name;
  return g.value(id);
}

TEST(Import, small_model_loads_inputs_outputs_and_initializers) {
  Model m = load_onnx_bytes(bytes_of(parse_model(kSmallModel)));
  const Graph& g = *m.graph;
  EXPECT_EQ(m.ir_version, 8);
  EXPECT_EQ(m.opsets.at(""), 17);
  EXPECT_EQ(g.opset, 17);
  ASSERT_EQ(g.inputs.size(), 1u);
  EXPECT_EQ(g.value(g.inputs[0]).name, "X");
  ASSERT_EQ(g.outputs.size(), 1u);
  EXPECT_EQ(g.value(g.outputs[0]).name, "Y");
  ASSERT_EQ(g.nodes.size(), 2u);
  EXPECT_EQ(g.nodes[0].op, Op::Add);
  EXPECT_EQ(g.nodes[1].op, Op::Relu);
  int b = g.find_value("B");
  ASSERT_TRUE(g.initializers.count(b));
  const Tensor& bt = g.initializers.at(b);
  EXPECT_EQ(bt.shape(), Shape({3}));
  EXPECT_EQ(bt.data<float>()[2], 3.0f);
}

TEST(Import, symbolic_dims_are_minus_one_with_their_names) {
  Model m = load_onnx_bytes(bytes_of(parse_model(kSmallModel)));
  const ValueInfo& x = value_named(*m.graph, "X").info;
  ASSERT_TRUE(x.shape.has_value());
  EXPECT_EQ(*x.shape, Shape({-1, 3}));
  EXPECT_EQ(x.dim_names[0], "N");
  EXPECT_EQ(x.dtype, DType::Float32);
}

// ONNX's checker wants a shape field on the graph's inputs and outputs; ONNX Runtime loads a model
// whose output has none (rank unknown), and so does Terrace, leaving the rank unknown where
// inference cannot tell it (a Reshape by data) and running it.
TEST(Import, an_output_without_a_shape_field_loads_with_its_rank_unknown) {
  onnx::ModelProto mp = parse_model(R"(
<ir_version: 8, opset_import: ["" : 11]>
g (float[6, 4] X, int64[3] S) => (float Y)
{
  R = Reshape(X, S)
  Y = Softmax(R)
}
)");
  mp.mutable_graph()->mutable_output(0)->mutable_type()->mutable_tensor_type()->clear_shape();
  Model m = load_onnx_bytes(bytes_of(mp));
  const ValueInfo& y = value_named(*m.graph, "Y").info;
  EXPECT_EQ(y.dtype, DType::Float32);
  EXPECT_FALSE(y.shape.has_value()) << "a Reshape by data leaves the rank unknown";
}

TEST(Import, shape_inference_fills_intermediate_values) {
  Model m = load_onnx_bytes(bytes_of(parse_model(kSmallModel)));
  const ValueInfo& t = value_named(*m.graph, "T").info;
  EXPECT_EQ(t.kind, ValueKind::Tensor);
  EXPECT_EQ(t.dtype, DType::Float32);
  ASSERT_TRUE(t.shape.has_value());
  EXPECT_EQ((*t.shape)[1], 3);
}

TEST(Import, input_that_is_an_initializer_is_not_a_graph_input) {
  Model m = load_onnx_bytes(bytes_of(parse_model(R"(
<ir_version: 8, opset_import: ["" : 17]>
g (float[3] X, float[3] B) => (float[3] Y)
<float[3] B = {1.0, 2.0, 3.0}>
{ Y = Add(X, B) }
)")));
  ASSERT_EQ(m.graph->inputs.size(), 1u);
  EXPECT_EQ(m.graph->value(m.graph->inputs[0]).name, "X");
}

TEST(Import, unsorted_nodes_are_sorted) {
  onnx::ModelProto p = parse_model(kSmallModel);
  p.mutable_graph()->mutable_node()->SwapElements(0, 1);
  Model m = load_onnx_bytes(bytes_of(p));
  EXPECT_EQ(m.graph->nodes[0].op, Op::Add);
  EXPECT_EQ(m.graph->nodes[1].op, Op::Relu);
  EXPECT_EQ(m.graph->value(m.graph->nodes[1].inputs[0]).producer, 0);
}

TEST(Import, constant_attributes_and_empty_optional_inputs_convert) {
  Model m = load_onnx_bytes(bytes_of(parse_model(R"(
<ir_version: 8, opset_import: ["" : 17]>
g (float[2,3] X) => (float[2,3] Y)
{
  lo = Constant<value_float = 0.5>()
  shape = Constant<value_ints = [2, 3]>()
  c = Clip(X, lo, )
  Y = Reshape(c, shape)
}
)")));
  const Graph& g = *m.graph;
  EXPECT_EQ(g.nodes[0].attrs.at("value_float").f, 0.5f);
  EXPECT_EQ(g.nodes[1].attr_ints("value_ints"), std::vector<int64_t>({2, 3}));
  const Node& clip = g.nodes[2];
  ASSERT_EQ(clip.inputs.size(), 3u);
  EXPECT_EQ(clip.inputs[2], -1);
}

TEST(Import, tensor_attribute_uses_the_shared_tensor_conversion) {
  Model m = load_onnx_bytes(bytes_of(parse_model(R"(
<ir_version: 8, opset_import: ["" : 17]>
g () => (int64[2] Y)
{ Y = Constant<value = int64[2] {7, 9}>() }
)")));
  const Tensor& t = m.graph->nodes[0].attr_tensor("value");
  EXPECT_EQ(t.dtype(), DType::Int64);
  EXPECT_EQ(t.data<int64_t>()[1], 9);
}

// A Loop whose body holds an If whose branches read the outer `A`: the Loop body does not
// define A, so it captures A too, and the Loop node is ordered after A's producer.
constexpr const char* kNestedCapture = R"(
<ir_version: 8, opset_import: ["" : 17]>
g (float[2] X, bool C) => (float[2] Y)
{
  n = Constant<value = int64 {2}>()
  Y = Loop(n, C, X) <body = body (int64 i, bool c, float[2] x) => (bool co, float[2] xo) {
    co = Identity(c)
    xo = If(c) <then_branch = t () => (float[2] r) { r = Add(x, A) },
                else_branch = e () => (float[2] r) { r = Sub(x, A) }>
  }>
  A = Constant<value = float[2] {1.0, 2.0}>()
}
)";

TEST(Import, nested_subgraph_captures_propagate_to_the_middle_graph) {
  Model m = load_onnx_bytes(bytes_of(parse_model(kNestedCapture)));
  const Graph& g = *m.graph;
  ASSERT_EQ(g.nodes.size(), 3u);
  EXPECT_EQ(g.nodes[2].op, Op::Loop) << "Loop must follow the producer of the A it captures";
  const Graph& body = g.nodes[2].attr_graph("body");
  std::vector<std::string> body_captures;
  for (int c : body.captures) body_captures.push_back(body.value(c).name);
  EXPECT_EQ(body_captures, std::vector<std::string>({"A"}));
  const Graph& then_branch = body.nodes[1].attr_graph("then_branch");
  std::vector<std::string> then_captures;
  for (int c : then_branch.captures) then_captures.push_back(then_branch.value(c).name);
  std::sort(then_captures.begin(), then_captures.end());
  EXPECT_EQ(then_captures, std::vector<std::string>({"A", "x"}));
  EXPECT_TRUE(g.captures.empty());
}

TEST(Import, loading_a_file_records_its_folder) {
  std::string dir = ::testing::TempDir() + "/terrace_import_file";
  std::filesystem::create_directories(dir);
  std::string path = dir + "/small.onnx";
  std::ofstream(path, std::ios::binary) << bytes_of(parse_model(kSmallModel));
  Model m = load_onnx_file(path);
  EXPECT_EQ(m.dir, dir);
  EXPECT_EQ(m.graph->nodes.size(), 2u);
}

TEST(Import, missing_file_is_io_error) {
  try {
    load_onnx_file("/nonexistent/terrace/model.onnx");
    FAIL() << "loaded a missing file";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::IoError);
  }
}

// A node without a name is named in errors by its index and first output; ONNX checker messages
// are one line and name the node's op type.
TEST(Import, errors_point_to_unnamed_nodes_and_checker_messages_are_one_line) {
  Model m = load_onnx_bytes(bytes_of(parse_model(kSmallModel)));
  EXPECT_EQ(m.graph->nodes[1].describe(), "Relu #1 -> 'Y'");
  std::optional<Error> e = load_error(bytes_of(parse_model(R"(
<ir_version: 8, opset_import: ["" : 17]>
g (float[2] X) => (float[2] Y)
{ Y = Relu(X, X) }
)")));
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), ErrorCode::InvalidModel);
  const std::string what = e->what();
  EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  EXPECT_NE(what.find("Node (Relu) has input size 2"), std::string::npos) << what;
}

}  // namespace
}  // namespace terrace::test
