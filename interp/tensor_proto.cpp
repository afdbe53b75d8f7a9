// TensorProto <-> Tensor conversion, confined external-data loading and bounded proto parsing.
#include "interp/tensor_proto.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <onnx/onnx-data_pb.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "interp/onnx_import.h"
#include "interp/raw_data_split.h"

namespace terrace {

DType dtype_from_proto_code(int code, const std::string& what) {
  DType t;
  if (dtype_from_onnx(code, &t)) return t;
  TERRACE_CHECK(code != 0, InvalidModel, what, " has no data type");
  TERRACE_CHECK(onnx::TensorProto_DataType_IsValid(code), InvalidModel, what,
                ": unknown data type code ", code);
  fail(ErrorCode::NotImplemented, what, ": data type ",
       onnx::TensorProto_DataType_Name(onnx::TensorProto_DataType(code)),
       " is not supported by Terrace");
}

namespace {

// Element count of the proto's dims, as InvalidModel errors (shape_numel's are InvalidArgument).
int64_t proto_numel(const onnx::TensorProto& p, const std::string& what) {
  int64_t n = 1;
  for (int64_t d : p.dims()) {
    TERRACE_CHECK(d >= 0, InvalidModel, what, ": negative dimension ", d);
    TERRACE_CHECK(d == 0 || n <= INT64_MAX / d, InvalidModel, what,
                  ": element count of its dims overflows int64");
    n *= d;
  }
  return n;
}

// int4, uint4 and float4e2m1 are stored two to a byte in a TensorProto (the first element in the
// low nibble); in memory they take a byte each (float8.h).
bool is_packed4(DType t) { return t == DType::Int4 || t == DType::UInt4 || t == DType::Float4E2M1; }

// How many entries of its typed field a tensor of this dtype stores per element.
int64_t typed_field_size(const onnx::TensorProto& p, DType t) {
  switch (t) {
    case DType::Float32: return p.float_data_size();
    case DType::Float64: return p.double_data_size();
    case DType::Int64: return p.int64_data_size();
    case DType::UInt32:
    case DType::UInt64: return p.uint64_data_size();
    case DType::String: return p.string_data_size();
    default: return p.int32_data_size();  // int8/16/32, uint8/16, bool, float16, bfloat16
  }
}

// Copies typed-field values into `out`, converting each with `conv`.
template <typename T, typename Field, typename Conv>
void fill_from(T* out, const Field& field, Conv conv) {
  for (int i = 0; i < field.size(); ++i) out[i] = conv(field.Get(i));
}

// Packed 4-bit elements (bytes) to one element per byte.
template <typename T>
void unpack4(const uint8_t* packed, T* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = from_nibble<T>(uint8_t(packed[i / 2] >> ((i % 2) * 4)));
}

void copy_typed_field(const onnx::TensorProto& p, Tensor& t) {
  dispatch_dtype<true, true>(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* out = t.data<T>();
    if constexpr (kIsNarrow<T>) {
      if (is_packed4(t.dtype())) {  // one packed byte (two elements) per int32 entry
        std::vector<uint8_t> packed(size_t(p.int32_data_size()));
        for (size_t i = 0; i < packed.size(); ++i) packed[i] = uint8_t(p.int32_data(int(i)));
        unpack4(packed.data(), out, t.numel());
      } else {  // float8: one code per int32 entry
        fill_from(out, p.int32_data(), [](int32_t v) { return T(uint8_t(v)); });
      }
    } else if constexpr (std::is_same_v<T, std::string>) {
      fill_from(out, p.string_data(), [](const std::string& s) { return s; });
    } else if constexpr (std::is_same_v<T, float>) {
      fill_from(out, p.float_data(), [](float v) { return v; });
    } else if constexpr (std::is_same_v<T, double>) {
      fill_from(out, p.double_data(), [](double v) { return v; });
    } else if constexpr (std::is_same_v<T, int64_t>) {
      fill_from(out, p.int64_data(), [](int64_t v) { return v; });
    } else if constexpr (std::is_same_v<T, uint32_t> || std::is_same_v<T, uint64_t>) {
      fill_from(out, p.uint64_data(), [](uint64_t v) { return T(v); });
    } else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      // 16-bit floats keep their bit pattern in the low half of an int32 entry.
      fill_from(out, p.int32_data(), [](int32_t v) { T h; h.bits = uint16_t(v); return h; });
    } else if constexpr (std::is_same_v<T, bool>) {
      fill_from(out, p.int32_data(), [](int32_t v) { return v != 0; });
    } else {
      fill_from(out, p.int32_data(), [](int32_t v) { return T(v); });
    }
  });
}

void copy_raw_data(std::string_view raw, Tensor& t) {
  if (is_packed4(t.dtype())) {
    dispatch_dtype<false, true>(t.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (kIsNarrow<T>)
        unpack4(reinterpret_cast<const uint8_t*>(raw.data()), t.data<T>(), t.numel());
    });
  } else if (t.dtype() == DType::Bool) {  // any nonzero byte is true; never store a non-0/1 bool
    bool* out = t.data<bool>();
    for (size_t i = 0; i < raw.size(); ++i) out[i] = raw[i] != 0;
  } else if (!raw.empty()) {
    std::memcpy(t.raw(), raw.data(), raw.size());
  }
}

}  // namespace

std::string_view raw_data_of(const onnx::TensorProto& p) {
  if (std::optional<std::string_view> cut = CutRawData::find(p)) return *cut;
  return p.raw_data();
}

void check_tensor_proto(const onnx::TensorProto& p, const std::string& what) {
  TERRACE_CHECK(p.data_location() != onnx::TensorProto_DataLocation_EXTERNAL, InvalidModel, what,
                ": external data is not allowed here");
  TERRACE_CHECK(!p.has_segment(), NotImplemented, what, ": segmented tensors are not supported");
  DType t = dtype_from_proto_code(p.data_type(), what);
  int64_t n = proto_numel(p, what);
  if (p.has_raw_data()) {
    TERRACE_CHECK(t != DType::String, InvalidModel, what, ": string tensors cannot use raw_data");
    size_t size = dtype_size(t), bytes = raw_data_of(p).size();
    if (is_packed4(t)) {
      TERRACE_CHECK(uint64_t(n) / 2 + uint64_t(n) % 2 == bytes, InvalidModel, what, ": raw_data holds ",
                    bytes, " bytes, but ", dtype_name(t), " dims ",
                    shape_str(std::vector<int64_t>(p.dims().begin(), p.dims().end())), " need ", n,
                    " elements of 4 bits, two to a byte");
      return;
    }
    TERRACE_CHECK(uint64_t(n) <= bytes / size && size_t(n) * size == bytes, InvalidModel, what,
                  ": raw_data holds ", bytes, " bytes, but ", dtype_name(t), " dims ",
                  shape_str(std::vector<int64_t>(p.dims().begin(), p.dims().end())), " need ",
                  n, " elements of ", size, " bytes");
    return;
  }
  if (is_packed4(t)) {
    int64_t have = p.int32_data_size();
    TERRACE_CHECK(have == n / 2 + n % 2, InvalidModel, what, ": holds ", have, " int32_data entries, but its dims ",
                  shape_str(std::vector<int64_t>(p.dims().begin(), p.dims().end())), " need ", n / 2 + n % 2,
                  " (4-bit elements, two to an entry)");
    return;
  }
  int64_t have = typed_field_size(p, t);
  TERRACE_CHECK(have == n, InvalidModel, what, ": holds ", have, " values, but its dims ",
                shape_str(std::vector<int64_t>(p.dims().begin(), p.dims().end())), " need ", n);
}

Tensor tensor_from_proto(const onnx::TensorProto& p, const std::string& what) {
  check_tensor_proto(p, what);
  DType dt = dtype_from_proto_code(p.data_type(), what);
  Tensor t = Tensor::empty(dt, Shape(p.dims().begin(), p.dims().end()));
  if (p.has_raw_data())
    copy_raw_data(raw_data_of(p), t);
  else
    copy_typed_field(p, t);
  return t;
}

Tensor tensor_from_proto(const onnx::TensorProto& p, const std::string& what, size_t file_backed_from) {
  check_tensor_proto(p, what);
  const DType dt = dtype_from_proto_code(p.data_type(), what);
  const Shape shape(p.dims().begin(), p.dims().end());
  if (dt == DType::String || size_t(shape_numel(shape)) * dtype_size(dt) < file_backed_from)
    return tensor_from_proto(p, what);
  // raw_data is the values as they lie in memory here (little-endian) but for bool (normalised to
  // 0/1) and the 4-bit types (two to a byte).
  if (p.has_raw_data() && dt != DType::Bool && !is_packed4(dt)) return Tensor::file_backed(dt, shape, raw_data_of(p).data());
  return Tensor::file_backed(tensor_from_proto(p, what));
}

void tensor_to_proto(const Tensor& t, onnx::TensorProto* p, const std::string& name) {
  TERRACE_CHECK(t.defined(), InvalidArgument, "cannot serialize an undefined tensor");
  p->Clear();
  if (!name.empty()) p->set_name(name);
  p->set_data_type(dtype_to_onnx(t.dtype()));
  for (int64_t d : t.shape()) p->add_dims(d);
  if (t.dtype() == DType::String) {
    const std::string* s = t.data<std::string>();
    for (int64_t i = 0; i < t.numel(); ++i) p->add_string_data(s[i]);
  } else if (is_packed4(t.dtype())) {  // two to a byte, the first in the low nibble
    const uint8_t* src = static_cast<const uint8_t*>(t.raw());
    std::string packed(size_t(t.numel() / 2 + t.numel() % 2), '\0');
    for (int64_t i = 0; i < t.numel(); ++i)
      packed[size_t(i / 2)] = char(uint8_t(packed[size_t(i / 2)]) | (nibble(src[i]) << ((i % 2) * 4)));
    p->set_raw_data(std::move(packed));
  } else {
    p->set_raw_data(static_cast<const char*>(t.raw()), t.nbytes());
  }
}

// ---- external data ----

namespace {

struct ExternalRef {
  std::string location;
  uint64_t offset = 0;
  std::optional<uint64_t> length;
};

uint64_t parse_u64(const std::string& s, const std::string& key, const std::string& what) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  TERRACE_CHECK(ec == std::errc() && end == s.data() + s.size() && !s.empty(), InvalidModel,
                what, ": external data '", key, "' is not a non-negative integer: '", s, "'");
  return v;
}

ExternalRef parse_external_ref(const onnx::TensorProto& p, const std::string& what) {
  ExternalRef r;
  for (const auto& kv : p.external_data()) {
    if (kv.key() == "location") r.location = kv.value();
    else if (kv.key() == "offset") r.offset = parse_u64(kv.value(), "offset", what);
    else if (kv.key() == "length") r.length = parse_u64(kv.value(), "length", what);
  }
  TERRACE_CHECK(!r.location.empty(), InvalidModel, what, ": external data has no location");
  return r;
}

// Splits a relative path into components, rejecting absolute paths and "..".
std::vector<std::string> confined_components(const std::string& loc, const std::string& what) {
  TERRACE_CHECK(loc[0] != '/', InvalidModel, what, ": external data path '", loc,
                "' is absolute; it must be relative to the model's folder");
  TERRACE_CHECK(loc.find('\0') == std::string::npos, InvalidModel, what,
                ": external data path contains a NUL byte");
  std::vector<std::string> parts;
  std::stringstream ss(loc);
  for (std::string part; std::getline(ss, part, '/');) {
    TERRACE_CHECK(part != "..", InvalidModel, what, ": external data path '", loc,
                  "' leaves the model's folder ('..')");
    if (!part.empty() && part != ".") parts.push_back(part);
  }
  TERRACE_CHECK(!parts.empty(), InvalidModel, what, ": external data path '", loc, "' names no file");
  return parts;
}

std::string real_path(const std::string& path, const std::string& what) {
  char* r = ::realpath(path.c_str(), nullptr);
  TERRACE_CHECK(r, InvalidModel, what, ": cannot resolve external data path '", path, "'");
  std::string s(r);
  std::free(r);
  return s;
}

// True when `file` (a real path) lies inside one of `roots` (real paths of folders).
bool inside(const std::string& file, const std::vector<std::string>& roots) {
  return std::any_of(roots.begin(), roots.end(), [&](const std::string& r) {
    return !r.empty() && file.compare(0, r.size() + 1, r + "/") == 0;
  });
}

// Walks the path one component at a time with lstat. A symbolic link is followed only where its
// full resolution lies inside one of `roots` (the real paths of the model's folder and the
// link root); the walk carries on from there. Returns the checked file's path (no link left in
// it) and its stat.
std::string confined_file(const std::string& base_dir, const std::vector<std::string>& roots, const std::string& loc,
                          const std::string& what, struct stat* st) {
  std::vector<std::string> parts = confined_components(loc, what);
  std::string path = base_dir;
  for (size_t i = 0; i < parts.size(); ++i) {
    path += "/" + parts[i];
    TERRACE_CHECK(::lstat(path.c_str(), st) == 0, InvalidModel, what, ": external data file '",
                  loc, "' does not exist in the model's folder");
    if (S_ISLNK(st->st_mode)) {
      path = real_path(path, what);
      TERRACE_CHECK(inside(path, roots),
                    InvalidModel, what, ": external data path '", loc, "' goes through a symbolic link to '", path,
                    "', outside the model's folder");
      TERRACE_CHECK(::lstat(path.c_str(), st) == 0, InvalidModel, what, ": cannot stat external data file '", path,
                    "'");
    }
    bool last = i + 1 == parts.size();
    TERRACE_CHECK(last ? S_ISREG(st->st_mode) : S_ISDIR(st->st_mode), InvalidModel, what,
                  ": external data path '", loc, "' is not a regular file inside a folder");
  }
  TERRACE_CHECK(st->st_nlink == 1, InvalidModel, what, ": external data file '", loc,
                "' has several hard links, which is not allowed");
  std::string file = real_path(path, what);
  TERRACE_CHECK(inside(file, roots),
                InvalidModel, what, ": external data file '", loc, "' lies outside the model's folder");
  return path;
}

// Reads [offset, offset + length) of the file checked as `checked`, refusing a file swapped in
// since the check (O_NOFOLLOW, and the same device and inode).
std::string read_checked_file(const std::string& path, const struct stat& checked, uint64_t offset,
                              uint64_t length, const std::string& what) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  TERRACE_CHECK(fd >= 0, IoError, what, ": cannot open external data file '", path, "': ",
                std::strerror(errno));
  struct stat st{};
  bool same = ::fstat(fd, &st) == 0 && st.st_dev == checked.st_dev && st.st_ino == checked.st_ino;
  std::string data(same ? size_t(length) : 0, '\0');
  size_t done = 0;
  while (same && done < data.size()) {
    ssize_t n = ::pread(fd, data.data() + done, data.size() - done, off_t(offset + done));
    if (n <= 0) break;
    done += size_t(n);
  }
  ::close(fd);
  TERRACE_CHECK(same, InvalidModel, what, ": external data file '", path,
                "' changed while it was being checked");
  TERRACE_CHECK(done == data.size(), IoError, what, ": short read from external data file '", path, "'");
  return data;
}

}  // namespace

void load_external_data(onnx::TensorProto& p, const std::string& base_dir, const std::string& what,
                        const std::string& link_root) {
  if (p.data_location() != onnx::TensorProto_DataLocation_EXTERNAL) return;
  TERRACE_CHECK(!base_dir.empty(), InvalidModel, what,
                ": uses external data, but the model was not loaded from a folder");
  TERRACE_CHECK(!p.has_raw_data(), InvalidModel, what, ": has both raw_data and external data");
  ExternalRef ref = parse_external_ref(p, what);
  std::vector<std::string> roots{real_path(base_dir, what)};
  if (!link_root.empty()) roots.push_back(real_path(link_root, what));
  struct stat st{};
  std::string path = confined_file(base_dir, roots, ref.location, what, &st);
  uint64_t size = uint64_t(st.st_size);
  TERRACE_CHECK(ref.offset <= size, InvalidModel, what, ": external data offset ", ref.offset,
                " is past the end of '", ref.location, "' (", size, " bytes)");
  uint64_t length = ref.length.value_or(size - ref.offset);
  TERRACE_CHECK(length <= size - ref.offset, InvalidModel, what, ": external data range [",
                ref.offset, ", +", length, ") is past the end of '", ref.location, "' (", size,
                " bytes)");
  // Check the claimed size against the dims before reading, so the read is never oversized.
  DType dt = dtype_from_proto_code(p.data_type(), what);
  TERRACE_CHECK(dt != DType::String, InvalidModel, what, ": string tensors cannot be external");
  int64_t n = proto_numel(p, what);
  if (is_packed4(dt))
    TERRACE_CHECK(uint64_t(n) / 2 + uint64_t(n) % 2 == length, InvalidModel, what, ": external data holds ",
                  length, " bytes, but its dims need ", n, " elements of 4 bits, two to a byte");
  else
    TERRACE_CHECK(uint64_t(n) <= length / dtype_size(dt) && uint64_t(n) * dtype_size(dt) == length,
                  InvalidModel, what, ": external data holds ", length, " bytes, but its dims need ",
                  n, " elements of ", dtype_size(dt), " bytes");
  p.set_raw_data(read_checked_file(path, st, ref.offset, length, what));
  p.clear_external_data();
  p.set_data_location(onnx::TensorProto_DataLocation_DEFAULT);
}

// ---- files and parsing ----

bool parse_proto(std::string_view bytes, google::protobuf::MessageLite* msg, int recursion_limit) {
  TERRACE_CHECK(bytes.size() < size_t(INT_MAX), InvalidModel, "protobuf message of ",
                bytes.size(), " bytes exceeds the 2 GiB protobuf limit (use external data)");
  google::protobuf::io::ArrayInputStream raw(bytes.data(), int(bytes.size()));
  google::protobuf::io::CodedInputStream in(&raw);
  in.SetTotalBytesLimit(INT_MAX);
  in.SetRecursionLimit(recursion_limit);
  return msg->ParseFromCodedStream(&in) && in.ConsumedEntireMessage();
}

namespace {
// Opens `path` for reading without blocking (a FIFO with no writer would block open() forever)
// and checks, on the opened file itself (so a symlink to /dev/zero is caught too), that it is a
// regular file. Returns the descriptor and its size.
std::pair<int, size_t> open_regular(const std::string& path, uint64_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  TERRACE_CHECK(fd >= 0, IoError, "cannot open '", path, "': ", std::strerror(errno));
  struct stat st{};
  const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  if (!regular || uint64_t(st.st_size) > max_bytes) {
    ::close(fd);
    TERRACE_CHECK(regular, IoError, "'", path, "' is not a regular file");
    fail(ErrorCode::IoError, "'", path, "' is ", uint64_t(st.st_size), " bytes, over the limit of ", max_bytes,
         " for this kind of file");
  }
  return {fd, size_t(st.st_size)};
}
}  // namespace

std::string read_file_bytes(const std::string& path, uint64_t max_bytes) {
  auto [fd, size] = open_regular(path, max_bytes);
  std::string bytes(size, '\0');
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::read(fd, bytes.data() + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += size_t(n);
  }
  const int err = errno;
  ::close(fd);
  TERRACE_CHECK(done == size, IoError, "short read from '", path, "': ", std::strerror(err));
  return bytes;
}

FileMapping::FileMapping(const std::string& path) {
  auto [fd, size] = open_regular(path, std::numeric_limits<uint64_t>::max());
  void* p = size ? ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0) : nullptr;
  const int err = errno;
  ::close(fd);
  TERRACE_CHECK(!size || p != MAP_FAILED, IoError, "cannot map '", path, "': ", std::strerror(err));
  if (size) bytes_ = {static_cast<const char*>(p), size};
}

FileMapping::~FileMapping() {
  if (!bytes_.empty()) ::munmap(const_cast<char*>(bytes_.data()), bytes_.size());
}

bool parse_proto_file(const std::string& path, google::protobuf::MessageLite* msg, size_t* size, int recursion_limit) {
  auto [fd, bytes] = open_regular(path, std::numeric_limits<uint64_t>::max());
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  *size = bytes;
  TERRACE_CHECK(bytes < size_t(INT_MAX), InvalidModel, "protobuf message of ", bytes,
                " bytes exceeds the 2 GiB protobuf limit (use external data)");
  google::protobuf::io::FileInputStream raw(fd, 1 << 20);
  bool ok;
  {
    google::protobuf::io::CodedInputStream in(&raw);
    in.SetTotalBytesLimit(INT_MAX);
    in.SetRecursionLimit(recursion_limit);
    ok = msg->ParseFromCodedStream(&in) && in.ConsumedEntireMessage();
  }
  TERRACE_CHECK(raw.GetErrno() == 0, IoError, "cannot read '", path, "': ", std::strerror(raw.GetErrno()));
  return ok;
}

// ---- .pb files (declared in onnx_import.h) ----

namespace {

template <typename Proto>
Proto parse_pb(std::string_view bytes, const std::string& what, const char* kind) {
  Proto p;
  TERRACE_CHECK(parse_proto(bytes, &p), InvalidModel, what, ": not a valid ", kind,
                " (the protobuf does not parse)");
  return p;
}

std::vector<Tensor> sequence_from_proto(const onnx::SequenceProto& s, const std::string& what) {
  TERRACE_CHECK(s.elem_type() == onnx::SequenceProto::TENSOR ||
                    (s.elem_type() == onnx::SequenceProto::UNDEFINED && s.tensor_values_size() == 0),
                NotImplemented, what, ": only sequences of tensors are supported");
  std::vector<Tensor> seq;
  for (const auto& t : s.tensor_values()) seq.push_back(tensor_from_proto(t, what));
  return seq;
}

RValue optional_from_proto(const onnx::OptionalProto& o, const std::string& what) {
  RValue v;
  v.kind = ValueKind::Optional;
  switch (o.elem_type()) {
    case onnx::OptionalProto::UNDEFINED: break;  // an empty optional of unrecorded type
    case onnx::OptionalProto::TENSOR:
      v.has_element = o.has_tensor_value();
      if (v.has_element) v.tensor = tensor_from_proto(o.tensor_value(), what);
      break;
    case onnx::OptionalProto::SEQUENCE:
      v.elem_kind = ValueKind::Sequence;
      v.has_element = o.has_sequence_value();
      if (v.has_element) v.seq = sequence_from_proto(o.sequence_value(), what);
      break;
    default: fail(ErrorCode::NotImplemented, what, ": optional of maps or sparse tensors");
  }
  return v;
}

}  // namespace

Tensor tensor_from_pb_bytes(std::string_view bytes, const std::string& what) {
  TERRACE_CHECK(!bytes.empty(), InvalidArgument, what, " is empty (0 bytes), not a TensorProto");
  onnx::TensorProto p = parse_pb<onnx::TensorProto>(bytes, what, "TensorProto");
  if (p.data_type() == 0) {  // protobuf parses many other messages as a TensorProto without a type
    onnx::ModelProto m;
    const bool model = parse_proto(bytes, &m) && m.has_graph();
    fail(ErrorCode::InvalidArgument, what, model ? " is an ONNX model (ModelProto), not a TensorProto"
                                                 : " is not a TensorProto: it has no data type");
  }
  return tensor_from_proto(p, what);
}

Tensor load_tensor_pb(const std::string& path) {
  return tensor_from_pb_bytes(read_file_bytes(path), path);
}

std::string tensor_to_pb_bytes(const Tensor& t, const std::string& name) {
  onnx::TensorProto p;
  tensor_to_proto(t, &p, name);
  std::string bytes;
  TERRACE_CHECK(p.SerializeToString(&bytes), InvalidArgument, "tensor ", t.str(2),
                " is too large to serialize as a TensorProto");
  return bytes;
}

void save_tensor_pb(const Tensor& t, const std::string& path, const std::string& name) {
  std::string bytes = tensor_to_pb_bytes(t, name);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  TERRACE_CHECK(out, IoError, "cannot create '", path, "'");
  out.write(bytes.data(), std::streamsize(bytes.size()));
  TERRACE_CHECK(out.flush(), IoError, "cannot write '", path, "'");
}

RValue load_value_pb(const std::string& path, ValueKind kind) {
  std::string bytes = read_file_bytes(path);
  switch (kind) {
    case ValueKind::Tensor: return RValue(tensor_from_pb_bytes(bytes, path));
    case ValueKind::Sequence:
      return RValue::sequence(
          sequence_from_proto(parse_pb<onnx::SequenceProto>(bytes, path, "SequenceProto"), path));
    case ValueKind::Optional:
      return optional_from_proto(parse_pb<onnx::OptionalProto>(bytes, path, "OptionalProto"), path);
    default: fail(ErrorCode::InvalidArgument, path, ": cannot read a value of unknown kind");
  }
}

}  // namespace terrace
