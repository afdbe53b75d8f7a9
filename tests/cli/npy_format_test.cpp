// tools/npy.h in the test process: .npy files of every dtype and format version read as numpy
// writes them, .npy written as numpy writes it, .npz archives, and each malformed file refused with
// an InvalidArgument that names the file and what was wrong.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/support/npy_bytes.h"
#include "tools/npy.h"

namespace {
using namespace npy_bytes;
using terrace::DType;
using terrace::Tensor;
using terrace::cli::tensor_from_npy;
using terrace::cli::tensor_to_npy;
using terrace::cli::tensors_from_npz;

// The message of the InvalidArgument that reading `bytes` as a .npy file throws ("" if none).
std::string npy_error(const std::string& bytes) {
  try {
    tensor_from_npy(bytes, "f.npy");
  } catch (const terrace::Error& e) {
    EXPECT_EQ(e.code(), terrace::ErrorCode::InvalidArgument) << e.what();
    EXPECT_NE(e.message().find("f.npy"), std::string::npos) << "names the file: " << e.message();
    return e.message();
  }
  return "";
}

std::string npz_error(const std::string& bytes) {
  try {
    tensors_from_npz(bytes, "f.npz");
  } catch (const terrace::Error& e) {
    EXPECT_EQ(e.code(), terrace::ErrorCode::InvalidArgument) << e.what();
    return e.message();
  }
  return "";
}

TEST(NpyFormat, reads_every_little_endian_dtype_numpy_writes) {
  struct Case {
    const char* descr;
    DType dtype;
    std::string data;
  };
  const std::vector<Case> cases = {
      {"<f2", DType::Float16, raw<uint16_t>({0x3c00, 0xc000})},  // 1, -2
      {"<f4", DType::Float32, raw<float>({1.5f, -2})},
      {"<f8", DType::Float64, raw<double>({1.5, -2})},
      {"|i1", DType::Int8, raw<int8_t>({-3, 4})},
      {"<i2", DType::Int16, raw<int16_t>({-3, 4})},
      {"<i4", DType::Int32, raw<int32_t>({-3, 4})},
      {"<i8", DType::Int64, raw<int64_t>({-3, int64_t(1) << 40})},
      {"|u1", DType::UInt8, raw<uint8_t>({3, 250})},
      {"<u2", DType::UInt16, raw<uint16_t>({3, 60000})},
      {"<u4", DType::UInt32, raw<uint32_t>({3, 4000000000u})},
      {"<u8", DType::UInt64, raw<uint64_t>({3, uint64_t(1) << 63})},
      {"|b1", DType::Bool, raw<uint8_t>({1, 0})},
  };
  for (const Case& c : cases) {
    Tensor t = tensor_from_npy(npy_array(c.descr, "(2,)", c.data), "f.npy");
    EXPECT_EQ(t.dtype(), c.dtype) << c.descr;
    ASSERT_EQ(t.shape(), terrace::Shape{2}) << c.descr;
    EXPECT_EQ(std::string(static_cast<const char*>(t.raw()), t.nbytes()), c.data) << c.descr;
  }
  EXPECT_EQ(tensor_from_npy(npy_array("=i4", "(1,)", raw<int32_t>({7})), "f.npy").data<int32_t>()[0], 7);
}

TEST(NpyFormat, reads_format_versions_2_and_3_scalars_empty_arrays_and_python2_dims) {
  const std::string data = raw<float>({1, 2, 3, 4, 5, 6});
  for (int major : {1, 2, 3}) {
    Tensor t = tensor_from_npy(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", data, major), "f.npy");
    EXPECT_EQ(t.shape(), (terrace::Shape{2, 3})) << major;
    EXPECT_EQ(t.data<float>()[5], 6) << major;
  }
  Tensor scalar = tensor_from_npy(npy_array("<i8", "()", raw<int64_t>({42})), "f.npy");
  EXPECT_TRUE(scalar.shape().empty());
  EXPECT_EQ(scalar.data<int64_t>()[0], 42);
  Tensor empty = tensor_from_npy(npy_array("<f4", "(0, 3)", ""), "f.npy");
  EXPECT_EQ(empty.shape(), (terrace::Shape{0, 3}));
  // Double quotes, no trailing comma, keys in another order, "3L": what ast.literal_eval takes.
  Tensor odd = tensor_from_npy(npy("{\"shape\": (2L, 3L), \"fortran_order\": False, \"descr\": \"<f4\"}", data), "f.npy");
  EXPECT_EQ(odd.shape(), (terrace::Shape{2, 3}));
  // Fortran order is the same bytes when at most one dim is above 1.
  Tensor column = tensor_from_npy(npy("{'descr': '<f4', 'fortran_order': True, 'shape': (6, 1), }", data), "f.npy");
  EXPECT_EQ(column.data<float>()[2], 3);
}

TEST(NpyFormat, a_truncated_or_overlong_file_is_refused_naming_what_is_missing) {
  const std::string good = npy_array("<f4", "(2, 3)", raw<float>({1, 2, 3, 4, 5, 6}));
  EXPECT_NE(npy_error(good.substr(0, 8)).find("ends inside its preamble"), std::string::npos);
  EXPECT_NE(npy_error(good.substr(0, 40)).find("ends inside its header"), std::string::npos);
  EXPECT_NE(npy_error(good.substr(0, good.size() - 1)).find("(cut short)"), std::string::npos);
  EXPECT_NE(npy_error(good + "x").find("(too many)"), std::string::npos);
  EXPECT_NE(npy_error(std::string("\x93NUMPY\x04\x00", 8) + le(0, 2)).find("version 4.0"), std::string::npos);
  // A header claiming a huge shape is refused on the data size, before anything is allocated.
  EXPECT_NE(npy_error(npy_array("<f8", "(100000000000, 100000000000)", "")).find("f.npy"), std::string::npos);
}

TEST(NpyFormat, a_wrong_dtype_string_is_refused_listing_the_dtypes_read) {
  for (const char* descr : {"<c8", "<U3", "|S4", "<M8[ns]", "f4x", "", "<f16", "|O"}) {
    std::string msg = npy_error(npy_array(descr, "(1,)", "12345678"));
    EXPECT_NE(msg.find("is not one Terrace reads"), std::string::npos) << descr << ": " << msg;
    EXPECT_NE(msg.find("f2, f4, f8, i1"), std::string::npos) << descr << ": " << msg;
  }
  EXPECT_NE(npy_error(npy_array(">f4", "(1,)", "1234")).find("big-endian"), std::string::npos);
  std::string structured = npy("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", "1234");
  EXPECT_NE(npy_error(structured).find("structured dtype"), std::string::npos);
}

TEST(NpyFormat, fortran_order_and_malformed_headers_are_refused) {
  const std::string data = raw<float>({1, 2, 3, 4, 5, 6});
  std::string msg = npy_error(npy("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", data));
  EXPECT_NE(msg.find("Fortran order"), std::string::npos) << msg;
  EXPECT_NE(msg.find("np.ascontiguousarray"), std::string::npos) << msg;
  for (const char* dict : {"{'descr': '<f4', 'shape': (2, 3), }", "{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }",
                           "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2, 3), }", "not a dict",
                           "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'extra': 1, }",
                           "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } trailing",
                           "{'descr: '<f4'}"}) {
    EXPECT_NE(npy_error(npy(dict, data)).find("header does not parse"), std::string::npos) << dict;
  }
}

TEST(NpyFormat, writes_what_numpy_writes_and_reads_it_back) {
  Tensor t = Tensor::from_vector<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  const std::string bytes = tensor_to_npy(t, "y");
  // numpy.save(np.arange(1, 7, dtype=np.float32).reshape(2, 3)): the same 128-byte header, then the data.
  EXPECT_EQ(bytes, npy_array("<f4", "(2, 3)", raw<float>({1, 2, 3, 4, 5, 6})));
  EXPECT_EQ(bytes.size(), 128u + 24u);
  EXPECT_EQ(tensor_to_npy(Tensor::scalar<int64_t>(5), "s"), npy_array("<i8", "()", raw<int64_t>({5})));
  EXPECT_EQ(tensor_to_npy(Tensor::from_vector<uint8_t>({1}, {9}), "s"), npy_array("|u1", "(1,)", raw<uint8_t>({9})));
  for (DType d : {DType::Float16, DType::Float64, DType::Int8, DType::Int16, DType::Int32, DType::UInt16,
                  DType::UInt32, DType::UInt64, DType::Bool}) {
    Tensor z = Tensor::zeros(d, {3, 0});
    Tensor back = tensor_from_npy(tensor_to_npy(z, "z"), "z.npy");
    EXPECT_EQ(back.dtype(), d);
    EXPECT_EQ(back.shape(), (terrace::Shape{3, 0}));
  }
  try {
    tensor_to_npy(Tensor::zeros(DType::BFloat16, {2}), "output 'y'");
    ADD_FAILURE() << "bfloat16 has no numpy dtype";
  } catch (const terrace::Error& e) {
    EXPECT_NE(e.message().find("output 'y' is bfloat16, which numpy has no dtype for"), std::string::npos) << e.message();
  }
}

TEST(NpzFormat, reads_each_stored_member_by_its_name) {
  const std::string x = npy_array("<f4", "(2,)", raw<float>({1, 2})), m = npy_array("|b1", "(3,)", raw<uint8_t>({1, 0, 1}));
  terrace::NamedTensors arrays = tensors_from_npz(zip({{"x.npy", x}, {"mask.npy", m}}), "f.npz");
  ASSERT_EQ(arrays.size(), 2u);
  EXPECT_EQ(arrays[0].first, "x");
  EXPECT_EQ(arrays[0].second.data<float>()[1], 2);
  EXPECT_EQ(arrays[1].first, "mask");
  EXPECT_EQ(arrays[1].second.dtype(), DType::Bool);
}

TEST(NpzFormat, a_compressed_damaged_or_odd_archive_is_refused) {
  const std::string x = npy_array("<f4", "(2,)", raw<float>({1, 2}));
  std::string msg = npz_error(zip({{"x.npy", x, 8}}));
  EXPECT_NE(msg.find("member 'x.npy' is compressed"), std::string::npos) << msg;
  EXPECT_NE(msg.find("numpy.savez"), std::string::npos) << msg;
  EXPECT_NE(npz_error(zip({{"x.npy", x, 14}})).find("compression method 14"), std::string::npos);
  std::string damaged = zip({{"x.npy", x}});
  damaged[damaged.find("NUMPY") + 20] ^= 1;
  EXPECT_NE(npz_error(damaged).find("CRC does not match"), std::string::npos);
  std::string cut = zip({{"x.npy", x}});
  EXPECT_NE(npz_error(cut.substr(0, cut.size() - 30)).find("no end record"), std::string::npos);
  EXPECT_NE(npz_error(zip({{"x.txt", "hello"}})).find("is not a .npy file"), std::string::npos);
  EXPECT_NE(npz_error(zip({})).find("holds no arrays"), std::string::npos);
  EXPECT_NE(npz_error(zip({{"x.npy", x}, {"x.npy", x}})).find("'x' is in it twice"), std::string::npos);
  // A member's own .npy errors name the member.
  msg = npz_error(zip({{"y.npy", npy_array(">f4", "(1,)", "1234")}}));
  EXPECT_NE(msg.find("member 'y.npy'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("big-endian"), std::string::npos) << msg;
}

}  // namespace
