// Tier 1's ConvTranspose through oneDNN (jit/cpu/dnnl_deconv.h) against the interpreter: 1-3 spatial
// dimensions, groups, strides, dilations, pads, output_padding, output_shape (larger than the
// full result: negative pads), auto_pad, bias or none, weights known at compile time or not, a
// fused Relu/Clip, non-finite inputs, zero-sized tensors and the errors. In the DnnlOps suite, so
// that the ctests dnnl_ops_on_AVX2 / _SSE41 run it on those instruction sets too.
#include "jit/cpu/dnnl_deconv.h"

#include <cmath>
#include <limits>

#include "tests/jit/chain_builder.h"
#include "tests/support/node_runner.h"

namespace terrace::testing {
namespace {

#ifdef TERRACE_HAVE_DNNL

// The primitive's result on `in` (input 1 handed over at compile time when `constant_weights`).
Tensor run_deconv(const Node& node, const std::vector<Tensor>& in, jit::DnnlActivation activation = {},
                  bool constant_weights = false, std::string* description = nullptr) {
  std::vector<Shape> shapes;
  std::vector<const float*> ptrs;
  for (const Tensor& t : in) {
    shapes.push_back(t.shape());
    ptrs.push_back(t.data<float>());
  }
  std::vector<const Tensor*> constants(in.size(), nullptr);
  if (constant_weights) constants[1] = &in[1];
  auto prim = jit::make_dnnl_deconvolution(node, shapes, constants, activation);
  if (description) *description = prim->describe();
  Tensor got = Tensor::empty(DType::Float32, prim->output_shape());
  prim->run(ptrs, got.data<float>());
  return got;
}

struct DeconvCase {
  Shape x, w;
  bool bias;
  std::map<std::string, Attr> attrs;
};

TEST(DnnlOps, conv_transpose_matches_the_interpreter) {
  const std::vector<DeconvCase> cases = {
      {{1, 3, 5, 5}, {3, 4, 3, 3}, true, {}},
      {{2, 3, 5, 5}, {3, 4, 3, 3}, false, {{"strides", std::vector<int64_t>{2, 2}}}},
      // PyTorch's upsampling ConvTranspose2d(k=3, stride=2, padding=1, output_padding=1)
      {{1, 8, 6, 7}, {8, 4, 3, 3}, true,
       {{"strides", std::vector<int64_t>{2, 2}}, {"pads", std::vector<int64_t>{1, 1, 1, 1}},
        {"output_padding", std::vector<int64_t>{1, 1}}}},
      // output_padding beyond the pads: output rows no tap reaches, holding the bias
      {{1, 2, 4, 4}, {2, 3, 2, 2}, true,
       {{"strides", std::vector<int64_t>{3, 2}}, {"output_padding", std::vector<int64_t>{2, 1}}}},
      {{1, 4, 5, 6}, {4, 3, 3, 2}, true,
       {{"group", int64_t(2)}, {"dilations", std::vector<int64_t>{2, 1}}, {"pads", std::vector<int64_t>{1, 0, 2, 1}}}},
      {{1, 6, 7, 7}, {6, 1, 3, 3}, true, {{"group", int64_t(6)}, {"strides", std::vector<int64_t>{2, 2}}}},  // depthwise
      {{2, 3, 9}, {3, 5, 4}, true, {{"strides", std::vector<int64_t>{3}}, {"pads", std::vector<int64_t>{2, 1}}}},  // 1-D
      {{1, 2, 3, 4, 3}, {2, 2, 2, 3, 2}, true, {{"strides", std::vector<int64_t>{2, 1, 2}}}},  // 3-D
      {{1, 3, 4, 4}, {3, 2, 3, 3}, true, {{"auto_pad", "SAME_UPPER"}, {"strides", std::vector<int64_t>{2, 2}}}},
      {{1, 3, 4, 4}, {3, 2, 4, 4}, true, {{"auto_pad", "SAME_LOWER"}, {"strides", std::vector<int64_t>{2, 2}}}},
      {{1, 3, 4, 4}, {3, 2, 3, 3}, false, {{"auto_pad", "VALID"}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}}},
      // output_shape larger than the full result (negative pads on both sides) and smaller
      {{1, 2, 3, 3}, {2, 3, 3, 3}, true,
       {{"strides", std::vector<int64_t>{2, 2}}, {"output_shape", std::vector<int64_t>{10, 9}}}},
      {{1, 2, 5, 5}, {2, 3, 3, 3}, true,
       {{"strides", std::vector<int64_t>{2, 2}}, {"output_shape", std::vector<int64_t>{1, 2, 8, 9}}}},
  };
  uint32_t seed = 1;
  for (const DeconvCase& c : cases) {
    std::vector<Tensor> in{random_tensor(DType::Float32, c.x, -1, 1, seed++, false),
                           random_tensor(DType::Float32, c.w, -1, 1, seed++, false)};
    if (c.bias) in.push_back(random_tensor(DType::Float32, {c.w[1] * (c.attrs.count("group") ? c.attrs.at("group").a.i : 1)},
                                           -1, 1, seed++, false));
    Node node = make_node(Op::ConvTranspose, in.size(), c.attrs);
    const Tensor want = run_node(node, in).at(0);
    const std::string what = "ConvTranspose " + shape_str(c.x) + " x " + shape_str(c.w);
    for (bool constant : {false, true}) {
      std::string description;
      expect_close(run_deconv(node, in, {}, constant, &description), want, what + (constant ? " (constant weights)" : ""));
      EXPECT_NE(description.find("oneDNN deconvolution"), std::string::npos) << description;
    }
    expect_close(run_deconv(node, in, {jit::DnnlActivation::Kind::Relu}), run1(Op::Relu, {want}), what + " + Relu");
    const jit::DnnlActivation clip{jit::DnnlActivation::Kind::Clip, -0.25f, 0.5f};
    Tensor clipped = want.clone();
    for (int64_t i = 0; i < clipped.numel(); ++i)
      clipped.data<float>()[i] = std::min(0.5f, std::max(-0.25f, clipped.data<float>()[i]));
    expect_close(run_deconv(node, in, clip), clipped, what + " + Clip");
  }
}

// The rows no tap reaches are really written (not left as they were): with output_padding the
// last row and column hold the bias exactly.
TEST(DnnlOps, conv_transpose_output_padding_holds_the_bias) {
  Node node = make_node(Op::ConvTranspose, 3,
                        {{"strides", std::vector<int64_t>{2, 2}}, {"output_padding", std::vector<int64_t>{1, 1}}});
  std::vector<Tensor> in{random_tensor(DType::Float32, {1, 2, 3, 3}, -1, 1, 7, false),
                         random_tensor(DType::Float32, {2, 2, 2, 2}, -1, 1, 8, false),
                         Tensor::from_vector<float>({2}, {0.75f, -2.5f})};
  std::string description;
  Tensor got = run_deconv(node, in, {}, true, &description);
  ASSERT_EQ(got.shape(), (Shape{1, 2, 7, 7}));
  EXPECT_NE(description.find("the rest holds the bias"), std::string::npos) << description;
  for (int64_t c = 0; c < 2; ++c)
    for (int64_t i = 0; i < 7; ++i) {
      EXPECT_EQ(got.data<float>()[c * 49 + 6 * 7 + i], c == 0 ? 0.75f : -2.5f);
      EXPECT_EQ(got.data<float>()[c * 49 + i * 7 + 6], c == 0 ? 0.75f : -2.5f);
    }
  expect_close(got, run_node(node, in).at(0), "output_padding");
}

// NaN and infinities with a fused activation: the interpreter's Relu (NaN stays, -inf gives 0).
TEST(DnnlOps, conv_transpose_with_non_finite_inputs_keeps_the_interpreters_activation) {
  Node node = make_node(Op::ConvTranspose, 2, {{"strides", std::vector<int64_t>{2, 2}}});
  std::vector<Tensor> in{random_tensor(DType::Float32, {1, 2, 3, 3}, -1, 1, 9, false),
                         random_tensor(DType::Float32, {2, 3, 2, 2}, -1, 1, 10, false)};
  in[0].data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
  in[0].data<float>()[4] = -std::numeric_limits<float>::infinity();
  Tensor want = run1(Op::Relu, {run_node(node, in).at(0)});
  Tensor got = run_deconv(node, in, {jit::DnnlActivation::Kind::Relu});
  int nans = 0;
  for (int64_t i = 0; i < want.numel(); ++i) nans += std::isnan(want.data<float>()[i]);
  EXPECT_GT(nans, 0);
  expect_close(got, want, "non-finite input + Relu");  // NaN and Inf positions exact
}

// Zero-sized tensors never reach oneDNN: an empty batch gives an empty result, no input
// channels gives the bias everywhere.
TEST(DnnlOps, conv_transpose_of_zero_sized_tensors_is_the_interpreters) {
  Node node = make_node(Op::ConvTranspose, 3, {{"strides", std::vector<int64_t>{2, 2}}});
  for (const auto& [x, w] : std::vector<std::pair<Shape, Shape>>{{{0, 2, 3, 3}, {2, 3, 2, 2}},
                                                                {{1, 0, 3, 3}, {0, 3, 2, 2}},
                                                                {{1, 2, 0, 3}, {2, 3, 2, 2}}}) {
    std::vector<Tensor> in{random_tensor(DType::Float32, x, -1, 1, 1, false), random_tensor(DType::Float32, w, -1, 1, 2, false),
                           Tensor::from_vector<float>({3}, {1.0f, -1.0f, 0.5f})};
    std::string description;
    Tensor got = run_deconv(node, in, {jit::DnnlActivation::Kind::Relu}, false, &description);
    EXPECT_NE(description.find("no library call"), std::string::npos) << description;
    expect_close(got, run1(Op::Relu, {run_node(node, in).at(0)}), "zero-sized " + shape_str(x));
  }
}

TEST(DnnlOps, conv_transpose_errors_name_the_node) {
  Node node = make_node(Op::ConvTranspose, 3);
  Error e = error_of([&] { jit::make_dnnl_deconvolution(node, {{1, 2, 3, 3}, {2, 3, 2, 2}, {4}}, {}); });
  EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(std::string(e.what()).find("node_under_test"), std::string::npos) << e.what();
  e = error_of([&] { jit::make_dnnl_deconvolution(make_node(Op::ConvTranspose, 2), {{1, 3, 3, 3}, {2, 3, 2, 2}}, {}); });
  EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
  EXPECT_NE(jit::dnnl_deconv_can_compile(node, {DType::Float64, DType::Float64}, {}).find("float32"), std::string::npos);
  EXPECT_NE(jit::dnnl_deconv_can_compile(node, {DType::Float32, DType::Float32}, {size_t(7)}).find("1 to 3 spatial"),
            std::string::npos);
  EXPECT_EQ(jit::dnnl_deconv_can_compile(node, {DType::Float32, DType::Float32}, {size_t(4)}), "");
}

#endif  // TERRACE_HAVE_DNNL

}  // namespace
}  // namespace terrace::testing
