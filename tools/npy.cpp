// numpy's .npy format (numpy/lib/format.py, versions 1 to 3) and its .npz archives (numpy.savez:
// a zip of stored .npy members), read and written without numpy or zlib.
#include "tools/npy.h"

#include <array>
#include <bit>
#include <cstring>

namespace terrace::cli {

// Every dtype below is copied byte for byte: a big-endian host would need swapping.
static_assert(std::endian::native == std::endian::little, "the .npy reader assumes a little-endian host");

namespace {

constexpr std::string_view kNpyMagic("\x93NUMPY", 6);
constexpr std::string_view kZipMagic("PK\x03\x04", 4);
constexpr const char* kAcceptedDtypes = "f2, f4, f8, i1, i2, i4, i8, u1, u2, u4, u8, b1 (bool)";

// The .npy dtype string of each Terrace dtype numpy has ("<f4"); nullptr for the others.
const char* npy_descr(DType t) {
  switch (t) {
    case DType::Float16: return "<f2";
    case DType::Float32: return "<f4";
    case DType::Float64: return "<f8";
    case DType::Int8: return "|i1";
    case DType::Int16: return "<i2";
    case DType::Int32: return "<i4";
    case DType::Int64: return "<i8";
    case DType::UInt8: return "|u1";
    case DType::UInt16: return "<u2";
    case DType::UInt32: return "<u4";
    case DType::UInt64: return "<u8";
    case DType::Bool: return "|b1";
    default: return nullptr;
  }
}

// The dtype of a header's descr ("<f4", "|b1", "=i8"); InvalidArgument for the others.
DType dtype_of_descr(const std::string& descr, const std::string& what) {
  TERRACE_CHECK(descr.empty() || descr[0] != '>', InvalidArgument, what, ": dtype '", descr,
                "' is big-endian, which Terrace does not read: save a.astype(a.dtype.newbyteorder('<'))");
  std::string body = descr;
  if (!body.empty() && (body[0] == '<' || body[0] == '|' || body[0] == '=')) body = body.substr(1);
  for (DType t : {DType::Float16, DType::Float32, DType::Float64, DType::Int8, DType::Int16, DType::Int32,
                  DType::Int64, DType::UInt8, DType::UInt16, DType::UInt32, DType::UInt64, DType::Bool})
    if (body == npy_descr(t) + 1) return t;
  fail(ErrorCode::InvalidArgument, what, ": dtype '", descr, "' is not one Terrace reads (little-endian ",
       kAcceptedDtypes, ")");
}

// A .npy header: a Python dict literal, {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), },
// read as numpy writes it (and as ast.literal_eval would take it: either quote, a trailing comma,
// Python 2's "3L").
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& what) : s_(text), what_(what) {}

  void parse(std::string* descr, bool* fortran, Shape* shape) {
    bool seen[3] = {false, false, false};
    expect('{');
    while (!peek('}')) {
      const std::string key = quoted();
      expect(':');
      if (key == "descr") {
        if (peek('[')) bad("a structured dtype (a list of fields) is not read; save a plain array");
        *descr = quoted(), seen[0] = true;
      } else if (key == "fortran_order") {
        *fortran = boolean(), seen[1] = true;
      } else if (key == "shape") {
        *shape = tuple(), seen[2] = true;
      } else {
        bad("unexpected key '" + key + "'");
      }
      if (!peek('}')) expect(',');
    }
    expect('}');
    skip_space();
    if (i_ != s_.size()) bad("text after the closing '}'");
    if (!(seen[0] && seen[1] && seen[2])) bad("it lacks one of 'descr', 'fortran_order' and 'shape'");
  }

 private:
  [[noreturn]] void bad(const std::string& why) {
    fail(ErrorCode::InvalidArgument, what_, ": the .npy header does not parse: ", why, " (header: ",
         std::string(s_.substr(0, 200)), ")");
  }
  void skip_space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r')) ++i_;
  }
  bool peek(char c) {
    skip_space();
    return i_ < s_.size() && s_[i_] == c;
  }
  void expect(char c) {
    if (!peek(c)) bad(std::string("expected '") + c + "' at offset " + std::to_string(i_));
    ++i_;
  }
  std::string quoted() {
    skip_space();
    if (i_ >= s_.size() || (s_[i_] != '\'' && s_[i_] != '"')) bad("expected a quoted string at offset " + std::to_string(i_));
    const char q = s_[i_++];
    const size_t end = s_.find(q, i_);
    if (end == std::string_view::npos) bad("a string is not closed");
    std::string out(s_.substr(i_, end - i_));
    i_ = end + 1;
    return out;
  }
  bool boolean() {
    skip_space();
    for (auto [word, value] : {std::pair{"True", true}, std::pair{"False", false}})
      if (s_.substr(i_, std::strlen(word)) == word) {
        i_ += std::strlen(word);
        return value;
      }
    bad("expected True or False at offset " + std::to_string(i_));
  }
  Shape tuple() {
    Shape shape;
    expect('(');
    while (!peek(')')) {
      size_t start = i_;
      int64_t v = 0;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
        if (v > (INT64_MAX - 9) / 10) bad("a dim is too large");
        v = v * 10 + (s_[i_++] - '0');
      }
      if (i_ == start) bad("expected a dim at offset " + std::to_string(i_));
      if (i_ < s_.size() && s_[i_] == 'L') ++i_;
      shape.push_back(v);
      if (!peek(')')) expect(',');
    }
    expect(')');
    return shape;
  }

  std::string_view s_;
  const std::string& what_;
  size_t i_ = 0;
};

uint32_t read_le(std::string_view b, size_t at, size_t n) {
  uint32_t v = 0;
  for (size_t k = 0; k < n; ++k) v |= uint32_t(uint8_t(b[at + k])) << (8 * k);
  return v;
}

}  // namespace

bool is_npy(std::string_view bytes) { return bytes.substr(0, kNpyMagic.size()) == kNpyMagic; }
// An archive of no member (numpy.savez()) is its end record alone, "PK\5\6".
bool is_zip(std::string_view bytes) {
  return bytes.substr(0, kZipMagic.size()) == kZipMagic || bytes.substr(0, 4) == std::string_view("PK\x05\x06", 4);
}

Tensor tensor_from_npy(std::string_view bytes, const std::string& what) {
  TERRACE_CHECK(is_npy(bytes), InvalidArgument, what, " is not a .npy file (it does not start with \\x93NUMPY)");
  TERRACE_CHECK(bytes.size() >= 10, InvalidArgument, what, ": the .npy file ends inside its preamble");
  const int major = uint8_t(bytes[6]);
  TERRACE_CHECK(major >= 1 && major <= 3, InvalidArgument, what, ": .npy format version ", major, ".",
                int(uint8_t(bytes[7])), " is not one Terrace reads (1.0 to 3.0)");
  const size_t len_bytes = major == 1 ? 2 : 4;
  TERRACE_CHECK(bytes.size() >= 8 + len_bytes, InvalidArgument, what, ": the .npy file ends inside its preamble");
  const size_t header_len = read_le(bytes, 8, len_bytes), data_at = 8 + len_bytes + header_len;
  TERRACE_CHECK(bytes.size() >= data_at, InvalidArgument, what, ": the .npy file ends inside its header (",
                bytes.size(), " bytes; the header says it ends at byte ", data_at, ")");
  std::string descr;
  bool fortran = false;
  Shape shape;
  HeaderParser(bytes.substr(8 + len_bytes, header_len), what).parse(&descr, &fortran, &shape);
  const DType dtype = dtype_of_descr(descr, what);
  int64_t numel = 0;
  try {
    numel = shape_numel(shape);
  } catch (const Error& e) {
    fail(e.code(), what, ": shape ", shape_str(shape), ": ", e.message());
  }
  // Fortran order is the same bytes as C order for a tensor of at most one dim above size 1.
  int64_t wide_dims = 0;
  for (int64_t d : shape) wide_dims += d > 1;
  TERRACE_CHECK(!fortran || wide_dims <= 1, InvalidArgument, what, ": the array is in Fortran order, which "
                "Terrace does not read: save np.ascontiguousarray(a)");
  const std::string_view data = bytes.substr(data_at);
  const size_t size = dtype_size(dtype);
  TERRACE_CHECK(uint64_t(numel) <= data.size() / size && uint64_t(numel) * size == data.size(), InvalidArgument,
                what, ": ", descr, shape_str(shape), " needs ", numel, " x ", size, " bytes of data; the file holds ",
                data.size(), data.size() < uint64_t(numel) * size ? " (cut short)" : " (too many)");
  Tensor t = Tensor::empty(dtype, shape);
  if (dtype == DType::Bool) {  // a bool byte other than 0 or 1 is undefined behaviour in C++
    for (int64_t i = 0; i < numel; ++i) t.data<bool>()[i] = data[size_t(i)] != 0;
  } else if (numel > 0) {
    std::memcpy(t.raw(), data.data(), data.size());
  }
  return t;
}

std::string tensor_to_npy(const Tensor& t, const std::string& what) {
  const char* descr = npy_descr(t.dtype());
  TERRACE_CHECK(descr, InvalidArgument, what, " is ", dtype_name(t.dtype()),
                ", which numpy has no dtype for: write it as a TensorProto (--output-format pb)");
  std::string dims;
  for (int64_t d : t.shape()) dims += std::to_string(d) + ", ";
  if (t.shape().size() > 1) dims.resize(dims.size() - 2);  // numpy writes (5,) and (2, 3)
  else if (t.shape().size() == 1) dims.pop_back();
  std::string header = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  // numpy pads the header with spaces and a newline so that the data starts 64-byte aligned.
  const size_t pre = header.size() + 1 < 65536 - 64 ? 10 : 12;
  header.append((64 - (pre + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string out(kNpyMagic);
  out += char(pre == 10 ? 1 : 2);
  out += '\0';
  for (size_t k = 0; k < pre - 8; ++k) out += char((header.size() >> (8 * k)) & 0xff);
  out += header;
  if (t.numel() > 0) out.append(static_cast<const char*>(t.raw()), t.nbytes());
  return out;
}

// ---- .npz: the zip archive (PKWARE's APPNOTE.TXT), stored members only ----

namespace {

struct ZipMember {
  std::string name;
  uint32_t method = 0, flags = 0, crc = 0;
  uint64_t packed = 0, size = 0, local_at = 0;  // compressed and uncompressed size, local header offset
};

uint64_t read_le64(std::string_view b, size_t at) {
  return uint64_t(read_le(b, at, 4)) | uint64_t(read_le(b, at + 4, 4)) << 32;
}

// CRC-32 as zip computes it (reflected polynomial 0xEDB88320), to catch a damaged member.
uint32_t crc32(std::string_view b) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t n = 0; n < 256; ++n) {
      uint32_t c = n;
      for (int k = 0; k < 8; ++k) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[n] = c;
    }
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  for (char ch : b) c = table[(c ^ uint8_t(ch)) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

// The offset of the End of Central Directory record: the last one, behind at most a 64 KiB comment.
size_t find_end_record(std::string_view b, const std::string& what) {
  TERRACE_CHECK(b.size() >= 22, InvalidArgument, what, ": the .npz (zip) archive is cut short");
  const size_t lowest = b.size() >= 22 + 65535 ? b.size() - 22 - 65535 : 0;
  for (size_t at = b.size() - 22 + 1; at-- > lowest;)
    if (read_le(b, at, 4) == 0x06054b50u) return at;
  fail(ErrorCode::InvalidArgument, what, ": the .npz (zip) archive has no end record: cut short or not a zip file");
}

// A central directory entry's sizes and offset past 4 GiB (or forced so) are in its zip64 extra
// field (id 1), in this order, each only where the 32-bit field holds 0xFFFFFFFF.
void apply_zip64_extra(std::string_view extra, ZipMember& m, const std::string& what) {
  for (size_t at = 0; at + 4 <= extra.size();) {
    const uint32_t id = read_le(extra, at, 2), len = read_le(extra, at + 2, 2);
    TERRACE_CHECK(at + 4 + len <= extra.size(), InvalidArgument, what, ": member '", m.name, "' has a cut extra field");
    size_t f = at + 4;
    for (uint64_t* field : {&m.size, &m.packed, &m.local_at}) {
      if (id != 1 || *field != 0xFFFFFFFFu) continue;
      TERRACE_CHECK(f + 8 <= at + 4 + len, InvalidArgument, what, ": member '", m.name, "' has a cut zip64 field");
      *field = read_le64(extra, f), f += 8;
    }
    at += 4 + len;
  }
}

std::vector<ZipMember> central_directory(std::string_view b, const std::string& what) {
  const size_t end = find_end_record(b, what);
  const uint32_t count = read_le(b, end + 10, 2);
  uint64_t at = read_le(b, end + 16, 4);
  TERRACE_CHECK(count != 0xFFFF && at != 0xFFFFFFFFu, InvalidArgument, what,
                ": a zip64 archive of more than 65535 members or 4 GiB is not read");
  std::vector<ZipMember> members;
  for (uint32_t i = 0; i < count; ++i) {
    TERRACE_CHECK(at + 46 <= end && read_le(b, at, 4) == 0x02014b50u, InvalidArgument, what,
                  ": the .npz (zip) archive's directory is damaged (entry ", i, ")");
    ZipMember m;
    m.flags = read_le(b, at + 8, 2), m.method = read_le(b, at + 10, 2), m.crc = read_le(b, at + 16, 4);
    m.packed = read_le(b, at + 20, 4), m.size = read_le(b, at + 24, 4), m.local_at = read_le(b, at + 42, 4);
    const size_t name_len = read_le(b, at + 28, 2), extra_len = read_le(b, at + 30, 2), note_len = read_le(b, at + 32, 2);
    TERRACE_CHECK(at + 46 + name_len + extra_len + note_len <= end, InvalidArgument, what,
                  ": the .npz (zip) archive's directory is damaged (entry ", i, ")");
    m.name = std::string(b.substr(at + 46, name_len));
    apply_zip64_extra(b.substr(at + 46 + name_len, extra_len), m, what);
    members.push_back(std::move(m));
    at += 46 + name_len + extra_len + note_len;
  }
  return members;
}

// A stored member's bytes, its CRC checked.
std::string_view member_data(std::string_view b, const ZipMember& m, const std::string& what) {
  const std::string name = what + ": member '" + m.name + "'";
  TERRACE_CHECK(!(m.flags & 1), InvalidArgument, name, " is encrypted, which Terrace does not read");
  TERRACE_CHECK(m.method != 8, InvalidArgument, name, " is compressed (deflate, as numpy.savez_compressed "
                "writes): Terrace reads uncompressed archives only; write it with numpy.savez");
  TERRACE_CHECK(m.method == 0, InvalidArgument, name, " uses zip compression method ", m.method,
                "; Terrace reads uncompressed (stored) members only: write it with numpy.savez");
  TERRACE_CHECK(m.local_at + 30 <= b.size() && read_le(b, m.local_at, 4) == 0x04034b50u, InvalidArgument, name,
                ": its local header is missing or damaged");
  const uint64_t data_at = m.local_at + 30 + read_le(b, m.local_at + 26, 2) + read_le(b, m.local_at + 28, 2);
  TERRACE_CHECK(m.packed == m.size && data_at <= b.size() && m.size <= b.size() - data_at, InvalidArgument, name,
                ": its data is cut short (", m.size, " bytes from offset ", data_at, " of ", b.size(), ")");
  std::string_view data = b.substr(data_at, m.size);
  TERRACE_CHECK(crc32(data) == m.crc, InvalidArgument, name, ": its CRC does not match: the archive is damaged");
  return data;
}

}  // namespace

NamedTensors tensors_from_npz(std::string_view bytes, const std::string& what) {
  TERRACE_CHECK(is_zip(bytes), InvalidArgument, what, " is not an .npz file (a zip archive, as numpy.savez writes)");
  NamedTensors out;
  for (const ZipMember& m : central_directory(bytes, what)) {
    const std::string_view data = member_data(bytes, m, what);
    TERRACE_CHECK(m.name.size() > 4 && m.name.ends_with(".npy"), InvalidArgument, what, ": member '", m.name,
                  "' is not a .npy file (numpy.savez names each array NAME.npy)");
    const std::string name = m.name.substr(0, m.name.size() - 4);
    for (auto& [n, t] : out)
      TERRACE_CHECK(n != name, InvalidArgument, what, ": the array '", name, "' is in it twice");
    out.emplace_back(name, tensor_from_npy(data, what + ": member '" + m.name + "'"));
  }
  TERRACE_CHECK(!out.empty(), InvalidArgument, what, ": the .npz archive holds no arrays");
  return out;
}

}  // namespace terrace::cli
