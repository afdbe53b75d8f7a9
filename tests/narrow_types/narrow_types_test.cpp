// The narrow types (interp/float8.h): float8 (E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ), int4/uint4 and
// float4e2m1. Conversions against the ONNX Cast spec's tables (every code, rounding ties, saturate,
// NaN and Inf, FNUZ's zero), TensorProto packing, the ops that take them, and the tiers refusing them.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include <onnx/onnx-data_pb.h>

#include "interp/graph_builder.h"
#include "interp/tensor_proto.h"
#include "kernels/lower_op.h"
#include "tests/support/node_runner.h"
#include "tiers/region_lowering.h"
#include "tiers/session.h"

namespace terrace {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

template <typename T>
uint8_t enc(double v, bool saturate = true) {
  return narrow_from_double<T>(v, saturate).bits;
}
template <typename T>
double dec(uint8_t code) {
  return narrow_to_double(T(code));
}

// Every code decodes to a value that encodes back to the same code (saturate or not), except the
// NaN codes (which decode to NaN and encode back to a NaN code) and E5M2's Inf (which saturates).
template <typename T>
void every_code_round_trips(int codes, int nan_codes_expected) {
  const MiniFloatFormat& f = mini_float_format<T>::value;
  int nans = 0;
  for (int c = 0; c < codes; ++c) {
    const double v = dec<T>(uint8_t(c));
    if (std::isnan(v)) {
      ++nans;
      EXPECT_TRUE(std::isnan(dec<T>(enc<T>(v, false)))) << c;
      continue;
    }
    EXPECT_EQ(enc<T>(v, false), c) << "code " << c << " value " << v;
    if (!std::isinf(v)) EXPECT_EQ(enc<T>(v, true), c) << "code " << c << " value " << v;
    // Codes are ordered by magnitude within a sign: the next code up is larger.
    const uint8_t sign_bit = uint8_t(codes / 2);
    if ((c & (sign_bit - 1)) > 0 && !std::isinf(v)) {
      const double below = dec<T>(uint8_t(c - 1));
      if (!std::isnan(below)) EXPECT_LT(std::fabs(below), std::fabs(v)) << c;
    }
  }
  EXPECT_EQ(nans, nan_codes_expected);
  (void)f;
}

TEST(Float8, every_code_round_trips) {
  every_code_round_trips<Float8E4M3FN>(256, 2);    // S.1111.111
  every_code_round_trips<Float8E4M3FNUZ>(256, 1);  // 0x80
  every_code_round_trips<Float8E5M2>(256, 6);      // S.11111.{01,10,11}
  every_code_round_trips<Float8E5M2FNUZ>(256, 1);  // 0x80
  every_code_round_trips<Float4E2M1>(16, 0);
}

TEST(Float8, known_values_from_the_spec) {
  EXPECT_EQ(dec<Float8E4M3FN>(0x7E), 448);
  EXPECT_EQ(dec<Float8E4M3FN>(0x01), std::ldexp(1.0, -9));
  EXPECT_EQ(dec<Float8E4M3FN>(0x38), 1.0);
  EXPECT_EQ(dec<Float8E4M3FN>(0xB8), -1.0);
  EXPECT_EQ(dec<Float8E4M3FNUZ>(0x7F), 240);
  EXPECT_EQ(dec<Float8E4M3FNUZ>(0x40), 1.0);
  EXPECT_EQ(dec<Float8E4M3FNUZ>(0x01), std::ldexp(1.0, -10));
  EXPECT_EQ(dec<Float8E5M2>(0x7B), 57344);
  EXPECT_EQ(dec<Float8E5M2>(0x3C), 1.0);
  EXPECT_EQ(dec<Float8E5M2>(0x7C), kInf);
  EXPECT_EQ(dec<Float8E5M2>(0xFC), -kInf);
  EXPECT_EQ(dec<Float8E5M2>(0x01), std::ldexp(1.0, -16));
  EXPECT_EQ(dec<Float8E5M2FNUZ>(0x7F), 57344);
  EXPECT_EQ(dec<Float8E5M2FNUZ>(0x40), 1.0);
  EXPECT_EQ(dec<Float8E5M2FNUZ>(0x01), std::ldexp(1.0, -17));
  const double e2m1[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  for (int c = 0; c < 8; ++c) {
    EXPECT_EQ(dec<Float4E2M1>(uint8_t(c)), e2m1[c]);
    EXPECT_EQ(dec<Float4E2M1>(uint8_t(c | 8)), -e2m1[c]);
  }
}

TEST(Float8, rounds_to_nearest_even) {
  // E4M3FN around 1: codes 0x38 = 1, 0x39 = 1.125, 0x3A = 1.25.
  EXPECT_EQ(enc<Float8E4M3FN>(1.0625), 0x38);          // tie: to the even code 1.0
  EXPECT_EQ(enc<Float8E4M3FN>(1.0625 + 1e-6), 0x39);   // above the tie
  EXPECT_EQ(enc<Float8E4M3FN>(1.1875), 0x3A);          // tie: to the even code 1.25
  EXPECT_EQ(enc<Float8E4M3FN>(1.1875 - 1e-6), 0x39);
  EXPECT_EQ(enc<Float8E4M3FN>(-1.0625), 0xB8);
  // Subnormals: half the smallest rounds to 0 (even), 1.5 of it to 2 of it (even).
  EXPECT_EQ(enc<Float8E4M3FN>(std::ldexp(1.0, -10)), 0x00);
  EXPECT_EQ(enc<Float8E4M3FN>(std::ldexp(1.0, -10) * 1.001), 0x01);
  EXPECT_EQ(enc<Float8E4M3FN>(std::ldexp(3.0, -10)), 0x02);
  // Into the next binade: 1.9375 (tie between 1.875 and 2) goes up to 2 (0x40).
  EXPECT_EQ(enc<Float8E4M3FN>(1.9375), 0x40);
  // The largest subnormal rounding up to the smallest normal.
  EXPECT_EQ(enc<Float8E4M3FN>(std::ldexp(7.5, -9)), 0x08);
  // E5M2 around 1: 0x3C = 1, 0x3D = 1.25.
  EXPECT_EQ(enc<Float8E5M2>(1.125), 0x3C);
  EXPECT_EQ(enc<Float8E5M2>(1.375), 0x3E);
  // Float4: the reference's thresholds (0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 2.5 -> 2, 5 -> 4).
  EXPECT_EQ(enc<Float4E2M1>(0.25), 0x0);
  EXPECT_EQ(enc<Float4E2M1>(0.26), 0x1);
  EXPECT_EQ(enc<Float4E2M1>(0.75), 0x2);
  EXPECT_EQ(enc<Float4E2M1>(1.25), 0x2);
  EXPECT_EQ(enc<Float4E2M1>(2.5), 0x4);
  EXPECT_EQ(enc<Float4E2M1>(5.0), 0x6);
  EXPECT_EQ(enc<Float4E2M1>(5.01), 0x7);
}

TEST(Float8, saturate_or_overflow) {
  // E4M3FN: 464 is the tie between 448 and (the missing) 480: it rounds to 448 either way.
  EXPECT_EQ(enc<Float8E4M3FN>(464, false), 0x7E);
  EXPECT_EQ(enc<Float8E4M3FN>(465, true), 0x7E);
  EXPECT_EQ(enc<Float8E4M3FN>(465, false), 0x7F);  // NaN: no Inf
  EXPECT_EQ(enc<Float8E4M3FN>(480, false), 0x7F);  // ONNX's Python reference gives 448 here (float8.h)
  EXPECT_EQ(enc<Float8E4M3FN>(490, true), 0x7E);
  EXPECT_EQ(enc<Float8E4M3FN>(-1e9, true), 0xFE);
  EXPECT_EQ(enc<Float8E4M3FN>(-1e9, false), 0xFF);
  EXPECT_EQ(enc<Float8E4M3FN>(kInf, true), 0x7E);
  EXPECT_EQ(enc<Float8E4M3FN>(-kInf, false), 0xFF);
  // E4M3FNUZ: the one NaN 0x80.
  EXPECT_EQ(enc<Float8E4M3FNUZ>(248, false), 0x80);
  EXPECT_EQ(enc<Float8E4M3FNUZ>(-248, true), 0xFF);
  EXPECT_EQ(enc<Float8E4M3FNUZ>(-kInf, false), 0x80);
  // E5M2: overflow gives Inf; 61440 is the tie between 57344 and 65536 (even): it overflows.
  EXPECT_EQ(enc<Float8E5M2>(61440, false), 0x7C);
  EXPECT_EQ(enc<Float8E5M2>(61439, false), 0x7B);
  EXPECT_EQ(enc<Float8E5M2>(61440, true), 0x7B);
  EXPECT_EQ(enc<Float8E5M2>(-kInf, false), 0xFC);
  EXPECT_EQ(enc<Float8E5M2>(-kInf, true), 0xFB);
  // E5M2FNUZ: NaN.
  EXPECT_EQ(enc<Float8E5M2FNUZ>(1e6, false), 0x80);
  EXPECT_EQ(enc<Float8E5M2FNUZ>(1e6, true), 0x7F);
  // Float4 always saturates.
  EXPECT_EQ(enc<Float4E2M1>(-100, false), 0xF);
  EXPECT_EQ(enc<Float4E2M1>(kInf, false), 0x7);
}

TEST(Float8, nan_and_zero) {
  EXPECT_EQ(enc<Float8E4M3FN>(kNaN), 0x7F);
  EXPECT_EQ(enc<Float8E4M3FN>(-kNaN), 0xFF);
  EXPECT_EQ(enc<Float8E5M2>(kNaN), 0x7F);
  EXPECT_EQ(enc<Float8E4M3FNUZ>(-kNaN), 0x80);
  EXPECT_EQ(enc<Float8E5M2FNUZ>(kNaN), 0x80);
  EXPECT_EQ(enc<Float4E2M1>(kNaN), 0x7);  // no NaN: ONNX's reference gives +6
  EXPECT_EQ(enc<Float8E4M3FN>(-0.0), 0x80);  // -0 kept
  EXPECT_EQ(enc<Float8E5M2>(-1e-30), 0x80);
  EXPECT_EQ(enc<Float8E4M3FNUZ>(-0.0), 0x00);  // no -0: 0x80 is NaN
  EXPECT_EQ(enc<Float8E5M2FNUZ>(-1e-30), 0x00);
  EXPECT_EQ(enc<Float4E2M1>(-0.0), 0x8);
}

TEST(Int4, rounds_and_clamps) {
  EXPECT_EQ(int8_t(enc<Int4>(2.5)), 2);
  EXPECT_EQ(int8_t(enc<Int4>(3.5)), 4);
  EXPECT_EQ(int8_t(enc<Int4>(-8.6)), -8);
  EXPECT_EQ(int8_t(enc<Int4>(100)), 7);
  EXPECT_EQ(int8_t(enc<Int4>(kNaN)), 0);
  EXPECT_EQ(enc<UInt4>(-1), 0);
  EXPECT_EQ(enc<UInt4>(15.4), 15);
  EXPECT_EQ(enc<UInt4>(1e9), 15);
  for (int v = -8; v <= 7; ++v) EXPECT_EQ(dec<Int4>(enc<Int4>(v)), v);
  for (int v = 0; v <= 15; ++v) EXPECT_EQ(dec<UInt4>(enc<UInt4>(v)), v);
}

onnx::TensorProto proto(int data_type, std::vector<int64_t> dims) {
  onnx::TensorProto p;
  p.set_data_type(data_type);
  for (int64_t d : dims) p.add_dims(d);
  return p;
}

TEST(NarrowTensorProto, four_bit_types_pack_two_to_a_byte_low_nibble_first) {
  onnx::TensorProto p = proto(22, {3});  // INT4
  p.set_raw_data(std::string("\x2F\x08", 2));  // -1, 2, then -8 in the low nibble of the last byte
  Tensor t = tensor_from_proto(p, "t");
  ASSERT_EQ(t.dtype(), DType::Int4);
  EXPECT_EQ(t.get_as_double(0), -1);
  EXPECT_EQ(t.get_as_double(1), 2);
  EXPECT_EQ(t.get_as_double(2), -8);
  onnx::TensorProto back;
  tensor_to_proto(t, &back, "t");
  EXPECT_EQ(back.raw_data(), std::string("\x2F\x08", 2));
  // int32_data holds one packed byte per entry.
  onnx::TensorProto q = proto(21, {2, 2});  // UINT4
  q.add_int32_data(0x21);
  q.add_int32_data(0xF3);
  Tensor u = tensor_from_proto(q, "u");
  EXPECT_EQ(u.get_as_double(0), 1);
  EXPECT_EQ(u.get_as_double(1), 2);
  EXPECT_EQ(u.get_as_double(2), 3);
  EXPECT_EQ(u.get_as_double(3), 15);
  // A byte count that does not match the dims is an InvalidModel error naming the tensor.
  onnx::TensorProto bad = proto(23, {3});
  bad.set_raw_data(std::string(3, '\0'));
  try {
    tensor_from_proto(bad, "weights");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidModel);
    EXPECT_NE(e.message().find("weights"), std::string::npos) << e.message();
  }
}

TEST(NarrowTensorProto, float8_reads_one_code_per_int32_entry) {
  onnx::TensorProto p = proto(17, {2});
  p.add_int32_data(0x38);
  p.add_int32_data(0xFE);
  Tensor t = tensor_from_proto(p, "t");
  EXPECT_EQ(t.get_as_double(0), 1.0);
  EXPECT_EQ(t.get_as_double(1), -448.0);
}

using testing::run_op;

TEST(NarrowOps, cast_saturate_attribute_and_back) {
  Tensor x = Tensor::from_vector<float>({4}, {1.0625f, 500.f, -1e6f, std::nanf("")});
  Tensor sat = run_op(Op::Cast, {x}, {{"to", int64_t(17)}})[0];
  Tensor raw = run_op(Op::Cast, {x}, {{"to", int64_t(17)}, {"saturate", int64_t(0)}})[0];
  ASSERT_EQ(sat.dtype(), DType::Float8E4M3FN);
  const uint8_t want_sat[4] = {0x38, 0x7E, 0xFE, 0x7F}, want_raw[4] = {0x38, 0x7F, 0xFF, 0x7F};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(sat.data<Float8E4M3FN>()[i].bits, want_sat[i]) << i;
    EXPECT_EQ(raw.data<Float8E4M3FN>()[i].bits, want_raw[i]) << i;
  }
  Tensor back = run_op(Op::Cast, {sat}, {{"to", int64_t(1)}})[0];
  EXPECT_EQ(back.data<float>()[1], 448.f);
  EXPECT_TRUE(std::isnan(back.data<float>()[3]));
  // int64 to int4 clamps; int4 to string.
  Tensor i = Tensor::from_vector<int64_t>({3}, {-100, 5, 100});
  Tensor i4 = run_op(Op::Cast, {i}, {{"to", int64_t(22)}})[0];
  Tensor s = run_op(Op::Cast, {i4}, {{"to", int64_t(8)}})[0];
  EXPECT_EQ(s.data<std::string>()[0], "-8");
  EXPECT_EQ(s.data<std::string>()[2], "7");
}

TEST(NarrowOps, quantize_dequantize_float8_and_int4) {
  Tensor x = Tensor::from_vector<float>({4}, {0.f, 1.f, 1000.f, -3.f});
  Tensor scale = Tensor::scalar<float>(2.f);
  Tensor zp8 = Tensor::empty(DType::Float8E5M2, {});
  zp8.data<Float8E5M2>()[0] = Float8E5M2(0);
  Tensor q = run_op(Op::QuantizeLinear, {x, scale, zp8})[0];
  ASSERT_EQ(q.dtype(), DType::Float8E5M2);
  EXPECT_EQ(q.get_as_double(1), 0.5);
  EXPECT_EQ(q.get_as_double(2), 512);
  Tensor d = run_op(Op::DequantizeLinear, {q, scale, zp8})[0];
  EXPECT_EQ(d.data<float>()[2], 1024.f);
  EXPECT_EQ(d.data<float>()[3], -3.f);
  Tensor zp4 = Tensor::empty(DType::Int4, {});
  zp4.data<Int4>()[0] = Int4(uint8_t(1));
  Tensor q4 = run_op(Op::QuantizeLinear, {x, scale, zp4})[0];
  EXPECT_EQ(q4.get_as_double(0), 1);
  EXPECT_EQ(q4.get_as_double(2), 7);   // clamped
  EXPECT_EQ(q4.get_as_double(3), -1);  // rint(-1.5) = -2, + 1
}

TEST(NarrowOps, data_movement_copies_the_codes) {
  Tensor a = Tensor::empty(DType::Float8E4M3FN, {2, 3});
  for (int i = 0; i < 6; ++i) a.data<Float8E4M3FN>()[i] = Float8E4M3FN(uint8_t(0x38 + i));
  Tensor t = run_op(Op::Transpose, {a})[0];
  ASSERT_EQ(t.dtype(), DType::Float8E4M3FN);
  EXPECT_EQ(t.data<Float8E4M3FN>()[1].bits, 0x3B);
  Tensor c = run_op(Op::Concat, {a, a}, {{"axis", int64_t(0)}})[0];
  EXPECT_EQ(c.shape(), Shape({4, 3}));
  EXPECT_EQ(c.data<Float8E4M3FN>()[7].bits, 0x39);
  Tensor cond = Tensor::from_vector<bool>({3}, {true, false, true});
  Tensor b = Tensor::zeros(DType::Float8E4M3FN, {2, 3});
  Tensor w = run_op(Op::Where, {cond, a, b})[0];
  EXPECT_EQ(w.data<Float8E4M3FN>()[0].bits, 0x38);
  EXPECT_EQ(w.data<Float8E4M3FN>()[1].bits, 0x00);
  EXPECT_EQ(w.data<Float8E4M3FN>()[5].bits, 0x3D);
}

TEST(NarrowOps, isnan_and_isinf_take_float8) {
  Tensor x = Tensor::empty(DType::Float8E5M2, {4});
  const uint8_t codes[4] = {0x3C, 0x7C, 0xFC, 0x7E};  // 1, Inf, -Inf, NaN
  for (int i = 0; i < 4; ++i) x.data<Float8E5M2>()[i] = Float8E5M2(codes[i]);
  Tensor nan = run_op(Op::IsNaN, {x})[0];
  Tensor inf = run_op(Op::IsInf, {x}, {{"detect_negative", int64_t(0)}})[0];
  const bool want_nan[4] = {false, false, false, true}, want_inf[4] = {false, true, false, false};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(nan.data<bool>()[i], want_nan[i]) << i;
    EXPECT_EQ(inf.data<bool>()[i], want_inf[i]) << i;
  }
  Tensor i4 = Tensor::zeros(DType::Int4, {2});
  try {
    run_op(Op::IsNaN, {i4});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::NotImplemented) << e.what();
  }
}

TEST(NarrowOps, other_ops_refuse_them_with_not_implemented) {
  Tensor a = Tensor::zeros(DType::Float8E4M3FN, {2});
  try {
    run_op(Op::Add, {a, a});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::NotImplemented) << e.what();
  }
}

TEST(NarrowTiers, compiled_tiers_refuse_them_with_a_reason) {
  GraphBuilder b("g", 21);
  auto x = b.input("x", DType::Float32, {4});
  auto f8 = b.op("Cast", {x}, {{"to", int64_t(19)}, {"saturate", int64_t(0)}});
  auto y = b.op("Cast", {f8}, {{"to", int64_t(1)}});
  b.output(y, DType::Float32, {4});
  std::shared_ptr<Graph> g = b.build();
  ASSERT_EQ(g->nodes.size(), 2u);
  for (const Node& n : g->nodes) {
    std::string why = can_lower_node(*g, n);
    EXPECT_NE(why.find("float8e5m2"), std::string::npos) << why;
  }
  Options opts;
  opts.max_tier = Tier::Cpu;
  auto session = Session::from_graph(g, opts);
  for (int call = 0; call < 3; ++call) {
    NamedTensors out = session->run({{"x", Tensor::from_vector<float>({4}, {1.1f, 60000.f, -70000.f, 3.f})}});
    const float* v = out[0].second.data<float>();
    EXPECT_EQ(v[0], 1.0f);
    EXPECT_EQ(v[1], 57344.f);
    EXPECT_EQ(v[2], -std::numeric_limits<float>::infinity());
    EXPECT_EQ(v[3], 3.f);
  }
}

}  // namespace
}  // namespace terrace
