// Misc-family reference kernels: quantisation, NMS, windows, DFT, GridSample, random numbers.
#include <gtest/gtest.h>

#include <cmath>

#include "interp/interpreter.h"
#include "tests/support/node_runner.h"

namespace terrace {
namespace {

using testing::int_attr;
using testing::str_attr;

struct NodeSpec {
  Op op;
  int n_in, n_out = 1;
  std::map<std::string, Attribute> attrs = {};
};


std::vector<RValue> run(const NodeSpec& spec, const std::vector<Tensor>& in) {
  Node n;
  n.op = spec.op;
  n.name = "n";
  for (int i = 0; i < spec.n_in; ++i) n.inputs.push_back(i < int(in.size()) && in[size_t(i)].defined() ? i : -1);
  for (int i = 0; i < spec.n_out; ++i) n.outputs.push_back(spec.n_in + i);
  n.attrs = spec.attrs;
  std::vector<RValue> vals(in.begin(), in.end());
  std::vector<const RValue*> p;
  for (int i = 0; i < spec.n_in; ++i) p.push_back(n.inputs[size_t(i)] >= 0 ? &vals[size_t(i)] : nullptr);
  return interpret_node(n, p);
}

std::vector<double> values(const Tensor& t) {
  std::vector<double> v;
  for (int64_t i = 0; i < t.numel(); ++i) v.push_back(t.get_as_double(i));
  return v;
}

TEST(Quantize, rounds_half_to_even_and_saturates_per_axis) {
  Tensor x = Tensor::from_vector<float>({2, 3}, {0.5f, 1.5f, 2.5f, -300.f, 300.f, 3.f});
  Tensor scale = Tensor::from_vector<float>({2}, {1.f, 2.f});
  Tensor zero = Tensor::from_vector<int8_t>({2}, {0, 1});
  auto y = run({Op::QuantizeLinear, 3, 1, {{"axis", int_attr(0)}}}, {x, scale, zero})[0].tensor;
  ASSERT_EQ(y.dtype(), DType::Int8);
  EXPECT_EQ(values(y), (std::vector<double>{0, 2, 2, -128, 127, 3}));
  auto back = run({Op::DequantizeLinear, 3, 1, {{"axis", int_attr(0)}}}, {y, scale, zero})[0].tensor;
  EXPECT_EQ(values(back), (std::vector<double>{0, 2, 2, -258, 252, 4}));
}

TEST(Quantize, dynamic_quantization_covers_zero_and_the_data_range) {
  Tensor x = Tensor::from_vector<float>({3}, {-1.f, 0.f, 4.1f});
  auto out = run({Op::DynamicQuantizeLinear, 1, 3}, {x});
  EXPECT_FLOAT_EQ(out[1].tensor.data<float>()[0], 5.1f / 255.f);
  EXPECT_EQ(out[2].tensor.data<uint8_t>()[0], 50);
  EXPECT_EQ(values(out[0].tensor), (std::vector<double>{0, 50, 255}));
}

TEST(NonMaxSuppression, keeps_the_best_box_of_each_overlapping_cluster) {
  Tensor boxes = Tensor::from_vector<float>({1, 3, 4}, {0, 0, 1, 1, 0, 0.1f, 1, 1.1f, 0, 5, 1, 6});
  Tensor scores = Tensor::from_vector<float>({1, 1, 3}, {0.8f, 0.9f, 0.1f});
  auto sel = run({Op::NonMaxSuppression, 5},
                 {boxes, scores, Tensor::from_vector<int64_t>({1}, {10}),
                  Tensor::from_vector<float>({1}, {0.5f}), Tensor::from_vector<float>({1}, {0.05f})})[0]
                 .tensor;
  ASSERT_EQ(sel.shape(), (Shape{2, 3}));
  EXPECT_EQ(sel.to_int64_vector(), (std::vector<int64_t>{0, 0, 1, 0, 0, 2}));
}

TEST(Signal, periodic_hann_window_matches_its_formula) {
  auto w = run({Op::HannWindow, 1}, {Tensor::scalar<int64_t>(4)})[0].tensor;
  ASSERT_EQ(w.dtype(), DType::Float32);
  auto v = values(w);
  EXPECT_NEAR(v[0], 0, 1e-7);
  EXPECT_NEAR(v[1], 0.5, 1e-7);
  EXPECT_NEAR(v[2], 1, 1e-7);
}

TEST(Signal, dft_then_inverse_dft_restores_the_signal) {
  Tensor x = Tensor::from_vector<float>({1, 4, 1}, {1, 2, 3, 4});
  auto f = run({Op::DFT, 1}, {x})[0].tensor;
  ASSERT_EQ(f.shape(), (Shape{1, 4, 2}));
  EXPECT_NEAR(f.get_as_double(0), 10, 1e-6);  // DC bin
  EXPECT_NEAR(f.get_as_double(2), -2, 1e-6);
  EXPECT_NEAR(f.get_as_double(3), 2, 1e-6);
  auto back = run({Op::DFT, 1, 1, {{"inverse", int_attr(1)}}}, {f})[0].tensor;
  for (int64_t i = 0; i < 4; ++i) {
    EXPECT_NEAR(back.get_as_double(2 * i), i + 1, 1e-6);
    EXPECT_NEAR(back.get_as_double(2 * i + 1), 0, 1e-6);
  }
  auto half = run({Op::DFT, 1, 1, {{"onesided", int_attr(1)}}}, {x})[0].tensor;
  EXPECT_EQ(half.shape(), (Shape{1, 3, 2}));
}

TEST(GridSample, an_identity_grid_with_aligned_corners_reproduces_the_input) {
  Tensor x = Tensor::from_vector<float>({1, 1, 2, 2}, {1, 2, 3, 4});
  Tensor grid = Tensor::from_vector<float>({1, 2, 2, 2}, {-1, -1, 1, -1, -1, 1, 1, 1});
  for (const char* mode : {"bilinear", "nearest", "bicubic"}) {
    auto y = run({Op::GridSample, 2, 1, {{"align_corners", int_attr(1)}, {"mode", str_attr(mode)}}},
                 {x, grid})[0].tensor;
    auto v = values(y);
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(v[size_t(i)], i + 1, 1e-6) << mode;
  }
}

TEST(Random, same_seed_gives_same_values) {
  Attribute shape;
  shape.kind = Attribute::Kind::Ints;
  shape.ints = {3, 4};
  Attribute seed;
  seed.kind = Attribute::Kind::Float;
  seed.f = 5.f;
  NodeSpec spec{Op::RandomUniform, 0, 1, {{"shape", shape}, {"seed", seed}}};
  auto a = values(run(spec, {})[0].tensor), b = values(run(spec, {})[0].tensor);
  EXPECT_EQ(a, b);
  for (double v : a) EXPECT_TRUE(v >= 0 && v < 1);
}

}  // namespace
}  // namespace terrace
