// Importer tests of TensorProto conversion: typed fields, raw data, .pb files and value kinds.
#include <cstring>
#include <filesystem>
#include <fstream>

#include <onnx/onnx-data_pb.h>

#include "interp/tensor_proto.h"
#include "tests/import/import_util.h"

namespace terrace::test {
namespace {

onnx::TensorProto proto(int data_type, std::vector<int64_t> dims) {
  onnx::TensorProto p;
  p.set_data_type(data_type);
  for (int64_t d : dims) p.add_dims(d);
  return p;
}

std::string temp_file(const std::string& name, const std::string& bytes) {
  std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

TEST(TensorProto, int32_data_holds_small_ints_bools_and_half_bits) {
  onnx::TensorProto i8 = proto(onnx::TensorProto::INT8, {2});
  i8.add_int32_data(-5);
  i8.add_int32_data(7);
  EXPECT_EQ(tensor_from_proto(i8, "t").data<int8_t>()[0], -5);
  onnx::TensorProto b = proto(onnx::TensorProto::BOOL, {2});
  b.add_int32_data(0);
  b.add_int32_data(3);
  EXPECT_TRUE(tensor_from_proto(b, "t").data<bool>()[1]);
  onnx::TensorProto h = proto(onnx::TensorProto::FLOAT16, {1});
  h.add_int32_data(0x3c00);  // 1.0 in half
  EXPECT_EQ(float(tensor_from_proto(h, "t").data<Half>()[0]), 1.0f);
  onnx::TensorProto bf = proto(onnx::TensorProto::BFLOAT16, {1});
  bf.add_int32_data(0x4000);  // 2.0 in bfloat16
  EXPECT_EQ(float(tensor_from_proto(bf, "t").data<BFloat16>()[0]), 2.0f);
}

TEST(TensorProto, wide_typed_fields_convert) {
  onnx::TensorProto d = proto(onnx::TensorProto::DOUBLE, {1});
  d.add_double_data(2.5);
  EXPECT_EQ(tensor_from_proto(d, "t").data<double>()[0], 2.5);
  onnx::TensorProto u = proto(onnx::TensorProto::UINT32, {1});
  u.add_uint64_data(4000000000u);
  EXPECT_EQ(tensor_from_proto(u, "t").data<uint32_t>()[0], 4000000000u);
  onnx::TensorProto s = proto(onnx::TensorProto::STRING, {2});
  s.add_string_data("a");
  s.add_string_data("bc");
  EXPECT_EQ(tensor_from_proto(s, "t").data<std::string>()[1], "bc");
}

TEST(TensorProto, raw_data_converts) {
  onnx::TensorProto p = proto(onnx::TensorProto::INT64, {2});
  int64_t v[2] = {-1, 1LL << 40};
  p.set_raw_data(std::string(reinterpret_cast<const char*>(v), sizeof v));
  Tensor t = tensor_from_proto(p, "t");
  EXPECT_EQ(t.data<int64_t>()[1], 1LL << 40);
}

TEST(TensorProto, raw_data_of_the_wrong_size_is_invalid_model) {
  onnx::TensorProto p = proto(onnx::TensorProto::FLOAT, {4});
  p.set_raw_data(std::string(12, '\0'));
  EXPECT_THROW(tensor_from_proto(p, "t"), Error);
}

TEST(TensorProto, pb_round_trip_keeps_dtype_shape_and_values) {
  for (DType dt : {DType::Float32, DType::Float16, DType::Bool, DType::Int8, DType::UInt64}) {
    Tensor t = Tensor::zeros(dt, {2, 3}).cast(dt);
    Tensor back = tensor_from_pb_bytes(tensor_to_pb_bytes(t, "x"), "x");
    EXPECT_EQ(back.dtype(), dt);
    EXPECT_EQ(back.shape(), Shape({2, 3}));
  }
  Tensor f = Tensor::from_vector<float>({3}, {1.5f, -2.f, 7.f});
  std::string path = ::testing::TempDir() + "/terrace_round_trip.pb";
  save_tensor_pb(f, path, "f");
  Tensor g = load_tensor_pb(path);
  EXPECT_EQ(std::memcmp(g.raw(), f.raw(), f.nbytes()), 0);
}

TEST(TensorProto, garbage_pb_file_is_a_clean_error) {
  EXPECT_THROW(load_tensor_pb(temp_file("terrace_garbage.pb", "\xff\xff\xff\xff")), Error);
  EXPECT_THROW(load_tensor_pb(temp_file("terrace_empty.pb", "")), Error);
}

TEST(TensorProto, sequence_and_optional_pb_files_load) {
  onnx::SequenceProto seq;
  seq.set_elem_type(onnx::SequenceProto::TENSOR);
  tensor_to_proto(Tensor::scalar<float>(1.f), seq.add_tensor_values());
  tensor_to_proto(Tensor::scalar<float>(2.f), seq.add_tensor_values());
  RValue s = load_value_pb(temp_file("terrace_seq.pb", seq.SerializeAsString()), ValueKind::Sequence);
  ASSERT_EQ(s.kind, ValueKind::Sequence);
  EXPECT_EQ(s.seq.size(), 2u);

  onnx::OptionalProto opt;
  opt.set_elem_type(onnx::OptionalProto::TENSOR);
  RValue empty = load_value_pb(temp_file("terrace_opt0.pb", opt.SerializeAsString()), ValueKind::Optional);
  EXPECT_EQ(empty.kind, ValueKind::Optional);
  EXPECT_FALSE(empty.has_element);
  tensor_to_proto(Tensor::scalar<int64_t>(4), opt.mutable_tensor_value());
  RValue full = load_value_pb(temp_file("terrace_opt1.pb", opt.SerializeAsString()), ValueKind::Optional);
  EXPECT_TRUE(full.has_element);
  EXPECT_EQ(full.tensor.data<int64_t>()[0], 4);
}

// A .pb that is empty or is a whole model says so, naming the file, instead of "has no data type".
TEST(TensorProto, an_empty_file_or_a_model_given_as_a_tensor_is_named_as_such) {
  const std::string empty = temp_file("empty.pb", "");
  try {
    load_tensor_pb(empty);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_EQ(e.message(), empty + " is empty (0 bytes), not a TensorProto");
  }
  const std::string model = temp_file("model_as_tensor.pb", bytes_of(parse_model(kSmallModel)));
  try {
    load_tensor_pb(model);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), model + " is an ONNX model (ModelProto), not a TensorProto");
  }
}

// Tensor::adopt (tier 2's recycled host outputs): the memory stays while any copy of the tensor
// lives, its owner is released with the last one, and it is the tensor's own, not borrowed()
// (so the C API and Python hand it out without a copy).
TEST(Tensor, an_adopted_tensor_releases_its_owner_with_its_last_copy) {
  static float buffer[6] = {1, 2, 3, 4, 5, 6};
  int released = 0;
  std::shared_ptr<void> owner(buffer, [&released](void*) { ++released; });
  Tensor t = Tensor::adopt(DType::Float32, {2, 3}, buffer, sizeof buffer, std::move(owner));
  EXPECT_FALSE(t.borrowed());
  EXPECT_EQ(t.data<float>()[5], 6.0f);
  {
    Tensor copy = t;
    t = Tensor();
    EXPECT_EQ(released, 0);
    EXPECT_EQ(copy.clone().data<float>()[4], 5.0f);
  }
  EXPECT_EQ(released, 1);
  EXPECT_THROW(Tensor::adopt(DType::Float32, {7}, buffer, sizeof buffer, std::shared_ptr<void>(buffer, [](void*) {})),
               Error);
  EXPECT_THROW(Tensor::adopt(DType::Float32, {6}, buffer, sizeof buffer, nullptr), Error);
}

}  // namespace
}  // namespace terrace::test
