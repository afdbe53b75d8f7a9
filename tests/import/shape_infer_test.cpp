// Importer tests of shape inference: hostile attributes skip a node's inference instead of crashing.
#include "tests/import/import_util.h"

namespace terrace::test {
namespace {

// Loads the model; ONNX 1.12's unguarded inference would crash on each of these.
Model load_text(const char* text) { return load_onnx_bytes(bytes_of(parse_model(text))); }

bool has_shape(const Model& m, const std::string& name) {
  return m.graph->value(m.graph->find_value(name)).info.shape.has_value();
}

TEST(ShapeInfer, out_of_range_axis_skips_inference_of_that_node) {
  Model m = load_text(R"(
<ir_version: 8, opset_import: ["" : 17]>
g (float[2,3,5] X, float[5] W) => (float[2,3,5] Y)
{
  n = LayerNormalization<axis = -536870915>(X, W)
  Y = Relu(n)
}
)");
  EXPECT_FALSE(has_shape(m, "n"));
}

TEST(ShapeInfer, default_axis_out_of_range_for_a_scalar_does_not_crash) {
  EXPECT_NO_THROW(load_text(R"(
<ir_version: 8, opset_import: ["" : 17]>
g (float X, float[5] W) => (float Y)
{ Y = LayerNormalization(X, W) }
)"));
}

TEST(ShapeInfer, valid_axis_still_infers) {
  Model m = load_text(R"(
<ir_version: 8, opset_import: ["" : 17]>
g (float[2,3,5] X, float[5] W) => (float[2,3,5] Y)
{
  n = LayerNormalization<axis = -1>(X, W)
  Y = Relu(n)
}
)");
  EXPECT_TRUE(has_shape(m, "n"));
}

// An output declared [1,3] that the graph computes as [2,3]: ONNX's inference throws on the
// conflict and would lose every shape; the importer infers without the declared shapes, keeps
// the computed ones (intermediates included) and warns, naming the output and both shapes.
TEST(ShapeInfer, a_declared_output_shape_the_graph_contradicts_keeps_the_rest_and_warns) {
  Model m = load_text(R"(
<ir_version: 8, opset_import: ["" : 17]>
g (float[2,3] X) => (float[1,3] Y)
{
  a = Relu(X)
  b = Sigmoid(a)
  Y = Neg(b)
}
)");
  EXPECT_TRUE(has_shape(m, "a"));
  EXPECT_TRUE(has_shape(m, "b"));
  const ValueInfo& y = m.graph->value(m.graph->find_value("Y")).info;
  ASSERT_TRUE(y.shape.has_value());
  EXPECT_EQ(*y.shape, (std::vector<int64_t>{2, 3}));
  ASSERT_EQ(m.graph->warnings.size(), 1u);
  EXPECT_EQ(m.graph->warnings[0], "output 'Y' is declared [1,3] but the graph computes [2,3]; the computed shape is used");
}

TEST(ShapeInfer, conv_weights_of_another_rank_do_not_crash) {
  EXPECT_NO_THROW(load_text(R"(
<ir_version: 8, opset_import: ["" : 17]>
g (float[1,1,3] X, float[1,1,2,2] W) => (float[1,1,2] Y)
{ Y = Conv(X, W) }
)"));
}

TEST(ShapeInfer, max_unpool_indices_of_another_rank_do_not_crash) {
  EXPECT_NO_THROW(load_text(R"(
<ir_version: 8, opset_import: ["" : 17]>
g (float[1,1,2,2] X, int64[2] I) => (float[1,1,4,4] Y)
{ Y = MaxUnpool<kernel_shape = [2, 7], strides = [2, 2]>(X, I) }
)"));
}

TEST(ShapeInfer, zero_stride_does_not_divide_by_zero) {
  EXPECT_NO_THROW(load_text(R"(
<ir_version: 8, opset_import: ["" : 17]>
g (float[1,1,4,4] X) => (float[1,1,2,2] Y)
{ Y = MaxPool<kernel_shape = [2, 2], strides = [0, 0]>(X) }
)"));
}

TEST(ShapeInfer, blocksize_whose_square_overflows_does_not_divide_by_zero) {
  EXPECT_NO_THROW(load_text(R"(
<ir_version: 8, opset_import: ["" : 17]>
g (float[1,4,2,2] X) => (float[1,1,4,4] Y)
{ Y = DepthToSpace<blocksize = 4294967296>(X) }
)"));
}

TEST(ShapeInfer, negative_batch_dims_do_not_crash) {
  EXPECT_NO_THROW(load_text(R"(
<ir_version: 8, opset_import: ["" : 17]>
g (float[2,2] X, int64[2,1] I) => (float[2] Y)
{ Y = GatherND<batch_dims = -3>(X, I) }
)"));
}

TEST(ShapeInfer, newer_ir_version_passes_the_checker) {
  onnx::ModelProto p = parse_model(kSmallModel);
  p.set_ir_version(9);
  Model m = load_onnx_bytes(bytes_of(p));
  EXPECT_EQ(m.ir_version, 9);
}

}  // namespace
}  // namespace terrace::test
