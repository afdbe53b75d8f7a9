// CodeCache: one file per entry, "TRCC1\n", then the key's and the object's lengths and the
// object's checksum (3 x uint64, little-endian as written), then the key, then the object.
#include "jit/code_cache.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "interp/error.h"
#include "interp/log.h"
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

// A cache that cannot be written is said once per process, not once per compile.
void warn_unwritable(const std::filesystem::path& dir, const std::string& why) {
  static std::atomic<bool> warned{false};
  if (warned.exchange(true)) return;
  log(LogLevel::Warn, "code cache: cannot write to ", dir.string(), " (", why,
      "); compiled code is not kept for later processes. Set TERRACE_CACHE_DIR to a writable "
      "folder, or to an empty value to turn the cache off");
}

bool is_entry(const std::filesystem::directory_entry& e) {
  std::error_code ec;
  return e.is_regular_file(ec) && e.path().extension() == ".o";
}

bool is_temporary(const std::filesystem::directory_entry& e) {
  return e.path().filename().string().find(".o.tmp.") != std::string::npos;
}

}  // namespace

CodeCache::CodeCache(std::filesystem::path dir, uint64_t max_bytes)
    : dir_(std::move(dir)), max_bytes_(max_bytes ? max_bytes : default_max_bytes()) {}

uint64_t CodeCache::default_max_bytes() {
  const char* v = std::getenv("TERRACE_CACHE_MAX_MB");
  if (!v || !*v) return kDefaultMaxBytes;
  char* end = nullptr;
  errno = 0;
  unsigned long long mb = std::strtoull(v, &end, 10);
  if (*end || errno || mb == 0 || mb > (uint64_t(1) << 40) || *v == '-') {
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true))
      log(LogLevel::Warn, "TERRACE_CACHE_MAX_MB='", v, "' is not a positive whole number of MiB; using the default, ",
          kDefaultMaxBytes >> 20);
    return kDefaultMaxBytes;
  }
  return uint64_t(mb) << 20;
}

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
  if (fnv1a(object) != checksum) {
    log(LogLevel::Trace, "code cache: ", path_of(key).string(), " fails its checksum: a miss");
    return std::nullopt;
  }
  // A hit makes the entry the most recently used (eviction removes the oldest first).
  std::error_code ec;
  std::filesystem::last_write_time(path_of(key), std::filesystem::file_time_type::clock::now(), ec);
  log(LogLevel::Trace, "code cache: hit ", path_of(key).string());
  return object;
}

void CodeCache::store(std::string_view key, std::string_view object) const {
  if (!enabled()) return;
  const std::filesystem::path path = path_of(key);
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  if (ec) {
    warn_unwritable(dir_, ec.message());
    return;
  }
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
    out.flush();
    if (!out) {
      const int err = errno;
      out.close();
      std::filesystem::remove(tmp, ec);
      warn_unwritable(dir_, err ? std::strerror(err) : "write failed");
      return;
    }
  }
  std::filesystem::rename(tmp, path, ec);  // atomic: readers see the old entry or the new one
  if (ec) {
    warn_unwritable(dir_, ec.message());
    std::filesystem::remove(tmp, ec);
    return;
  }
  log(LogLevel::Trace, "code cache: stored ", path.string(), " (", object.size(), " bytes)");
  evict();
}

CodeCache::Info CodeCache::info() const {
  Info info;
  if (!enabled()) return info;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir_ / "cpu", ec), end; !ec && it != end; it.increment(ec)) {
    if (!is_entry(*it)) continue;
    std::error_code size_ec;
    uint64_t size = it->file_size(size_ec);
    if (size_ec) continue;
    ++info.entries;
    info.bytes += size;
  }
  return info;
}

CodeCache::Info CodeCache::clear() const {
  Info removed;
  if (!enabled()) return removed;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir_ / "cpu", ec), end; !ec && it != end; it.increment(ec)) {
    const bool entry = is_entry(*it);
    if (!entry && !is_temporary(*it)) continue;
    std::error_code size_ec, rm_ec;
    uint64_t size = it->file_size(size_ec);
    if (!std::filesystem::remove(it->path(), rm_ec) || rm_ec) continue;
    if (entry) {
      ++removed.entries;
      if (!size_ec) removed.bytes += size;
    }
  }
  return removed;
}

uint64_t CodeCache::evict() const {
  if (!enabled()) return 0;
  struct Entry {
    std::filesystem::file_time_type time;
    uint64_t size;
    std::filesystem::path path;
  };
  std::vector<Entry> entries;
  uint64_t total = 0;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir_ / "cpu", ec), end; !ec && it != end; it.increment(ec)) {
    if (!is_entry(*it)) continue;
    std::error_code e1, e2;
    Entry e{it->last_write_time(e1), it->file_size(e2), it->path()};
    if (e1 || e2) continue;
    total += e.size;
    entries.push_back(std::move(e));
  }
  if (total <= max_bytes_) return 0;
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.time < b.time; });
  uint64_t removed = 0;
  for (const Entry& e : entries) {
    if (total <= max_bytes_) break;
    std::error_code rm;
    if (std::filesystem::remove(e.path, rm)) {
      total -= e.size;
      ++removed;
      log(LogLevel::Trace, "code cache: evicted ", e.path.string(), " (", e.size, " bytes)");
    }
  }
  if (removed)
    log(LogLevel::Debug, "code cache: evicted ", removed, " entries to stay under ", max_bytes_ >> 20, " MiB");
  return removed;
}

}  // namespace terrace::jit
