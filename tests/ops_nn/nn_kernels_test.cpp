// Behaviour of the nn-family reference kernels on small hand-checked cases.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>

#include "interp/interpreter.h"
#include "tests/support/node_runner.h"

namespace terrace {
namespace {

using testing::float_attr;
using testing::run_node;
using testing::int_attr;
using testing::ints_attr;
using testing::str_attr;

Node make_node(Op op, int outputs, std::map<std::string, Attribute> attrs = {}) {
  Node n;
  n.op = op;
  n.name = "n";
  for (int i = 0; i < outputs; ++i) n.outputs.push_back(i);
  n.attrs = std::move(attrs);
  return n;
}


std::vector<float> values(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

Tensor iota(Shape shape) {
  Tensor t = Tensor::empty(DType::Float32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = float(i);
  return t;
}

TEST(NnKernels, max_pool_returns_row_and_column_major_indices) {
  for (int64_t order : {0, 1}) {
    Node n = make_node(Op::MaxPool, 2,
                       {{"kernel_shape", ints_attr({2, 2})}, {"storage_order", int_attr(order)}});
    auto out = run_node(n, {iota({1, 1, 2, 3})});  // [[0,1,2],[3,4,5]]
    EXPECT_EQ(out[0].shape(), (Shape{1, 1, 1, 2}));
    EXPECT_EQ(values(out[0]), (std::vector<float>{4, 5}));
    std::vector<int64_t> want =
        order == 0 ? std::vector<int64_t>{4, 5} : std::vector<int64_t>{3, 5};
    EXPECT_EQ(out[1].to_int64_vector(), want);
  }
}

TEST(NnKernels, max_pool_ceil_mode_adds_a_partial_window) {
  Node n = make_node(
      Op::MaxPool, 1,
      {{"kernel_shape", ints_attr({2})}, {"strides", ints_attr({2})}, {"ceil_mode", int_attr(1)}});
  auto out = run_node(n, {iota({1, 1, 5})});
  EXPECT_EQ(values(out[0]), (std::vector<float>{1, 3, 4}));
}

TEST(NnKernels, average_pool_count_include_pad_changes_the_divisor) {
  for (int64_t include : {0, 1}) {
    Node n = make_node(Op::AveragePool, 1,
                       {{"kernel_shape", ints_attr({3})},
                        {"pads", ints_attr({1, 1})},
                        {"count_include_pad", int_attr(include)}});
    auto out = run_node(n, {iota({1, 1, 3})});  // windows [pad,0,1] [0,1,2] [1,2,pad]
    std::vector<float> want =
        include ? std::vector<float>{1.f / 3, 1, 1} : std::vector<float>{0.5, 1, 1.5};
    EXPECT_EQ(values(out[0]), want);
  }
}

TEST(NnKernels, same_upper_pads_keep_the_spatial_size) {
  Node n =
      make_node(Op::AveragePool, 1,
                {{"kernel_shape", ints_attr({2, 2})}, {"auto_pad", str_attr("SAME_UPPER")}});
  auto out = run_node(n, {iota({1, 2, 3, 3})});
  EXPECT_EQ(out[0].shape(), (Shape{1, 2, 3, 3}));
  EXPECT_FLOAT_EQ(out[0].data<float>()[8], 8.0f);  // the corner window holds only itself
}

TEST(NnKernels, global_pools_reduce_every_spatial_dim) {
  auto avg = run_node(make_node(Op::GlobalAveragePool, 1), {iota({1, 2, 2, 2})});
  auto mx = run_node(make_node(Op::GlobalMaxPool, 1), {iota({1, 2, 2, 2})});
  EXPECT_EQ(avg[0].shape(), (Shape{1, 2, 1, 1}));
  EXPECT_EQ(values(avg[0]), (std::vector<float>{1.5, 5.5}));
  EXPECT_EQ(values(mx[0]), (std::vector<float>{3, 7}));
}

TEST(NnKernels, max_unpool_scatters_into_zeros) {
  Tensor x = Tensor::from_vector<float>({1, 1, 1, 2}, {5, 7});
  Tensor idx = Tensor::from_vector<int64_t>({1, 1, 1, 2}, {1, 6});
  Node n = make_node(Op::MaxUnpool, 1,
                     {{"kernel_shape", ints_attr({2, 2})}, {"strides", ints_attr({2, 2})}});
  auto out = run_node(n, {x, idx});
  EXPECT_EQ(out[0].shape(), (Shape{1, 1, 2, 4}));
  EXPECT_EQ(values(out[0]), (std::vector<float>{0, 5, 0, 0, 0, 0, 7, 0}));
}

TEST(NnKernels, batch_norm_inference_uses_running_statistics) {
  Tensor x = Tensor::from_vector<float>({1, 2, 1, 2}, {1, 2, 3, 4});
  Tensor scale = Tensor::from_vector<float>({2}, {1, 2});
  Tensor bias = Tensor::from_vector<float>({2}, {0, 1});
  Tensor mean = Tensor::from_vector<float>({2}, {1, 3});
  Tensor var = Tensor::from_vector<float>({2}, {4, 1});
  Node n = make_node(Op::BatchNormalization, 1, {{"epsilon", float_attr(0)}});
  auto out = run_node(n, {x, scale, bias, mean, var});
  EXPECT_EQ(values(out[0]), (std::vector<float>{0, 0.5, 1, 3}));
}

TEST(NnKernels, layer_norm_outputs_mean_and_inverse_std) {
  Tensor x = Tensor::from_vector<float>({2, 2}, {1, 3, 2, 2});
  Tensor scale = Tensor::from_vector<float>({2}, {1, 1});
  Node n = make_node(Op::LayerNormalization, 3, {{"epsilon", float_attr(0)}});
  auto out = run_node(n, {x, scale});
  EXPECT_EQ(values(out[1]), (std::vector<float>{2, 2}));
  EXPECT_EQ(out[1].shape(), (Shape{2, 1}));
  EXPECT_EQ(values(out[0])[0], -1.0f);
  EXPECT_TRUE(std::isinf(values(out[2])[1]));  // zero variance and epsilon 0
}

TEST(NnKernels, nll_loss_mean_skips_the_ignored_index) {
  Tensor logp = Tensor::from_vector<float>({3, 2}, {-1, -2, -3, -4, -5, -6});
  Tensor target = Tensor::from_vector<int64_t>({3}, {1, -1, 0});
  Node n = make_node(Op::NegativeLogLikelihoodLoss, 1, {{"ignore_index", int_attr(-1)}});
  auto out = run_node(n, {logp, target});
  EXPECT_EQ(out[0].shape(), Shape{});
  EXPECT_FLOAT_EQ(values(out[0])[0], 3.5f);
}

TEST(NnKernels, nll_loss_rejects_a_target_outside_the_classes) {
  Tensor logp = Tensor::from_vector<float>({1, 2}, {-1, -2});
  Tensor target = Tensor::from_vector<int64_t>({1}, {2});
  try {
    run_node(make_node(Op::NegativeLogLikelihoodLoss, 1), {logp, target});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("NegativeLogLikelihoodLoss"), std::string::npos);
  }
}

// The fuzzer's finding: MeanVarianceNormalization (default axes 0, 2, 3) on a scalar wrote past an
// empty axis mask; it is an InvalidModel naming the node.
TEST(NnKernels, mean_variance_normalization_of_a_scalar_is_an_invalid_model) {
  try {
    run_node(make_node(Op::MeanVarianceNormalization, 1), {Tensor::scalar<float>(2.0f)});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidModel);
    EXPECT_NE(std::string(e.what()).find("out of range for a scalar"), std::string::npos) << e.what();
  }
}

TEST(NnKernels, pool_without_kernel_shape_is_an_invalid_model) {
  try {
    run_node(make_node(Op::MaxPool, 1), {iota({1, 1, 4, 4})});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidModel);
  }
}

TEST(NnKernels, dropout_in_inference_is_the_identity_with_a_true_mask) {
  auto out = run_node(make_node(Op::Dropout, 2), {iota({2, 3})});
  EXPECT_EQ(values(out[0]), values(iota({2, 3})));
  for (int64_t i = 0; i < 6; ++i) EXPECT_TRUE(out[1].data<bool>()[i]);
}

TEST(NnKernels, rnn_with_identity_weights_accumulates_inputs) {
  // H_t = Relu(x_t + H_{t-1}) with W = R = 1: a running sum.
  Tensor x = Tensor::from_vector<float>({3, 1, 1}, {1, 2, 3});
  Tensor w = Tensor::from_vector<float>({1, 1, 1}, {1});
  Attribute acts;
  acts.kind = Attribute::Kind::Strings;
  acts.strings = {"Relu"};
  Node n = make_node(Op::RNN, 2, {{"hidden_size", int_attr(1)}, {"activations", acts}});
  auto out = run_node(n, {x, w, w});
  EXPECT_EQ(values(out[0]), (std::vector<float>{1, 3, 6}));
  EXPECT_EQ(values(out[1]), (std::vector<float>{6}));
}

// Every kernel here must give the same bits for any thread count.
TEST(NnKernels, results_do_not_depend_on_the_thread_count) {
  Tensor x = Tensor::empty(DType::Float32, {2, 8, 9, 9});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = std::sin(float(i) * 0.37f);
  std::vector<Node> nodes = {
      make_node(Op::MaxPool, 2,
                {{"kernel_shape", ints_attr({3, 3})}, {"strides", ints_attr({2, 2})}}),
      make_node(Op::AveragePool, 1,
                {{"kernel_shape", ints_attr({3, 3})}, {"pads", ints_attr({1, 1, 1, 1})}}),
      make_node(Op::GlobalAveragePool, 1), make_node(Op::MeanVarianceNormalization, 1),
      make_node(Op::LRN, 1, {{"size", int_attr(3)}})};
  for (const Node& n : nodes) {
    omp_set_num_threads(1);
    auto a = run_node(n, {x});
    omp_set_num_threads(4);
    auto b = run_node(n, {x});
    ASSERT_EQ(a[0].nbytes(), b[0].nbytes());
    EXPECT_EQ(std::memcmp(a[0].raw(), b[0].raw(), a[0].nbytes()), 0) << op_name(n.op);
  }
}

}  // namespace
}  // namespace terrace

namespace terrace {
namespace {

TEST(NnKernelsMore, lp_pool_takes_the_p_norm_of_each_window) {
  Tensor x = Tensor::from_vector<float>({1, 1, 2}, {3, 4});
  Node n = make_node(Op::LpPool, 1, {{"kernel_shape", ints_attr({2})}, {"p", int_attr(2)}});
  EXPECT_EQ(values(run_node(n, {x})[0]), (std::vector<float>{5}));
}

TEST(NnKernelsMore, lp_normalization_divides_by_the_norm_and_keeps_zero_vectors) {
  Tensor x = Tensor::from_vector<float>({2, 2}, {3, 4, 0, 0});
  auto out = run_node(make_node(Op::LpNormalization, 1), {x});
  EXPECT_EQ(values(out[0]), (std::vector<float>{0.6f, 0.8f, 0, 0}));
}

TEST(NnKernelsMore, instance_norm_normalizes_each_sample_and_channel) {
  Tensor x = Tensor::from_vector<float>({1, 2, 2}, {1, 3, 10, 10});
  Tensor one = Tensor::from_vector<float>({2}, {1, 1}),
         zero = Tensor::from_vector<float>({2}, {0, 0});
  auto out =
      run_node(make_node(Op::InstanceNormalization, 1, {{"epsilon", float_attr(0)}}), {x, one, zero});
  EXPECT_EQ(values(out[0])[0], -1.0f);
  EXPECT_EQ(values(out[0])[1], 1.0f);
  EXPECT_TRUE(std::isnan(values(out[0])[2]));  // zero variance, epsilon 0: 0/0
}

TEST(NnKernelsMore, batch_norm_training_updates_the_running_statistics) {
  Tensor x = Tensor::from_vector<float>({2, 1}, {1, 3});  // batch mean 2, variance 1
  Tensor one = Tensor::from_vector<float>({1}, {1}), zero = Tensor::from_vector<float>({1}, {0});
  Node n = make_node(
      Op::BatchNormalization, 3,
      {{"training_mode", int_attr(1)}, {"momentum", float_attr(0.5f)}, {"epsilon", float_attr(0)}});
  auto out = run_node(n, {x, one, zero, zero, one});
  EXPECT_EQ(values(out[0]), (std::vector<float>{-1, 1}));
  EXPECT_EQ(values(out[1]), (std::vector<float>{1}));
  EXPECT_EQ(values(out[2]), (std::vector<float>{1}));
}

TEST(NnKernelsMore, max_roi_pool_takes_the_max_of_each_bin) {
  Tensor rois = Tensor::from_vector<float>({1, 5}, {0, 0, 0, 3, 3});  // the whole 4x4 map
  Node n = make_node(Op::MaxRoiPool, 1, {{"pooled_shape", ints_attr({2, 2})}});
  auto out = run_node(n, {iota({1, 1, 4, 4}), rois});
  EXPECT_EQ(values(out[0]), (std::vector<float>{5, 7, 13, 15}));
}

TEST(NnKernelsMore, roi_align_averages_bilinear_samples) {
  // A constant map: every sample is the constant, whatever the RoI.
  Tensor x = Tensor::from_vector<float>({1, 1, 2, 2}, {7, 7, 7, 7});
  Tensor rois = Tensor::from_vector<float>({1, 4}, {0, 0, 1, 1});
  Tensor batch = Tensor::from_vector<int64_t>({1}, {0});
  auto out = run_node(make_node(Op::RoiAlign, 1, {{"sampling_ratio", int_attr(2)}}), {x, rois, batch});
  EXPECT_EQ(out[0].shape(), (Shape{1, 1, 1, 1}));
  EXPECT_FLOAT_EQ(values(out[0])[0], 7.0f);
}

// Fuzzing found a NaN RoI coordinate converted to an integer (UBSan). Non-finite or huge RoIs, a
// NaN batch index and a sampling grid beyond reach are InvalidArgument naming the RoI.
TEST(NnKernelsMore, roi_ops_refuse_nan_huge_and_unsampleable_rois_naming_the_roi) {
  auto expect_invalid = [](Op op, std::map<std::string, Attribute> attrs, std::vector<Tensor> in,
                           const std::string& words) {
    try {
      run_node(make_node(op, 1, std::move(attrs)), in);
      FAIL() << "expected an error mentioning '" << words << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  const Tensor x = iota({1, 1, 4, 4});
  const Tensor batch = Tensor::from_vector<int64_t>({2}, {0, 0});
  const float nan = std::nanf("");
  expect_invalid(Op::RoiAlign, {}, {x, Tensor::from_vector<float>({2, 4}, {0, 0, 1, 1, 0, nan, 1, 1}), batch},
                 "RoI 1 has coordinate nan");
  expect_invalid(Op::RoiAlign, {}, {x, Tensor::from_vector<float>({2, 4}, {0, 0, 1, 1, 0, 0, 1, 3e9f}), batch},
                 "RoI 1 has coordinate");
  // A 1e8-pixel RoI into one bin with the default adaptive sampling: 1e16 points.
  expect_invalid(Op::RoiAlign, {}, {x, Tensor::from_vector<float>({2, 4}, {0, 0, 1e8f, 1e8f, 0, 0, 1, 1}), batch},
                 "RoI 0 needs");
  // The same RoI with a sampling ratio is fine: its samples lie outside the map, so 0.
  auto out = run_node(make_node(Op::RoiAlign, 1, {{"sampling_ratio", int_attr(2)}}),
                      {x, Tensor::from_vector<float>({2, 4}, {0, 0, 1e8f, 1e8f, 0, 0, 1, 1}), batch});
  EXPECT_EQ(out[0].shape(), (Shape{2, 1, 1, 1}));
  expect_invalid(Op::MaxRoiPool, {{"pooled_shape", ints_attr({2, 2})}},
                 {x, Tensor::from_vector<float>({1, 5}, {nan, 0, 0, 3, 3})}, "RoI 0 has batch index nan");
  expect_invalid(Op::MaxRoiPool, {{"pooled_shape", ints_attr({2, 2})}},
                 {x, Tensor::from_vector<float>({1, 5}, {0, 0, -INFINITY, 3, 3})}, "RoI 0 has coordinate -inf");
  expect_invalid(Op::MaxRoiPool, {{"pooled_shape", ints_attr({2, 2})}},
                 {x, Tensor::from_vector<float>({3, 1}, {0, 0, 0})}, "input rois must have shape [num_rois, 5]");
}

TEST(NnKernelsMore, lstm_rejects_weights_of_the_wrong_shape) {
  Tensor x = Tensor::from_vector<float>({1, 1, 2}, {1, 2});
  Tensor w = Tensor::zeros(DType::Float32, {1, 4, 3});  // input size 3, X has 2
  Tensor r = Tensor::zeros(DType::Float32, {1, 4, 1});
  try {
    run_node(make_node(Op::LSTM, 2, {{"hidden_size", int_attr(1)}}), {x, w, r});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("input W"), std::string::npos);
  }
}

TEST(NnKernelsMore, softmax_cross_entropy_of_uniform_scores_is_log_c) {
  Tensor scores = Tensor::from_vector<float>({2, 4}, {0, 0, 0, 0, 1, 1, 1, 1});
  Tensor labels = Tensor::from_vector<int64_t>({2}, {0, 3});
  auto out = run_node(make_node(Op::SoftmaxCrossEntropyLoss, 2), {scores, labels});
  EXPECT_FLOAT_EQ(values(out[0])[0], std::log(4.0f));
  EXPECT_EQ(out[1].shape(), (Shape{2, 4}));
}

}  // namespace
}  // namespace terrace

namespace terrace {
namespace {

TEST(NnKernelsMore, bidirectional_rnn_runs_the_reverse_direction_backwards) {
  // W = R = 1, default Tanh for both directions: H_t = tanh(x_t + H_prev).
  Tensor x = Tensor::from_vector<float>({3, 1, 1}, {1, 2, 3});
  Tensor w = Tensor::from_vector<float>({2, 1, 1}, {1, 1});
  Node n = make_node(Op::RNN, 2, {{"hidden_size", int_attr(1)},
                                  {"direction", str_attr("bidirectional")}});
  auto out = run_node(n, {x, w, w});
  ASSERT_EQ(out[0].shape(), (Shape{3, 2, 1, 1}));
  float f1 = std::tanh(1.0f), f2 = std::tanh(2 + f1), f3 = std::tanh(3 + f2);
  float r3 = std::tanh(3.0f), r2 = std::tanh(2 + r3), r1 = std::tanh(1 + r2);
  std::vector<float> y = values(out[0]);
  std::vector<float> want = {f1, r1, f2, r2, f3, r3};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(y[i], want[i], 1e-6) << i;
  EXPECT_NEAR(values(out[1])[0], f3, 1e-6);
  EXPECT_NEAR(values(out[1])[1], r1, 1e-6);
}

}  // namespace
}  // namespace terrace

namespace terrace {
namespace {

TEST(NnKernelsMore, global_pools_accept_more_than_three_spatial_dims) {
  auto out = run_node(make_node(Op::GlobalAveragePool, 1), {iota({1, 2, 2, 1, 2, 1, 2})});
  EXPECT_EQ(out[0].shape(), (Shape{1, 2, 1, 1, 1, 1, 1}));
  EXPECT_EQ(values(out[0]), (std::vector<float>{3.5, 11.5}));
}

}  // namespace
}  // namespace terrace
