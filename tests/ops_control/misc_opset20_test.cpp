// Opset 20 and 21 changes of misc ops: AffineGrid, volumetric GridSample, DFT's axis input, blocked QuantizeLinear and
// DequantizeLinear with output_dtype.
#include <gtest/gtest.h>

#include <onnx/defs/parser.h>

#include "interp/onnx_import.h"
#include "interp/interpreter.h"
#include "tests/support/node_runner.h"

namespace terrace::testing {
namespace {

TEST(AffineGrid, identity_theta_gives_the_normalised_pixel_centres_or_corners) {
  Tensor theta = Tensor::from_vector<float>({1, 2, 3}, {1, 0, 0, 0, 1, 0});
  Tensor size = Tensor::from_vector<int64_t>({4}, {1, 1, 2, 2});
  std::vector<float> centres = values_of<float>(run1(Op::AffineGrid, {theta, size}));
  EXPECT_EQ(centres, (std::vector<float>{-0.5f, -0.5f, 0.5f, -0.5f, -0.5f, 0.5f, 0.5f, 0.5f}));  // (x, y) per pixel
  std::vector<float> corners = values_of<float>(run1(Op::AffineGrid, {theta, size}, {{"align_corners", 1}}));
  EXPECT_EQ(corners, (std::vector<float>{-1, -1, 1, -1, -1, 1, 1, 1}));
}

TEST(GridSample20, volumes_sample_trilinearly_or_nearest) {
  Tensor vol = Tensor::from_vector<float>({1, 1, 2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7});
  Tensor centre = Tensor::from_vector<float>({1, 1, 1, 2, 3}, {0, 0, 0, 1, 1, 1});  // (x, y, z) points
  std::vector<float> lin = values_of<float>(run1(Op::GridSample, {vol, centre}, {{"align_corners", 1}}));
  EXPECT_FLOAT_EQ(lin[0], 3.5f) << "the centre averages all 8 corners";
  EXPECT_FLOAT_EQ(lin[1], 7.0f) << "(1, 1, 1) is the last corner";
  Tensor near = run1(Op::GridSample, {vol, centre}, {{"align_corners", 1}, {"mode", "nearest"}});
  EXPECT_EQ(near.shape(), Shape({1, 1, 1, 1, 2}));
  EXPECT_FLOAT_EQ(near.data<float>()[1], 7.0f);
  Error e = error_of([&] { run1(Op::GridSample, {vol, centre}, {{"mode", "cubic"}}); });
  EXPECT_EQ(e.code(), ErrorCode::NotImplemented);
}

TEST(QuantizeLinear21, blocks_share_a_scale_along_the_axis) {
  Tensor x = Tensor::from_vector<float>({1, 4}, {2, 4, 30, 60});
  Tensor scale = Tensor::from_vector<float>({1, 2}, {2, 30});
  Tensor q = run1(Op::QuantizeLinear, {x, scale}, {{"axis", 1}, {"block_size", 2}, {"output_dtype", 3}});
  EXPECT_EQ(q.dtype(), DType::Int8) << "output_dtype 3 is int8";
  EXPECT_EQ(values_of<int8_t>(q), (std::vector<int8_t>{1, 2, 1, 2}));
  Tensor back = run1(Op::DequantizeLinear, {q, scale}, {{"axis", 1}, {"block_size", 2}, {"output_dtype", 11}});
  EXPECT_EQ(back.dtype(), DType::Float64);
  EXPECT_EQ(values_of<double>(back), (std::vector<double>{2, 4, 30, 60}));
  Tensor bad = Tensor::from_vector<float>({1, 3}, {1, 1, 1});
  Error e = error_of([&] { run1(Op::QuantizeLinear, {x, bad}, {{"axis", 1}, {"block_size", 2}}); });
  EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(e.message().find("blocks of 2"), std::string::npos);
}

// DFT-20 reads its axis from input 2 (default -2); DFT-17 from the attribute (default 1).
TEST(DFT20, axis_comes_from_an_input_at_opset_20) {
  Model m = load_onnx_bytes([] {
    std::string text = R"(
<ir_version: 9, opset_import: ["" : 20]>
g (float[2, 3, 1] X) => (float[2, 3, 2] Y)
<int64 axis = {0}>
{ Y = DFT(X, , axis) }
)";
    onnx::ModelProto mp;
    EXPECT_TRUE(onnx::OnnxParser::Parse(mp, text.c_str()).IsOK());
    std::string bytes;
    mp.SerializeToString(&bytes);
    return bytes;
  }());
  Tensor x = Tensor::from_vector<float>({2, 3, 1}, {1, 2, 3, 10, 20, 30});
  std::vector<RValue> out = interpret(*m.graph, {RValue(x)});
  // Along axis 0 (length 2): bin 0 = a + b, bin 1 = a - b, all real.
  const std::vector<float> want = {11, 0, 22, 0, 33, 0, -9, 0, -18, 0, -27, 0};
  std::vector<float> got = values_of<float>(out[0].tensor);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)  // sin(pi) is 1.2e-16, not 0: the imaginary parts are ~1e-15
    EXPECT_NEAR(got[i], want[i], 1e-5) << i;
}

}  // namespace
}  // namespace terrace::testing
