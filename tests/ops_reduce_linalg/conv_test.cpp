// Conv and ConvTranspose against direct loops in double (same summation order, so bitwise),
// thread-count independence, auto_pad and errors; a ResNet-sized layer reports its time.
#include <chrono>

#include "tests/ops_reduce_linalg/run_node.h"

namespace terrace::testing {
namespace {

struct Conv2d {
  int64_t group = 1, stride_h = 1, stride_w = 1, dil_h = 1, dil_w = 1;
  int64_t pad_t = 0, pad_l = 0, pad_b = 0, pad_r = 0;
  std::map<std::string, Attr> attrs() const {
    return {{"group", int_attr(group)},
            {"strides", ints_attr({stride_h, stride_w})},
            {"dilations", ints_attr({dil_h, dil_w})},
            {"pads", ints_attr({pad_t, pad_l, pad_b, pad_r})}};
  }
};

// Direct 2-D convolution at one output point: sum over (ci, kh, kw) in order in double, plus
// bias, rounded once.
float direct_conv_at(const Tensor& x, const Tensor& w, const Tensor* bias, const Conv2d& c,
                     int64_t n, int64_t m, int64_t oh, int64_t ow) {
  const int64_t C = x.dim(1), H = x.dim(2), W = x.dim(3);
  const int64_t Cg = w.dim(1), KH = w.dim(2), KW = w.dim(3), Mg = w.dim(0) / c.group;
  double s = 0;
  for (int64_t ci = 0; ci < Cg; ++ci)
    for (int64_t kh = 0; kh < KH; ++kh)
      for (int64_t kw = 0; kw < KW; ++kw) {
        const int64_t ih = oh * c.stride_h - c.pad_t + kh * c.dil_h;
        const int64_t iw = ow * c.stride_w - c.pad_l + kw * c.dil_w;
        const double xv = (ih < 0 || ih >= H || iw < 0 || iw >= W)
                              ? 0.0
                              : x.data<float>()[((n * C + (m / Mg) * Cg + ci) * H + ih) * W + iw];
        s += xv * double(w.data<float>()[((m * Cg + ci) * KH + kh) * KW + kw]);
      }
  return float(s + (bias ? double(bias->data<float>()[m]) : 0.0));
}

// Every output point of y (NCHW), or every `step`-th one, checked against direct_conv_at.
void expect_direct_conv(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor* bias,
                        const Conv2d& c, int64_t step = 1) {
  const int64_t M = y.dim(1), OH = y.dim(2), OW = y.dim(3);
  for (int64_t i = 0; i < y.numel(); i += step) {
    const int64_t ow = i % OW, oh = i / OW % OH, m = i / (OW * OH) % M, n = i / (OW * OH * M);
    ASSERT_EQ(y.data<float>()[i], direct_conv_at(x, w, bias, c, n, m, oh, ow)) << "at " << i;
  }
}

TEST(Conv, matches_direct_convolution_bitwise_with_groups_strides_dilations_and_pads) {
  Conv2d c{.group = 2, .stride_h = 2, .stride_w = 1, .dil_h = 1, .dil_w = 2,
           .pad_t = 1, .pad_l = 2, .pad_b = 0, .pad_r = 1};
  Tensor x = random_tensor({2, 6, 11, 9}, 1), w = random_tensor({4, 3, 3, 2}, 2), b = random_tensor({4}, 3);
  Tensor y = run1(Op::Conv, {x, w, b}, c.attrs());
  ASSERT_EQ(y.shape(), (Shape{2, 4, 5, 10}));
  expect_direct_conv(y, x, w, &b, c);
}

TEST(Conv, depthwise_convolution_matches_direct_convolution) {
  Conv2d c{.group = 16, .pad_t = 1, .pad_l = 1, .pad_b = 1, .pad_r = 1};
  Tensor x = random_tensor({1, 16, 10, 10}, 4), w = random_tensor({16, 1, 3, 3}, 5);
  expect_direct_conv(run1(Op::Conv, {x, w}, c.attrs()), x, w, nullptr, c);
}

TEST(Conv, many_groups_of_several_channels_run_group_parallel_and_match) {
  Conv2d c{.group = 8, .stride_h = 2, .stride_w = 2, .pad_t = 1, .pad_l = 0, .pad_b = 1, .pad_r = 2};
  Tensor x = random_tensor({2, 16, 9, 9}, 16), w = random_tensor({24, 2, 3, 3}, 17), b = random_tensor({24}, 18);
  expect_direct_conv(run1(Op::Conv, {x, w, b}, c.attrs()), x, w, &b, c);
}

TEST(Conv, result_is_identical_for_any_thread_count) {
  Tensor x = random_tensor({1, 8, 30, 30}, 6), w = random_tensor({12, 8, 3, 3}, 7);
  auto one = with_threads(1, [&] { return values_of<float>(run1(Op::Conv, {x, w})); });
  auto many = with_threads(5, [&] { return values_of<float>(run1(Op::Conv, {x, w})); });
  EXPECT_EQ(one, many);
}

TEST(Conv, same_upper_pads_to_ceil_of_input_over_stride_in_1d_and_3d) {
  Tensor x1 = random_tensor({1, 2, 7}, 8), w1 = random_tensor({3, 2, 4}, 9);
  Tensor y1 = run1(Op::Conv, {x1, w1}, {{"auto_pad", str_attr("SAME_UPPER")}, {"strides", ints_attr({2})}});
  EXPECT_EQ(y1.shape(), (Shape{1, 3, 4}));
  Tensor x3 = random_tensor({1, 1, 4, 5, 6}, 10), w3 = random_tensor({2, 1, 3, 3, 3}, 11);
  Tensor y3 = run1(Op::Conv, {x3, w3}, {{"auto_pad", str_attr("SAME_LOWER")}});
  EXPECT_EQ(y3.shape(), (Shape{1, 2, 4, 5, 6}));
}

TEST(Conv, channel_mismatch_is_an_error_naming_the_node) {
  Error e = error_of([] { run1(Op::Conv, {random_tensor({1, 3, 5, 5}, 1), random_tensor({2, 4, 3, 3}, 2)}); });
  EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(std::string(e.what()).find("under_test"), std::string::npos);
}

TEST(ConvTranspose, scatters_each_input_through_the_kernel) {
  // 1-D, stride 2: y[i*2 + k] += x[i] * w[k].
  Tensor x = Tensor::from_vector<float>({1, 1, 3}, {1, 2, 3});
  Tensor w = Tensor::from_vector<float>({1, 1, 3}, {1, 10, 100});
  Tensor y = run1(Op::ConvTranspose, {x, w}, {{"strides", ints_attr({2})}});
  EXPECT_EQ(values_of<float>(y), (std::vector<float>{1, 10, 102, 20, 203, 30, 300}));
  Tensor padded = run1(Op::ConvTranspose, {x, w},
                       {{"strides", ints_attr({2})}, {"pads", ints_attr({1, 2})}, {"output_padding", ints_attr({1})}});
  EXPECT_EQ(values_of<float>(padded), (std::vector<float>{10, 102, 20, 203, 30}));
}

TEST(ConvTranspose, groups_act_as_independent_transposed_convolutions) {
  Tensor x = random_tensor({1, 4, 5}, 19), w = random_tensor({4, 3, 3}, 20);
  const std::map<std::string, Attr> attrs{{"group", int_attr(2)}, {"strides", ints_attr({2})},
                                               {"dilations", ints_attr({2})}};
  Tensor y = run1(Op::ConvTranspose, {x, w}, attrs);
  ASSERT_EQ(y.shape(), (Shape{1, 6, 13}));
  for (int64_t grp = 0; grp < 2; ++grp) {
    Tensor xg = Tensor::empty(DType::Float32, {1, 2, 5}), wg = Tensor::empty(DType::Float32, {2, 3, 3});
    std::copy_n(x.data<float>() + grp * 10, 10, xg.data<float>());
    std::copy_n(w.data<float>() + grp * 18, 18, wg.data<float>());
    Tensor yg = run1(Op::ConvTranspose, {xg, wg}, {{"strides", ints_attr({2})}, {"dilations", ints_attr({2})}});
    EXPECT_EQ(values_of<float>(yg), std::vector<float>(y.data<float>() + grp * 39, y.data<float>() + (grp + 1) * 39));
  }
}

TEST(ConvTranspose, output_shape_larger_than_natural_pads_the_end) {
  Tensor x = Tensor::from_vector<float>({1, 1, 2}, {1, 2});
  Tensor w = Tensor::from_vector<float>({1, 1, 2}, {1, 1});
  Tensor y = run1(Op::ConvTranspose, {x, w}, {{"output_shape", ints_attr({4})}});
  EXPECT_EQ(values_of<float>(y), (std::vector<float>{1, 3, 2, 0}));
}

// Not a pass/fail timing: it checks the result and prints the time of ResNet-50's 3x3 layer.
TEST(ConvPerformance, resnet50_3x3_layer_64_to_64_at_56x56) {
  Tensor x = random_tensor({1, 64, 56, 56}, 12), w = random_tensor({64, 64, 3, 3}, 13);
  Conv2d c{.pad_t = 1, .pad_l = 1, .pad_b = 1, .pad_r = 1};
  run1(Op::Conv, {x, w}, c.attrs());  // warm-up
  auto t0 = std::chrono::steady_clock::now();
  Tensor y = run1(Op::Conv, {x, w}, c.attrs());
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[ perf ] Conv 1x64x56x56 64->64 3x3: %.1f ms (%d threads)\n", ms, omp_get_max_threads());
  expect_direct_conv(y, x, w, nullptr, c, 97);
}

TEST(MatMulPerformance, bert_sized_128x768x768) {
  Tensor a = random_tensor({1, 128, 768}, 14), b = random_tensor({768, 768}, 15);
  run1(Op::MatMul, {a, b});
  auto t0 = std::chrono::steady_clock::now();
  Tensor y = run1(Op::MatMul, {a, b});
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[ perf ] MatMul 128x768x768: %.1f ms (%d threads)\n", ms, omp_get_max_threads());
  EXPECT_EQ(y.shape(), (Shape{1, 128, 768}));
}

}  // namespace
}  // namespace terrace::testing
