// Tensor storage, dtype tables and conversions.
#include "interp/tensor.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <string>

namespace terrace {

const char* error_code_name(ErrorCode code) {
  switch (code) {
#define X(name, text) case ErrorCode::name: return #name;
    TERRACE_ERROR_CODES(X)
#undef X
  }
  return "Unknown";
}

const char* dtype_name(DType t) {
  switch (t) {
#define TERRACE_DTYPE(name, type, text, onnx, size) case DType::name: return text;
#include "interp/dtypes.def"
#undef TERRACE_DTYPE
  }
  return "?";
}

size_t dtype_size(DType t) {
  switch (t) {
#define TERRACE_DTYPE(name, type, text, onnx, size) case DType::name: return size;
#include "interp/dtypes.def"
#undef TERRACE_DTYPE
  }
  return 0;
}

int dtype_to_onnx(DType t) {
  switch (t) {
#define TERRACE_DTYPE(name, type, text, onnx, size) case DType::name: return onnx;
#include "interp/dtypes.def"
#undef TERRACE_DTYPE
  }
  return 0;
}

bool dtype_from_onnx(int code, DType* t) {
  switch (code) {
#define TERRACE_DTYPE(name, type, text, onnx, size) case onnx: *t = DType::name; return true;
#include "interp/dtypes.def"
#undef TERRACE_DTYPE
  }
  return false;
}

bool is_float(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::Float16 || t == DType::BFloat16;
}
bool is_signed(DType t) {
  return t == DType::Int8 || t == DType::Int16 || t == DType::Int32 || t == DType::Int64;
}
bool is_integer(DType t) {
  return is_signed(t) || t == DType::UInt8 || t == DType::UInt16 || t == DType::UInt32 ||
         t == DType::UInt64;
}
bool is_narrow(DType t) {
  return t == DType::Float8E4M3FN || t == DType::Float8E4M3FNUZ || t == DType::Float8E5M2 ||
         t == DType::Float8E5M2FNUZ || t == DType::UInt4 || t == DType::Int4 || t == DType::Float4E2M1;
}

std::string shape_str(std::span<const int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

int64_t shape_numel(std::span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    TERRACE_CHECK(d >= 0, InvalidArgument, "negative dimension in shape ", shape_str(shape));
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d)
      fail(ErrorCode::InvalidArgument, "element count of shape ", shape_str(shape),
           " overflows int64");
    n *= d;
  }
  return n;
}

std::vector<int64_t> row_major_strides(std::span<const int64_t> shape) {
  std::vector<int64_t> s(shape.size(), 1);
  // An empty tensor may have huge other dims; its strides are never used to address memory, so
  // they saturate instead of overflowing.
  for (int64_t i = int64_t(shape.size()) - 2; i >= 0; --i)
    if (__builtin_mul_overflow(s[i + 1], shape[i + 1], &s[i])) s[i] = std::numeric_limits<int64_t>::max();
  return s;
}

Tensor::State::~State() {
  if (borrowed || owner) return;
  if (mapped) {
    ::munmap(data, mapped);  // the file was unlinked when made: it goes with its last mapping
    return;
  }
  if (dtype == DType::String) {
    auto* p = static_cast<std::string*>(data);
    for (int64_t i = 0; i < count; ++i) p[i].~basic_string();
  }
  std::free(data);
}

Tensor Tensor::empty(DType dtype, Shape shape) {
  Tensor t;
  t.numel_ = shape_numel(shape);
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  auto st = std::make_shared<State>();
  st->dtype = dtype;
  size_t elem = dtype_size(dtype);
  if (t.numel_ > 0 && size_t(t.numel_) > (std::numeric_limits<size_t>::max() / 2) / elem)
    fail(ErrorCode::OutOfMemory, "tensor of shape ", shape_str(t.shape_), " is too large");
  st->bytes = size_t(t.numel_) * elem;
  size_t alloc = (st->bytes + 63) / 64 * 64;
  st->data = std::aligned_alloc(64, alloc ? alloc : 64);
  if (!st->data)
    fail(ErrorCode::OutOfMemory, "cannot allocate ", st->bytes, " bytes for tensor of shape ",
         shape_str(t.shape_));
  if (dtype == DType::String) {
    auto* p = static_cast<std::string*>(st->data);
    // count grows with each constructed string, so ~State destroys exactly those on any failure.
    for (int64_t i = 0; i < t.numel_; ++i, ++st->count) new (p + i) std::string();
  } else if (dtype == DType::Bool) {
    std::memset(st->data, 0, st->bytes);
  }
  t.state_ = std::move(st);
  return t;
}

Tensor Tensor::adopt(DType dtype, Shape shape, void* data, size_t bytes, std::shared_ptr<void> owner) {
  TERRACE_CHECK(owner, InvalidArgument, "an adopted tensor needs an owner of its memory");
  Tensor t = borrow(dtype, std::move(shape), data, bytes);
  t.state_->borrowed = false;
  t.state_->owner = std::move(owner);
  return t;
}

Tensor Tensor::borrow(DType dtype, Shape shape, void* data, size_t bytes) {
  TERRACE_CHECK(dtype != DType::String, InvalidArgument, "a string tensor cannot be made over caller memory");
  Tensor t;
  t.numel_ = shape_numel(shape);
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  const size_t elem = dtype_size(dtype);
  TERRACE_CHECK(size_t(t.numel_) <= bytes / elem && size_t(t.numel_) * elem == bytes, InvalidArgument,
                "a tensor ", dtype_name(dtype), shape_str(t.shape_), " needs ", uint64_t(t.numel_), " x ", elem,
                " bytes; ", bytes, " given");
  TERRACE_CHECK(data || bytes == 0, InvalidArgument, "a tensor over caller memory needs its data (NULL given)");
  auto st = std::make_shared<State>();
  st->dtype = dtype;
  st->data = data;
  st->bytes = bytes;
  st->borrowed = true;
  t.state_ = std::move(st);
  return t;
}

Tensor Tensor::zeros(DType dtype, Shape shape) {
  Tensor t = empty(dtype, std::move(shape));
  if (dtype != DType::String) std::memset(t.raw(), 0, t.nbytes());
  return t;
}

void Tensor::check_type(DType want) const {
  TERRACE_ASSERT(defined(), "access to an undefined tensor");
  TERRACE_ASSERT(want == dtype_, "tensor holds ", dtype_name(dtype_), ", accessed as ",
                 dtype_name(want));
}

Tensor Tensor::on_device(DType dtype, Shape shape, std::shared_ptr<DeviceStorage> storage) {
  TERRACE_CHECK(dtype != DType::String, InvalidArgument, "a string tensor cannot live on a device");
  TERRACE_CHECK(storage != nullptr, InvalidArgument, "a device tensor needs its storage (null given)");
  Tensor t;
  t.numel_ = shape_numel(shape);
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  TERRACE_CHECK(t.nbytes() <= storage->bytes(), InvalidArgument, "a device tensor ", dtype_name(dtype),
                shape_str(t.shape_), " needs ", t.nbytes(), " bytes; its storage on ", storage->where(), " holds ",
                storage->bytes());
  auto st = std::make_shared<State>();
  st->dtype = dtype;
  st->bytes = t.nbytes();
  st->device = std::move(storage);
  t.state_ = std::move(st);
  return t;
}

namespace {
// The folder for file-backed tensors, chosen once ("" for none): see Tensor::file_backed.
const std::string& spill_dir() {
  static const std::string dir = [] {
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("TERRACE_SPILL_DIR")) candidates.push_back(env);  // "" disables
    else {
      candidates.push_back("/var/tmp");
      const char* tmp = std::getenv("TMPDIR");
      candidates.push_back(tmp && *tmp ? tmp : "/tmp");
    }
    for (const std::string& d : candidates) {
      struct statfs fs;
      if (d.empty() || ::statfs(d.c_str(), &fs) != 0) continue;
      // tmpfs and ramfs pages are memory (nothing gained); over NFS, SMB or FUSE a fault may wait on
      // a network or another process: the heap instead.
      constexpr unsigned long kSkipped[] = {0x01021994, 0x858458f6, 0x6969, 0x517b, 0xff534d42, 0xfe534d42,
                                            0x65735546};
      bool skipped = false;
      for (unsigned long magic : kSkipped) skipped = skipped || (unsigned long)(fs.f_type) == magic;
      if (skipped) continue;
      if (::access(d.c_str(), W_OK) != 0) continue;
      return d;
    }
    return std::string();
  }();
  return dir;
}

// An unlinked file of `bytes` bytes in the spill folder, or -1.
int spill_file(size_t bytes) {
  const std::string& dir = spill_dir();
  if (dir.empty()) return -1;
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {  // a file system without O_TMPFILE: a named file, unlinked at once
    std::string path = dir + "/terrace-spill-XXXXXX";
    fd = ::mkostemp(path.data(), O_CLOEXEC);
    if (fd < 0) return -1;
    ::unlink(path.c_str());
  }
  // The blocks reserved now: a page of a sparse file whose disk is full would be a SIGBUS when the
  // copy first writes it. Where they cannot be had (no space, no fallocate), the heap instead.
  if (::posix_fallocate(fd, 0, off_t(bytes)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}
}  // namespace

namespace {
// A shared mapping of a spill file holding `bytes` of `data`, or null.
void* spill(const void* data, size_t bytes, size_t* mapped) {
  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  const size_t length = (bytes + page - 1) / page * page;
  const int fd = spill_file(length);
  if (fd < 0) return nullptr;
  void* p = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);  // the mapping keeps the file
  if (p == MAP_FAILED) return nullptr;
  // No readahead, so that the page cache holds the values in small pages: Linux 6.x maps a large
  // folio whole on a fault, and a reader that walks the values by blocks of columns (the
  // interpreter's product, which lets each block's pages go behind it: ops/linalg.cpp) mapped
  // 103 of a 128 MiB weight's pages on its first of 16 blocks (16 MiB with this).
  ::madvise(p, length, MADV_RANDOM);
  std::memcpy(p, data, bytes);
  *mapped = length;
  return p;
}
}  // namespace

std::optional<Tensor> Tensor::spilled(DType dtype, Shape shape, const void* bytes) {
  Tensor t;
  t.numel_ = shape_numel(shape);
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  const size_t n = size_t(t.numel_) * dtype_size(dtype);
  size_t mapped = 0;
  void* p = n ? spill(bytes, n, &mapped) : nullptr;
  if (!p) return std::nullopt;
  auto st = std::make_shared<State>();
  st->dtype = dtype;
  st->data = p;
  st->bytes = n;
  st->mapped = mapped;
  t.state_ = std::move(st);
  return t;
}

Tensor Tensor::file_backed(const Tensor& t) {
  if (!t.defined() || t.on_device() || t.dtype() == DType::String || t.nbytes() == 0 || t.is_file_backed()) return t;
  std::optional<Tensor> c = spilled(t.dtype_, t.shape_, t.raw());
  return c ? *std::move(c) : t;
}

Tensor Tensor::file_backed(DType dtype, Shape shape, const void* bytes) {
  TERRACE_ASSERT(dtype != DType::String && dtype != DType::Bool && dtype != DType::Int4 && dtype != DType::UInt4 &&
                     dtype != DType::Float4E2M1,
                 "file_backed(bytes) of ", dtype_name(dtype));
  if (std::optional<Tensor> t = spilled(dtype, shape, bytes)) return *std::move(t);
  Tensor heap = empty(dtype, std::move(shape));
  if (heap.nbytes()) std::memcpy(heap.raw(), bytes, heap.nbytes());
  return heap;
}

void Tensor::drop_resident_pages() const {
  if (is_file_backed()) ::madvise(state_->data, state_->mapped, MADV_DONTNEED);
}

void Tensor::drop_resident_range(size_t offset, size_t bytes) const {
  if (!is_file_backed() || offset >= state_->mapped) return;
  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  const size_t end = std::min(state_->mapped, offset + std::min(bytes, state_->mapped - offset));
  const size_t first = (offset + page - 1) / page * page, last = end / page * page;  // the mapping starts on a page
  if (first < last) ::madvise(static_cast<char*>(state_->data) + first, last - first, MADV_DONTNEED);
}

uint64_t Tensor::device_address() const { return on_device() ? state_->device->address() : 0; }

Tensor Tensor::to_host() const {
  if (!on_device()) return *this;
  Tensor t = empty(dtype_, shape_);
  if (nbytes()) state_->device->read(t.state_->data, nbytes());
  return t;
}

void fail_device_access(const Tensor& t) {
  fail(ErrorCode::InvalidArgument, "a tensor ", dtype_name(t.dtype()), shape_str(t.shape()), " is on ",
       t.device_storage()->where(), ": read it with to_host()");
}

Tensor Tensor::reshaped(Shape shape) const {
  TERRACE_CHECK(shape_numel(shape) == numel_, InvalidArgument, "cannot reshape ",
                shape_str(shape_), " to ", shape_str(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::clone() const {
  if (!defined()) return {};
  Tensor t = empty(dtype_, shape_);
  if (dtype_ == DType::String) {
    for (int64_t i = 0; i < numel_; ++i) t.data<std::string>()[i] = data<std::string>()[i];
  } else {
    std::memcpy(t.raw(), raw(), nbytes());
  }
  return t;
}

double Tensor::get_as_double(int64_t i) const {
  return dispatch_dtype<false, true>(dtype_, [&](auto tag) -> double {
    using T = decltype(tag);
    if constexpr (kIsNarrow<T>) return narrow_to_double(static_cast<const T*>(raw())[i]);
    else return double(static_cast<const T*>(raw())[i]);
  });
}

int64_t Tensor::get_as_int64(int64_t i) const {
  TERRACE_CHECK(is_integer(dtype_) || dtype_ == DType::Bool, InvalidArgument,
                "expected an integer tensor, got ", dtype_name(dtype_));
  return dispatch_dtype(dtype_, [&](auto tag) -> int64_t {
    using T = decltype(tag);
    return int64_t(static_cast<const T*>(raw())[i]);
  });
}

std::vector<int64_t> Tensor::to_int64_vector() const {
  std::vector<int64_t> v(static_cast<size_t>(numel_));
  for (int64_t i = 0; i < numel_; ++i) v[size_t(i)] = get_as_int64(i);
  return v;
}

namespace {
template <typename To, typename From>
To convert(From v) {
  if constexpr (kIsNarrow<From>) {  // narrow types through their exact value; to them, saturating
    return convert<To, double>(narrow_to_double(v));
  } else if constexpr (kIsNarrow<To>) {
    if constexpr (std::is_same_v<From, Half> || std::is_same_v<From, BFloat16>) return narrow_from_double<To>(float(v));
    else return narrow_from_double<To>(double(v));
  } else if constexpr (std::is_same_v<To, bool>) {
    return float(v) != 0.0f || (std::is_integral_v<From> && v != From(0));
  } else if constexpr (std::is_integral_v<To> && !std::is_integral_v<From>) {
    // Float to integer: truncate toward zero; NaN and out-of-range values are undefined in ONNX,
    // we saturate to keep the behaviour deterministic.
    double d = double(v);
    if (std::isnan(d)) return To(0);
    if (d <= double(std::numeric_limits<To>::lowest())) return std::numeric_limits<To>::lowest();
    if (d >= double(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
    return To(d);
  } else if constexpr (std::is_same_v<To, Half> || std::is_same_v<To, BFloat16>) {
    if constexpr (std::is_same_v<From, double>) {
      // Round double directly to avoid double rounding through float where it matters little;
      // float's 24 bits keep every half/bfloat16 rounding decision except exact ties.
      return To(float(v));
    } else {
      return To(float(v));
    }
  } else if constexpr (std::is_same_v<From, Half> || std::is_same_v<From, BFloat16>) {
    return To(float(v));
  } else {
    return To(v);
  }
}
}  // namespace

Tensor Tensor::cast(DType to) const {
  Tensor out = empty(to, shape_);
  if (to == DType::String || dtype_ == DType::String) {
    TERRACE_CHECK(to == dtype_, NotImplemented, "cast between string and ", dtype_name(to == DType::String ? dtype_ : to));
    return clone();
  }
  dispatch_dtype<false, true>(dtype_, [&](auto from_tag) {
    using From = decltype(from_tag);
    dispatch_dtype<false, true>(to, [&](auto to_tag) {
      using To = decltype(to_tag);
      const From* src = static_cast<const From*>(raw());
      To* dst = static_cast<To*>(out.raw());
      for (int64_t i = 0; i < numel_; ++i) dst[i] = convert<To, From>(src[i]);
    });
  });
  return out;
}

std::string Tensor::str(int64_t max_elems) const {
  if (!defined()) return "<undefined>";
  std::ostringstream os;
  os << dtype_name(dtype_) << shape_str(shape_) << " {";
  for (int64_t i = 0; i < std::min(numel_, max_elems); ++i) {
    if (i) os << ", ";
    if (dtype_ == DType::String) os << '"' << data<std::string>()[i] << '"';
    else os << get_as_double(i);
  }
  if (numel_ > max_elems) os << ", ...";
  os << "}";
  return os.str();
}

}  // namespace terrace
