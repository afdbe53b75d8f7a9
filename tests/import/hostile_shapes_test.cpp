// Declared shapes at load: a rank-giving input declared with 2^40 values is refused before ONNX's
// inference builds a 2^40-dim shape, and a dim of -1 (older exporters' dynamic dim) is dynamic.
#include "tests/import/import_util.h"
#include "tiers/session.h"

namespace terrace::test {
namespace {

TEST(HostileShapes, a_shape_input_declared_longer_than_any_rank_is_invalid_model) {
  for (const char* text : {R"(
<ir_version: 8, opset_import: ["" : 17]>
g (float[3] x, int64[1099511627776] s) => (float y) { y = Expand(x, s) }
)", R"(
<ir_version: 8, opset_import: ["" : 17]>
g (int64[100000] s) => (float y) { y = ConstantOfShape(s) }
)", R"(
<ir_version: 8, opset_import: ["" : 17]>
g (float[3] x, int64[65] s) => (float y) { y = Reshape(x, s) }
)"}) {
    std::optional<Error> e = load_error(bytes_of(parse_model(text)));
    ASSERT_TRUE(e.has_value()) << text;
    EXPECT_EQ(e->code(), ErrorCode::InvalidModel) << e->what();
    EXPECT_NE(e->message().find("node 0 ("), std::string::npos) << e->what();
    EXPECT_NE(e->message().find("input"), std::string::npos) << e->what();
    EXPECT_LT(e->message().size(), 300u) << "an error line names the length, not every dim";
  }
}

TEST(HostileShapes, a_shape_initializer_longer_than_any_rank_is_invalid_model) {
  std::string ones;
  for (int i = 0; i < 65; ++i) ones += i ? ", 1" : "1";
  const std::string text = "<ir_version: 8, opset_import: [\"\" : 17]>\ng (float[1] x) => (float[1] y)\n<int64[65] s = {" +
                           ones + "}>\n{ y = Reshape(x, s) }\n";
  std::optional<Error> e = load_error(bytes_of(parse_model(text.c_str())));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->code(), ErrorCode::InvalidModel) << e->what();
  EXPECT_NE(e->message().find("node 0 (Reshape): input 1 ('s') is declared with 65 values"), std::string::npos)
      << e->what();
}

// A length only inference computes (ConstantOfShape's [2^40] output) skips Expand's inference:
// the model loads at once instead of building a shape of 2^40 dims.
TEST(HostileShapes, a_computed_shape_length_past_any_rank_is_not_inferred) {
  const char* text = R"(
<ir_version: 8, opset_import: ["" : 17]>
g (float[3] x) => (float y) {
  n = Constant<value = int64[1] {1099511627776}>()
  s = ConstantOfShape<value = int64[1] {1}>(n)
  y = Expand(x, s)
}
)";
  EXPECT_NO_THROW(load_onnx_bytes(bytes_of(parse_model(text))));
}

TEST(HostileShapes, a_declared_dim_of_minus_one_is_dynamic) {
  onnx::ModelProto m = parse_model(kSmallModel);
  m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(0)->set_dim_value(-1);
  m.mutable_graph()->mutable_output(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(0)->set_dim_value(-1);
  auto session = Session::load_bytes(bytes_of(m));
  for (int64_t batch : {1, 5}) {
    Tensor x = Tensor::from_vector<float>({batch, 3}, std::vector<float>(size_t(batch) * 3, -1.0f));
    NamedTensors out = session->run({{"X", x}});
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].second.shape(), (Shape{batch, 3}));
    EXPECT_EQ(out[0].second.data<float>()[0], 0.0f);  // Relu(-1 + 1)
  }
}

}  // namespace
}  // namespace terrace::test
