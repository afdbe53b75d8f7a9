// .npy files and .npz (zip) archives built byte by byte, as numpy writes them, for the tests of
// tools/npy.h and of the CLI's numpy options: no numpy needed, and any field can be made wrong.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace npy_bytes {

// `n` bytes of `v`, little-endian.
inline std::string le(uint64_t v, int n) {
  std::string s;
  for (int k = 0; k < n; ++k) s += char((v >> (8 * k)) & 0xff);
  return s;
}

// The raw bytes of a vector of numbers, as the data of a .npy file.
template <typename T>
std::string raw(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// A .npy file of format version `major` (1 to 3) whose header is `dict` (a Python dict literal),
// padded as numpy pads it (the data 64-byte aligned, the header ending in a newline).
inline std::string npy(const std::string& dict, const std::string& data, int major = 1) {
  const size_t pre = major == 1 ? 10 : 12;
  std::string header = dict;
  header.append((64 - (pre + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  return std::string("\x93NUMPY", 6) + char(major) + '\0' + le(header.size(), int(pre - 8)) + header + data;
}

// A .npy file as numpy.save writes one: {'descr': DESCR, 'fortran_order': False, 'shape': SHAPE, }.
inline std::string npy_array(const std::string& descr, const std::string& shape, const std::string& data) {
  return npy("{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }", data);
}

inline uint32_t crc32(const std::string& b) {
  uint32_t c = 0xFFFFFFFFu;
  for (char ch : b) {
    c ^= uint8_t(ch);
    for (int k = 0; k < 8; ++k) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
  }
  return c ^ 0xFFFFFFFFu;
}

struct Member {
  std::string name, data;
  uint16_t method = 0;  // 0 stored, 8 deflate (the data is then not really deflated: it is refused first)
};

// A zip archive as numpy.savez writes it: each local header with a zip64 extra field (numpy opens
// every member with force_zip64), the central directory without, and the end record.
inline std::string zip(const std::vector<Member>& members) {
  std::string out, dir;
  for (const Member& m : members) {
    const uint32_t crc = crc32(m.data);
    const std::string sizes = le(m.data.size(), 4) + le(m.data.size(), 4);
    const std::string zip64 = le(1, 2) + le(16, 2) + le(m.data.size(), 8) + le(m.data.size(), 8);
    dir += le(0x02014b50, 4) + le(45, 2) + le(45, 2) + le(0, 2) + le(m.method, 2) + le(0, 4) + le(crc, 4) + sizes +
           le(m.name.size(), 2) + le(0, 2) + le(0, 2) + le(0, 2) + le(0, 2) + le(0, 4) + le(out.size(), 4) + m.name;
    out += le(0x04034b50, 4) + le(45, 2) + le(0, 2) + le(m.method, 2) + le(0, 4) + le(crc, 4) + sizes +
           le(m.name.size(), 2) + le(zip64.size(), 2) + m.name + zip64 + m.data;
  }
  const size_t dir_at = out.size();
  out += dir;
  out += le(0x06054b50, 4) + le(0, 2) + le(0, 2) + le(members.size(), 2) + le(members.size(), 2) + le(dir.size(), 4) +
         le(dir_at, 4) + le(0, 2);
  return out;
}

}  // namespace npy_bytes
