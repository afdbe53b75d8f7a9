// CodeCache: one file per entry, "TRCC1\n", then the key's and the object's lengths and the
// object's checksum (3 x uint64, little-endian as written), then the key, then the object.
#include "jit/code_cache.h"

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "interp/error.h"
#include "interp/tensor_proto.h"

namespace terrace::jit {
namespace {

constexpr char kMagic[] = "TRCC1\n";
constexpr size_t kMagicSize = sizeof(kMagic) - 1;
// No object of one region comes near this (the largest seen are a few hundred KiB).
constexpr uint64_t kMaxEntryBytes = uint64_t(256) << 20;

uint64_t fnv1a(std::string_view bytes, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

CodeCache::CodeCache(std::filesystem::path dir) : dir_(std::move(dir)) {}

std::filesystem::path CodeCache::default_dir() {
  if (const char* d = std::getenv("TERRACE_CACHE_DIR")) return d;
  const char* home = std::getenv("HOME");
  return home && *home ? std::filesystem::path(home) / ".cache" / "terrace" : std::filesystem::path();
}

std::filesystem::path CodeCache::path_of(std::string_view key) const {
  // Two hashes of the key name the file; the key itself, stored inside, decides a hit.
  return dir_ / "cpu" / (hex(fnv1a(key)) + hex(fnv1a(key, 0x9e3779b97f4a7c15ull)) + ".o");
}

std::optional<std::string> CodeCache::load(std::string_view key) const {
  if (!enabled()) return std::nullopt;
  // A FIFO, a device (a symlink to /dev/zero) or a file past the limit is a miss, read no further.
  std::string data;
  try {
    data = read_file_bytes(path_of(key).string(), kMaxEntryBytes);
  } catch (const Error&) {
    return std::nullopt;
  }
  const size_t header = kMagicSize + 3 * sizeof(uint64_t);
  if (data.size() < header || data.compare(0, kMagicSize, kMagic) != 0) return std::nullopt;
  uint64_t key_size, object_size, checksum;
  std::memcpy(&key_size, data.data() + kMagicSize, 8);
  std::memcpy(&object_size, data.data() + kMagicSize + 8, 8);
  std::memcpy(&checksum, data.data() + kMagicSize + 16, 8);
  if (key_size != key.size() || data.size() != header + key_size + object_size) return std::nullopt;
  if (std::string_view(data).substr(header, key_size) != key) return std::nullopt;
  std::string object = data.substr(header + key_size);
  if (fnv1a(object) != checksum) return std::nullopt;
  return object;
}

void CodeCache::store(std::string_view key, std::string_view object) const {
  if (!enabled()) return;
  const std::filesystem::path path = path_of(key);
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  if (ec) return;
  static std::atomic<uint64_t> counter{0};
  std::filesystem::path tmp = path;
  tmp += ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  {
    std::ofstream out(tmp, std::ios::binary);
    const uint64_t sizes[3] = {key.size(), object.size(), fnv1a(object)};
    out.write(kMagic, kMagicSize);
    out.write(reinterpret_cast<const char*>(sizes), sizeof sizes);
    out.write(key.data(), std::streamsize(key.size()));
    out.write(object.data(), std::streamsize(object.size()));
    if (!out) {
      out.close();
      std::filesystem::remove(tmp, ec);
      return;
    }
  }
  std::filesystem::rename(tmp, path, ec);  // atomic: readers see the old entry or the new one
  if (ec) std::filesystem::remove(tmp, ec);
}

}  // namespace terrace::jit
