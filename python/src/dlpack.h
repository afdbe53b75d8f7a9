// DLPack's structures, written from the DLPack specification v1.0 (dmlc/dlpack, include/dlpack/dlpack.h
// of release v1.0, and the Python array API's __dlpack__ protocol): Debian 12 packages no dlpack.h,
// and these few structs and constants are all the module needs. Layouts match the C header's
// (DLDeviceType is a C enum, an int32_t here).
#pragma once
#include <cstdint>

namespace terrace::python::dlpack {

// DLDeviceType: the ones Terrace meets.
constexpr int32_t kDLCPU = 1;
constexpr int32_t kDLCUDA = 2;
constexpr int32_t kDLCUDAHost = 3;      // pinned host memory: readable as CPU memory
constexpr int32_t kDLCUDAManaged = 13;  // managed memory

// DLDataTypeCode.
constexpr uint8_t kDLInt = 0;
constexpr uint8_t kDLUInt = 1;
constexpr uint8_t kDLFloat = 2;
constexpr uint8_t kDLBfloat = 4;
constexpr uint8_t kDLBool = 6;

// DLPackVersion: the version this module speaks.
constexpr uint32_t kMajor = 1, kMinor = 0;

// DLManagedTensorVersioned::flags.
constexpr uint64_t kFlagReadOnly = 1u << 0;
constexpr uint64_t kFlagIsCopied = 1u << 1;

struct DLPackVersion {
  uint32_t major;
  uint32_t minor;
};

struct DLDevice {
  int32_t device_type;  // DLDeviceType
  int32_t device_id;
};

struct DLDataType {
  uint8_t code;  // DLDataTypeCode
  uint8_t bits;
  uint16_t lanes;
};

struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; NULL: compact row-major
  uint64_t byte_offset;
};

// The pre-1.0 ("legacy") managed tensor, in a capsule named "dltensor".
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

// The 1.0 managed tensor, in a capsule named "dltensor_versioned".
struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(DLManagedTensorVersioned* self);
  uint64_t flags;
  DLTensor dl_tensor;
};

// The capsule names of the protocol: a consumer renames the capsule to the "used_" name once it
// owns the tensor (and will call its deleter); a capsule destroyed still unused calls it itself.
constexpr const char* kCapsule = "dltensor";
constexpr const char* kUsedCapsule = "used_dltensor";
constexpr const char* kCapsuleVersioned = "dltensor_versioned";
constexpr const char* kUsedCapsuleVersioned = "used_dltensor_versioned";

}  // namespace terrace::python::dlpack
