// Tensors over device memory (Tensor::on_device) without a device: a DeviceStorage kept in host
// memory stands in for tier 2's, so that what the interpreter's layer does with such a tensor is
// tested on every machine.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "interp/tensor.h"

namespace terrace {
namespace {

class HostBackedStorage final : public DeviceStorage {
 public:
  explicit HostBackedStorage(std::vector<char> bytes) : bytes_(std::move(bytes)) {}
  uint64_t address() const override { return 0x1000; }
  size_t bytes() const override { return bytes_.size(); }
  void read(void* dst, size_t n) const override {
    ++reads;
    std::memcpy(dst, bytes_.data(), n);
  }
  std::string where() const override { return "fake:0"; }
  mutable int reads = 0;

 private:
  std::vector<char> bytes_;
};

std::shared_ptr<HostBackedStorage> storage_of(const std::vector<float>& v) {
  std::vector<char> bytes(v.size() * sizeof(float));
  std::memcpy(bytes.data(), v.data(), bytes.size());
  return std::make_shared<HostBackedStorage>(std::move(bytes));
}

TEST(DeviceTensor, reads_back_through_its_storage_and_keeps_shape_and_dtype) {
  auto st = storage_of({1, 2, 3, 4, 5, 6});
  Tensor d = Tensor::on_device(DType::Float32, {2, 3}, st);
  EXPECT_TRUE(d.on_device());
  EXPECT_EQ(d.device_address(), 0x1000u);
  EXPECT_EQ(d.numel(), 6);
  Tensor h = d.to_host();
  EXPECT_FALSE(h.on_device());
  EXPECT_EQ(st->reads, 1);
  ASSERT_EQ(h.shape(), (Shape{2, 3}));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(h.data<float>()[i], float(i + 1));
  // A view of a device tensor is a device tensor over the same storage.
  Tensor v = d.reshaped({3, 2});
  EXPECT_TRUE(v.on_device());
  EXPECT_EQ(v.device_storage(), d.device_storage());
  // A host tensor's to_host is itself, with no copy.
  EXPECT_EQ(h.to_host().raw(), h.raw());
}

TEST(DeviceTensor, host_access_is_refused_with_the_device_named) {
  Tensor d = Tensor::on_device(DType::Float32, {2}, storage_of({1, 2}));
  try {
    (void)d.data<float>();
    FAIL() << "expected InvalidArgument";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("fake:0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("to_host"), std::string::npos) << e.what();
  }
  EXPECT_THROW(d.clone(), Error);
  EXPECT_THROW(d.get_as_double(0), Error);
}

TEST(DeviceTensor, storage_smaller_than_the_shape_is_refused) {
  EXPECT_THROW(Tensor::on_device(DType::Float32, {3}, storage_of({1, 2})), Error);
  EXPECT_THROW(Tensor::on_device(DType::Float32, {1}, nullptr), Error);
  EXPECT_THROW(Tensor::on_device(DType::String, {0}, storage_of({})), Error);
}

}  // namespace
}  // namespace terrace
