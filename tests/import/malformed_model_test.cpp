// Importer tests on malformed models: each is a clean terrace::Error naming the problem.
#include <filesystem>
#include <fstream>
#include <random>

#include "tests/import/import_util.h"

namespace terrace::test {
namespace {

onnx::ModelProto small() { return parse_model(kSmallModel); }
onnx::TensorProto& initializer_b(onnx::ModelProto& m) { return *m.mutable_graph()->mutable_initializer(0); }

TEST(Malformed, empty_file_is_invalid_model) {
  expect_load_error("", ErrorCode::InvalidModel, "empty");
}

TEST(Malformed, truncated_file_is_invalid_model) {
  std::string bytes = bytes_of(small());
  for (size_t cut : {size_t(1), bytes.size() / 3, bytes.size() / 2, bytes.size() - 1}) {
    std::optional<Error> e = load_error(bytes.substr(0, cut));
    ASSERT_TRUE(e.has_value()) << "a model cut to " << cut << " bytes loaded";
    EXPECT_EQ(e->code(), ErrorCode::InvalidModel) << e->what();
  }
}

TEST(Malformed, random_bytes_are_invalid_model) {
  std::mt19937 rng(7);
  for (int i = 0; i < 50; ++i) {
    std::string bytes(size_t(rng() % 400 + 1), '\0');
    for (char& c : bytes) c = char(rng());
    std::optional<Error> e = load_error(bytes);
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->code(), ErrorCode::InvalidModel) << e->what();
  }
}

TEST(Malformed, text_file_is_invalid_model) {
  expect_load_error("this is not an onnx model\n", ErrorCode::InvalidModel, "");
}

TEST(Malformed, missing_graph_is_invalid_model) {
  onnx::ModelProto m = small();
  m.clear_graph();
  expect_load_error(bytes_of(m), ErrorCode::InvalidModel, "no graph");
}

TEST(Malformed, raw_data_of_the_wrong_size_is_invalid_model) {
  onnx::ModelProto m = small();
  initializer_b(m).clear_float_data();
  initializer_b(m).set_raw_data(std::string(8, '\0'));  // 2 floats for dims [3]
  expect_load_error(bytes_of(m), ErrorCode::InvalidModel, "raw_data holds 8 bytes");
}

TEST(Malformed, typed_value_count_that_disagrees_with_dims_is_invalid_model) {
  onnx::ModelProto m = small();
  initializer_b(m).add_float_data(4.0f);
  expect_load_error(bytes_of(m), ErrorCode::InvalidModel, "holds 4 values");
}

TEST(Malformed, huge_dims_are_rejected_before_allocation) {
  onnx::ModelProto m = small();
  initializer_b(m).clear_dims();
  initializer_b(m).add_dims(int64_t(1) << 40);
  initializer_b(m).add_dims(int64_t(1) << 20);
  expect_load_error(bytes_of(m), ErrorCode::InvalidModel, "initializer 'B'");
}

TEST(Malformed, element_count_overflow_is_invalid_model) {
  onnx::ModelProto m = small();
  for (int i = 0; i < 3; ++i) initializer_b(m).add_dims(int64_t(1) << 30);
  expect_load_error(bytes_of(m), ErrorCode::InvalidModel, "overflows");
}

TEST(Malformed, negative_dim_is_invalid_model) {
  onnx::ModelProto m = small();
  initializer_b(m).set_dims(0, -3);
  expect_load_error(bytes_of(m), ErrorCode::InvalidModel, "negative dimension");
}

TEST(Malformed, negative_dim_in_an_input_type_is_invalid_model) {
  onnx::ModelProto m = small();
  m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape()
      ->mutable_dim(1)->set_dim_value(-2);  // -1 is older exporters' dynamic dim (hostile_shapes_test)
  expect_load_error(bytes_of(m), ErrorCode::InvalidModel, "negative dimension");
}

TEST(Malformed, unknown_data_type_is_invalid_model) {
  onnx::ModelProto m = small();
  initializer_b(m).set_data_type(99);
  expect_load_error(bytes_of(m), ErrorCode::InvalidModel, "unknown data type");
}

TEST(Malformed, unsupported_data_type_is_not_implemented) {
  onnx::ModelProto m = small();
  initializer_b(m).set_data_type(onnx::TensorProto::COMPLEX64);
  expect_load_error(bytes_of(m), ErrorCode::NotImplemented, "COMPLEX64");
}

TEST(Malformed, unimplemented_onnx_op_is_not_implemented_naming_it) {
  onnx::ModelProto m = small();
  m.mutable_graph()->mutable_node(1)->set_op_type("Multinomial");
  expect_load_error(bytes_of(m), ErrorCode::NotImplemented, "Multinomial");
}

TEST(Malformed, unknown_op_is_invalid_model_naming_it) {
  onnx::ModelProto m = small();
  m.mutable_graph()->mutable_node(1)->set_op_type("NoSuchOp");
  expect_load_error(bytes_of(m), ErrorCode::InvalidModel, "NoSuchOp");
}

TEST(Malformed, op_of_another_domain_is_not_implemented_naming_domain_and_op) {
  onnx::ModelProto m = small();
  m.mutable_graph()->mutable_node(1)->set_domain("com.example");
  std::optional<Error> e = load_error(bytes_of(m));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->code(), ErrorCode::NotImplemented);
  EXPECT_NE(e->message().find("com.example"), std::string::npos) << e->what();
  EXPECT_NE(e->message().find("Relu"), std::string::npos) << e->what();
}

TEST(Malformed, undefined_input_is_invalid_model) {
  onnx::ModelProto m = small();
  m.mutable_graph()->mutable_node(1)->set_input(0, "nowhere");
  expect_load_error(bytes_of(m), ErrorCode::InvalidModel, "'nowhere', which is not defined");
}

TEST(Malformed, undefined_graph_output_is_invalid_model) {
  onnx::ModelProto m = small();
  m.mutable_graph()->mutable_output(0)->set_name("missing");
  expect_load_error(bytes_of(m), ErrorCode::InvalidModel, "'missing', which is not defined");
}

TEST(Malformed, duplicate_output_name_is_invalid_model) {
  onnx::ModelProto m = small();
  m.mutable_graph()->mutable_node(1)->set_output(0, "T");
  expect_load_error(bytes_of(m), ErrorCode::InvalidModel, "defined more than once");
}

TEST(Malformed, cycle_is_invalid_model) {
  onnx::ModelProto m = parse_model(R"(
<ir_version: 8, opset_import: ["" : 17]>
g (float[3] X) => (float[3] Y)
{
  A = Add(X, B)
  B = Relu(A)
  Y = Identity(B)
}
)");
  expect_load_error(bytes_of(m), ErrorCode::InvalidModel, "cycle");
}

TEST(Malformed, node_reading_its_own_output_is_a_cycle) {
  onnx::ModelProto m = small();
  m.mutable_graph()->mutable_node(1)->set_input(0, "Y");
  expect_load_error(bytes_of(m), ErrorCode::InvalidModel, "cycle");
}

TEST(Malformed, opset_above_23_is_not_implemented) {
  onnx::ModelProto m = small();
  m.mutable_opset_import(0)->set_version(24);
  expect_load_error(bytes_of(m), ErrorCode::NotImplemented, "opset 24");
}

TEST(Malformed, opset_zero_is_invalid_model) {
  onnx::ModelProto m = small();
  m.mutable_opset_import(0)->set_version(0);
  expect_load_error(bytes_of(m), ErrorCode::InvalidModel, "opset");
}

TEST(Malformed, opset_that_wraps_around_int_is_not_implemented) {
  onnx::ModelProto m = small();
  m.mutable_opset_import(0)->set_version((int64_t(1) << 32) + 17);
  expect_load_error(bytes_of(m), ErrorCode::NotImplemented, "opset");
}

TEST(Malformed, old_opset_op_whose_meaning_changed_is_not_implemented) {
  onnx::ModelProto m = small();
  m.mutable_opset_import(0)->set_version(6);  // Add at opset 6 has the legacy broadcast attribute
  expect_load_error(bytes_of(m), ErrorCode::NotImplemented, "opset-7 form");
}

TEST(Malformed, missing_default_opset_is_invalid_model) {
  onnx::ModelProto m = small();
  m.clear_opset_import();
  expect_load_error(bytes_of(m), ErrorCode::InvalidModel, "no opset");
}

TEST(Malformed, checker_failure_is_invalid_model_with_its_message) {
  onnx::ModelProto m = small();
  m.mutable_graph()->mutable_node(1)->add_input("X");  // Relu takes one input
  expect_load_error(bytes_of(m), ErrorCode::InvalidModel, "ONNX checker");
}

TEST(Malformed, undefined_value_read_by_a_subgraph_is_invalid_model) {
  onnx::ModelProto m = parse_model(R"(
<ir_version: 8, opset_import: ["" : 17]>
g (bool C) => (float[2] Y)
{
  Y = If(C) <then_branch = t () => (float[2] r) { r = Identity(ghost) },
             else_branch = e () => (float[2] r) { r = Identity(ghost) }>
}
)");
  expect_load_error(bytes_of(m), ErrorCode::InvalidModel, "'ghost', which is not defined");
}

// A model whose If bodies nest `depth` levels: each then_branch holds the next If, the innermost
// returns the outer x.
onnx::ModelProto nested_ifs(int depth) {
  auto leaf = [](const std::string& out) {
    onnx::GraphProto g;
    g.set_name("g_" + out);
    onnx::NodeProto* n = g.add_node();
    n->set_op_type("Identity");
    n->add_input("x");
    n->add_output(out);
    g.add_output()->set_name(out);
    g.mutable_output(0)->mutable_type()->mutable_tensor_type()->set_elem_type(1);
    g.mutable_output(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(1);
    return g;
  };
  onnx::GraphProto g = leaf("y" + std::to_string(depth));
  for (int d = depth - 1; d >= 0; --d) {
    onnx::GraphProto outer;
    outer.set_name("b" + std::to_string(d));
    onnx::NodeProto* n = outer.add_node();
    n->set_op_type("If");
    n->add_input("c");
    n->add_output("y" + std::to_string(d));
    onnx::AttributeProto* then_branch = n->add_attribute();
    then_branch->set_name("then_branch");
    then_branch->set_type(onnx::AttributeProto::GRAPH);
    *then_branch->mutable_g() = g;
    onnx::AttributeProto* else_branch = n->add_attribute();
    else_branch->set_name("else_branch");
    else_branch->set_type(onnx::AttributeProto::GRAPH);
    *else_branch->mutable_g() = leaf("e" + std::to_string(d));
    outer.add_output()->set_name("y" + std::to_string(d));
    outer.mutable_output(0)->mutable_type()->mutable_tensor_type()->set_elem_type(1);
    outer.mutable_output(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(1);
    g = std::move(outer);
  }
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  *m.mutable_graph() = g;
  onnx::ValueInfoProto* c = m.mutable_graph()->add_input();
  c->set_name("c");
  c->mutable_type()->mutable_tensor_type()->set_elem_type(9);
  c->mutable_type()->mutable_tensor_type()->mutable_shape();
  onnx::ValueInfoProto* x = m.mutable_graph()->add_input();
  x->set_name("x");
  x->mutable_type()->mutable_tensor_type()->set_elem_type(1);
  x->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(1);
  return m;
}

// If bodies nested 200 deep are a depth-limit error, not a stack overflow or a bare parse
// failure; 40 deep loads.
TEST(Malformed, subgraphs_nested_past_the_depth_limit_are_a_clear_error) {
  std::optional<Error> shallow = load_error(bytes_of(nested_ifs(40)));
  EXPECT_FALSE(shallow.has_value()) << shallow->what();
  expect_load_error(bytes_of(nested_ifs(200)), ErrorCode::InvalidModel, "nested more than 64 levels deep");
}

// A single-file model over 2 GiB (a sparse file here) is an error pointing to external data,
// found before anything tries to parse it.
TEST(Malformed, a_single_file_model_over_2_gib_points_to_external_data) {
  const std::string path = ::testing::TempDir() + "/terrace_over_2gib.onnx";
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
  }
  std::filesystem::resize_file(path, (uint64_t(1) << 31) + 16);  // sparse: no disk space used
  try {
    load_onnx_file(path);
    ADD_FAILURE() << "a 2 GiB model loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidModel);
    EXPECT_NE(std::string(e.what()).find("external data"), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace terrace::test
