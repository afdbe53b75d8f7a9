// Opsets 18 to 23: each node's version in force from interp/op_versions.def decides who checks
// and infers it (ONNX 1.12 for new types only, Terrace for new ops, inputs and attributes), and
// versions Terrace lacks are NotImplemented at load.
#include <set>
#include <sstream>

#include <onnx/defs/schema.h>

#include "interp/interpreter.h"
#include "interp/op_versions.h"
#include "tests/import/import_util.h"

namespace terrace::test {
namespace {

const ValueInfo& info_of(const Graph& g, const std::string& name) {
  int id = g.find_value(name);
  EXPECT_GE(id, 0) << name;
  return g.value(id).info;
}

TEST(OpsetVersions, reduce_at_opset_18_takes_axes_as_an_input_and_infers_its_shape) {
  Model m = load_onnx_bytes(bytes_of(parse_model(R"(
<ir_version: 8, opset_import: ["" : 18]>
g (float[2, 3] X) => (float[2, 1] Y)
<int64[1] axes = {1}>
{
  R = ReduceMean<keepdims: int = 1>(X, axes)
  Y = Relu(R)
}
)")));
  EXPECT_EQ(m.graph->opset, 18);
  const ValueInfo& r = info_of(*m.graph, "R");
  EXPECT_EQ(r.dtype, DType::Float32);
  ASSERT_TRUE(r.shape.has_value()) << "Terrace infers the Reduce of opset 18";
  EXPECT_EQ(*r.shape, Shape({2, 1}));
  std::vector<RValue> out = interpret(*m.graph, {RValue(Tensor::from_vector<float>({2, 3}, {1, 2, 3, -4, -5, -6}))});
  const Tensor& y = out[0].tensor;
  EXPECT_EQ(y.shape(), Shape({2, 1}));
  EXPECT_FLOAT_EQ(y.data<float>()[0], 2.0f);
  EXPECT_FLOAT_EQ(y.data<float>()[1], 0.0f);
}

TEST(OpsetVersions, onnx_inference_carries_on_after_a_node_terrace_inferred) {
  Model m = load_onnx_bytes(bytes_of(parse_model(R"(
<ir_version: 9, opset_import: ["" : 20]>
g (float[4, 5] X) => (float[4, 5] Y)
{
  G = Gelu<approximate: string = "tanh">(X)
  T = Transpose<perm: ints = [1, 0]>(G)
  Y = Transpose<perm: ints = [1, 0]>(T)
}
)")));
  EXPECT_EQ(info_of(*m.graph, "G").shape, std::optional<Shape>(Shape({4, 5})));
  EXPECT_EQ(info_of(*m.graph, "T").shape, std::optional<Shape>(Shape({5, 4})))
      << "ONNX's inference of Transpose reads the shape Terrace gave Gelu's output";
}

TEST(OpsetVersions, split_sizes_known_only_at_run_time_leave_the_split_dim_unknown) {
  Model m = load_onnx_bytes(bytes_of(parse_model(R"(
<ir_version: 9, opset_import: ["" : 18]>
g (float[2, 8] X, int64[2] S) => (float[2, ?] C, float[2, ?] D)
{ A, B = Split<axis: int = 1>(X, S)
  C = Relu(A)
  D = Relu(B) }
)")));
  const ValueInfo& a = info_of(*m.graph, "A");
  ASSERT_TRUE(a.shape.has_value());
  EXPECT_EQ((*a.shape)[0], 2);
  EXPECT_EQ((*a.shape)[1], -1) << "not 4: the sizes are an input, not num_outputs";
  Model eq = load_onnx_bytes(bytes_of(parse_model(R"(
<ir_version: 9, opset_import: ["" : 18]>
g (float[2, 7] X) => (float[2, ?] C, float[2, ?] D)
{ A, B = Split<axis: int = 1, num_outputs: int = 2>(X)
  C = Relu(A)
  D = Relu(B) }
)")));
  EXPECT_EQ(info_of(*eq.graph, "A").shape, std::optional<Shape>(Shape({2, 4})));
  EXPECT_EQ(info_of(*eq.graph, "B").shape, std::optional<Shape>(Shape({2, 3})));
}

TEST(OpsetVersions, group_normalization_scales_per_group_at_18_and_per_channel_at_21) {
  // 2 channels in 1 group, values {1, 3}: normalised to {-1, 1}.
  auto run_at = [](int opset, const char* params) {
    std::string text = std::string("<ir_version: 10, opset_import: [\"\" : ") + std::to_string(opset) + R"(]>
g (float[1, 2, 1] X) => (float[1, 2, 1] Y)
)" + params + R"(
{ Y = GroupNormalization<num_groups: int = 1, epsilon: float = 0.0>(X, S, B) })";
    Model m = load_onnx_bytes(bytes_of(parse_model(text.c_str())));
    Tensor x = Tensor::from_vector<float>({1, 2, 1}, {1, 3});
    return interpret(*m.graph, {RValue(x)})[0].tensor;
  };
  Tensor g18 = run_at(18, "<float[1] S = {2.0}, float[1] B = {0.5}>");
  EXPECT_FLOAT_EQ(g18.data<float>()[0], -1.5f);
  EXPECT_FLOAT_EQ(g18.data<float>()[1], 2.5f);
  Tensor g21 = run_at(21, "<float[2] S = {2.0, 3.0}, float[2] B = {0.5, 0.0}>");
  EXPECT_FLOAT_EQ(g21.data<float>()[0], -1.5f);
  EXPECT_FLOAT_EQ(g21.data<float>()[1], 3.0f);
}

TEST(OpsetVersions, a_version_with_new_types_only_is_checked_by_onnx) {
  // Acos-22 only adds bfloat16: ONNX 1.12 checks it as Acos-7, and rejects a second input.
  expect_load_error(bytes_of(parse_model(R"(
<ir_version: 10, opset_import: ["" : 22]>
g (float[3] X) => (float[3] Y)
{ Y = Acos(X, X) }
)")), ErrorCode::InvalidModel, "ONNX checker");
  Model m = load_onnx_bytes(bytes_of(parse_model(R"(
<ir_version: 10, opset_import: ["" : 22]>
g (float[3] X) => (float[3] Y)
{ A = Acos(X)
  Y = Neg(A) }
)")));
  EXPECT_EQ(info_of(*m.graph, "A").shape, std::optional<Shape>(Shape({3})));
}

TEST(OpsetVersions, new_versions_are_checked_against_their_attributes_and_input_counts) {
  expect_load_error(bytes_of(parse_model(R"(
<ir_version: 9, opset_import: ["" : 20]>
g (float[3] X) => (float[3] Y)
{ Y = Gelu<approximation: string = "tanh">(X) }
)")), ErrorCode::InvalidModel, "unknown attribute 'approximation'");
  expect_load_error(bytes_of(parse_model(R"(
<ir_version: 9, opset_import: ["" : 18]>
g (int32[3] X) => (int32[3] Y)
{ Y = BitwiseAnd(X) }
)")), ErrorCode::InvalidModel, "has 1 inputs; version 18 of BitwiseAnd takes 2");
}

// Every op version up to opset 23 that ops.def lists is implemented (op_versions.def has no
// Missing entry left); ONNX ops Terrace lacks are refused at load, naming the op.
TEST(OpsetVersions, an_op_terrace_lacks_is_not_implemented_at_load) {
  expect_load_error(bytes_of(parse_model(R"(
<ir_version: 9, opset_import: ["" : 20]>
g (uint8[10] X) => (uint8[2, 2, 3] Y)
{ Y = ImageDecoder(X) }
)")), ErrorCode::NotImplemented, "ImageDecoder");
  expect_load_error(bytes_of(parse_model(R"(
<ir_version: 9, opset_import: ["" : 20]>
g (float[1, 3] X) => (int32[1, 2] Y)
{ Y = Multinomial<sample_size: int = 2>(X) }
)")), ErrorCode::NotImplemented, "Multinomial");
}

TEST(OpsetVersions, opsets_past_23_are_refused) {
  expect_load_error(bytes_of(parse_model(R"(
<ir_version: 10, opset_import: ["" : 24]>
g (float[3] X) => (float[3] Y)
{ Y = Relu(X) }
)")), ErrorCode::NotImplemented, "opset 24 is not supported (Terrace supports 7 to 23)");
}

TEST(OpsetVersions, version_in_force_is_the_newest_at_or_below_the_opset) {
  EXPECT_EQ(op_version_in_force(Op::ReduceMax, 17), nullptr);
  ASSERT_NE(op_version_in_force(Op::ReduceMax, 19), nullptr);
  EXPECT_EQ(op_version_in_force(Op::ReduceMax, 19)->since, 18);
  EXPECT_EQ(op_version_in_force(Op::ReduceMax, 23)->since, 20);
  EXPECT_EQ(op_version_in_force(Op::Relu, 23), nullptr) << "Relu's last version is 14";
}

std::set<std::string> words(const char* s) {
  std::istringstream in(s);
  std::set<std::string> out;
  for (std::string w; in >> w;) out.insert(w);
  return out;
}

// "Types" promises ONNX 1.12's opset-17 schema has the same inputs, outputs and attributes:
// checked here against that schema, for every such entry.
TEST(OpsetVersions, types_only_versions_match_the_opset_17_schema) {
  for (const OpVersion& v : op_versions()) {
    if (v.form != VersionForm::Types) continue;
    std::string what = std::string(op_name(v.op)) + "-" + std::to_string(v.since);
    const onnx::OpSchema* old = onnx::OpSchemaRegistry::Schema(op_name(v.op), 17, "");
    ASSERT_NE(old, nullptr) << what << ": a Types version needs an opset-17 schema";
    EXPECT_EQ(old->min_input(), v.min_inputs) << what;
    EXPECT_EQ(std::min(old->max_input(), 1 << 20), v.max_inputs) << what;
    EXPECT_EQ(old->min_output(), v.min_outputs) << what;
    EXPECT_EQ(std::min(old->max_output(), 1 << 20), v.max_outputs) << what;
    std::set<std::string> attrs;
    for (const auto& [name, a] : old->attributes()) attrs.insert(name);
    EXPECT_EQ(attrs, words(v.attributes)) << what;
    for (const OpVersion& earlier : op_versions()) {
      if (earlier.op == v.op && earlier.since < v.since) {
        EXPECT_EQ(earlier.form, VersionForm::Types) << what << " follows " << earlier.since;
      }
    }
  }
}

}  // namespace
}  // namespace terrace::test
