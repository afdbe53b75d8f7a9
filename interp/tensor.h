// Tensor, DType and Shape: dense row-major tensors with shared, 64-byte-aligned storage.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "interp/error.h"
#include "interp/float8.h"
#include "interp/half.h"

namespace terrace {

enum class DType : uint8_t {
#define TERRACE_DTYPE(name, type, text, onnx, size) name,
#include "interp/dtypes.def"
#undef TERRACE_DTYPE
};

const char* dtype_name(DType t);           // "float32"
size_t dtype_size(DType t);                // bytes per element
int dtype_to_onnx(DType t);                // TensorProto::DataType code
bool dtype_from_onnx(int code, DType* t);  // false for codes Terrace does not support
bool is_float(DType t);                    // float16/bfloat16/float32/float64
bool is_integer(DType t);                  // signed or unsigned integers (not bool)
bool is_signed(DType t);
// float8, int4/uint4, float4e2m1: one byte per element, storage only (float8.h); neither is_float
// nor is_integer, and skipped by dispatch_dtype unless AllowNarrow.
bool is_narrow(DType t);

template <typename T> struct dtype_of;
#define TERRACE_DTYPE(name, type, text, onnx, size) \
  template <> struct dtype_of<type> { static constexpr DType value = DType::name; };
#include "interp/dtypes.def"
#undef TERRACE_DTYPE

using Shape = std::vector<int64_t>;
std::string shape_str(std::span<const int64_t> shape);  // "[2,3,4]"
// Number of elements; throws InvalidArgument on a negative dim or int64 overflow.
int64_t shape_numel(std::span<const int64_t> shape);
// Row-major strides in elements.
std::vector<int64_t> row_major_strides(std::span<const int64_t> shape);

// Memory on an accelerator (tier 2's GPU), behind an interface so that this layer needs no
// device library: a device tensor's bytes are read back through it (jit/cuda/cuda_memory.cpp
// implements it for CUDA). Freed when the last tensor over it goes.
class DeviceStorage {
 public:
  virtual ~DeviceStorage() = default;
  virtual uint64_t address() const = 0;  // the device address of its first byte
  virtual size_t bytes() const = 0;
  // Copies its first `bytes` bytes to host memory `dst`, after the device work that writes them.
  virtual void read(void* dst, size_t bytes) const = 0;
  virtual std::string where() const = 0;  // "cuda:0"
};

class Tensor {
 public:
  Tensor() = default;  // undefined: an absent optional input or output
  // Uninitialised storage (zeroed for strings and bools); throws OutOfMemory if it cannot allocate.
  static Tensor empty(DType dtype, Shape shape);
  static Tensor zeros(DType dtype, Shape shape);
  // A tensor over memory the caller owns and keeps alive (and unchanged while a run reads it)
  // as long as this tensor or a copy of it lives: no copy is made, nothing is freed. Not for
  // strings. `bytes` is the size of `data`, checked against the shape (InvalidArgument).
  static Tensor borrow(DType dtype, Shape shape, void* data, size_t bytes);
  // A tensor over `data` (`bytes` long, checked as borrow's) that `owner` keeps alive: the last
  // copy of the tensor releases `owner` (whose deleter may recycle the memory), nothing else. Not
  // borrowed(): the memory is the tensor's while it lives. Not for strings.
  static Tensor adopt(DType dtype, Shape shape, void* data, size_t bytes, std::shared_ptr<void> owner);
  // A tensor whose elements live in device memory (tier 2's outputs, or a caller's binding).
  // Host accessors (raw, data, clone, cast, str...) throw InvalidArgument on it: to_host() reads
  // it. `storage` holds at least nbytes() bytes (checked).
  static Tensor on_device(DType dtype, Shape shape, std::shared_ptr<DeviceStorage> storage);
  // A copy of host tensor `t` in a shared mapping of an unlinked temporary file, so that
  // drop_resident_pages() can hand its memory back to the OS while it keeps its values: they are
  // read back from the file (the page cache) when next touched. For large constants that a
  // compiled tier copies into a layout of its own (the loader's initializers of 1 MiB or more).
  // The folder: $TERRACE_SPILL_DIR, else /var/tmp, else the system's temporary folder; one in
  // memory (tmpfs, ramfs) or across a network (NFS, SMB) or FUSE is not used, nor is any where
  // the file cannot be made, reserved or mapped, nor any when TERRACE_SPILL_DIR is set empty:
  // `t` itself is returned then. Not for strings.
  static Tensor file_backed(const Tensor& t);
  // The same for `bytes` (exactly nbytes of a tensor of `dtype` and `shape`, not strings, not
  // bool, not 4-bit types), written into the file without a heap copy first: the loader's path
  // for large raw_data. Where no file can be had, a heap tensor holding a copy.
  static Tensor file_backed(DType dtype, Shape shape, const void* bytes);
  // Over a file's shared mapping (file_backed()).
  bool is_file_backed() const;
  // Lets the OS take back the resident pages of a file-backed tensor (madvise MADV_DONTNEED; its
  // values stay, faulted back from the file's page cache on the next read, by any thread, so it
  // is safe while others read it). Nothing for any other tensor.
  void drop_resident_pages() const;
  // The same for the whole pages inside bytes [offset, offset + bytes) of its values.
  void drop_resident_range(size_t offset, size_t bytes) const;
  template <typename T> static Tensor scalar(T v) {
    Tensor t = empty(dtype_of<T>::value, {});
    t.data<T>()[0] = v;
    return t;
  }
  template <typename T> static Tensor from_vector(Shape shape, const std::vector<T>& v) {
    Tensor t = empty(dtype_of<T>::value, std::move(shape));
    TERRACE_CHECK(int64_t(v.size()) == t.numel(), InvalidArgument, "from_vector: ", v.size(),
                  " values for shape ", shape_str(t.shape()));
    for (size_t i = 0; i < v.size(); ++i) t.data<T>()[i] = v[i];
    return t;
  }

  bool defined() const { return state_ != nullptr; }
  // No other Tensor (view or copy) shares this one's storage: a holder may write it for a new
  // value (tier 1 reuses a model output's buffer that the caller has let go of). The reads and
  // writes of the tensors that let go happen before this returns true.
  bool sole_owner() const;
  // Over caller memory (borrow(), or a reshaped view of such a tensor).
  bool borrowed() const;
  // Its elements are in device memory (on_device()); where: device_storage()->where().
  bool on_device() const;
  const DeviceStorage* device_storage() const;
  uint64_t device_address() const;  // 0 for a host tensor
  // A host copy of a device tensor (waiting for the device work that writes it); a host tensor
  // is returned as it is.
  Tensor to_host() const;
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t rank() const { return int64_t(shape_.size()); }
  int64_t dim(int64_t i) const { return shape_[size_t(i < 0 ? i + rank() : i)]; }
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return size_t(numel_) * dtype_size(dtype_); }

  // Typed element access; checks the dtype (an internal error on mismatch).
  template <typename T> T* data() {
    check_type(dtype_of<std::remove_const_t<T>>::value);
    return static_cast<T*>(raw());
  }
  template <typename T> const T* data() const {
    check_type(dtype_of<std::remove_const_t<T>>::value);
    return static_cast<const T*>(raw());
  }
  void* raw();
  const void* raw() const;

  // Same storage, new shape of equal element count.
  Tensor reshaped(Shape shape) const;
  // A deep copy.
  Tensor clone() const;
  // Element i as double (for printing, comparing and tests); not for strings.
  double get_as_double(int64_t i) const;
  // Element i converted to int64 (for shape-like inputs); integers only.
  int64_t get_as_int64(int64_t i) const;
  // The whole tensor as int64 values (integer tensors).
  std::vector<int64_t> to_int64_vector() const;
  // Converts to another dtype with ONNX Cast semantics.
  Tensor cast(DType to) const;
  std::string str(int64_t max_elems = 8) const;  // "float32[2,3] {1, 2, ...}"

 private:
  // A tensor over a spill file's mapping holding `bytes` (nbytes of dtype and shape), or nullopt
  // where none can be had (file_backed).
  static std::optional<Tensor> spilled(DType dtype, Shape shape, const void* bytes);
  struct State;
  void check_type(DType want) const;
  DType dtype_ = DType::Float32;
  Shape shape_;
  int64_t numel_ = 0;
  std::shared_ptr<State> state_;
};

struct Tensor::State {
  void* data = nullptr;
  size_t bytes = 0;
  DType dtype;
  int64_t count = 0;
  bool borrowed = false;  // the caller's memory (Tensor::borrow): not freed here
  std::shared_ptr<void> owner;  // Tensor::adopt: holds the memory; freed by releasing it
  size_t mapped = 0;      // > 0: data is a shared file mapping of this many bytes (file_backed)
  std::shared_ptr<DeviceStorage> device;  // set: the elements are there, and data is null
  ~State();
};

inline bool Tensor::borrowed() const { return state_ && state_->borrowed; }
inline bool Tensor::sole_owner() const {
  if (!state_ || state_.use_count() != 1) return false;
  std::atomic_thread_fence(std::memory_order_acquire);  // use_count is a relaxed load
  return true;
}
inline bool Tensor::is_file_backed() const { return state_ && state_->mapped > 0; }
inline bool Tensor::on_device() const { return state_ && state_->device; }
inline const DeviceStorage* Tensor::device_storage() const { return state_ ? state_->device.get() : nullptr; }
[[noreturn]] void fail_device_access(const Tensor& t);
inline void* Tensor::raw() {
  if (state_ && state_->device) fail_device_access(*this);
  return state_ ? state_->data : nullptr;
}
inline const void* Tensor::raw() const {
  if (state_ && state_->device) fail_device_access(*this);
  return state_ ? state_->data : nullptr;
}

// Calls f(T{}) with T the storage type of dtype; strings are excluded unless AllowString, the
// narrow types (float8, int4, float4: is_narrow) unless AllowNarrow (NotImplemented errors).
template <bool AllowString = false, bool AllowNarrow = false, typename F>
decltype(auto) dispatch_dtype(DType dtype, F&& f) {
  switch (dtype) {
#define TERRACE_DTYPE(name, type, text, onnx, size) \
  case DType::name:                                 \
    if constexpr ((AllowString || !std::is_same_v<type, std::string>) &&                 \
                  (AllowNarrow || !kIsNarrow<type>))                                      \
      return f(type{});                                                                  \
    break;
#include "interp/dtypes.def"
#undef TERRACE_DTYPE
  }
  fail(ErrorCode::NotImplemented, "dtype ", dtype_name(dtype), " is not supported here");
}

}  // namespace terrace
