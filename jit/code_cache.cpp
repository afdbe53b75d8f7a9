// CodeCache: one file per entry, "TRCC1\n", then the key's and the object's lengths and the
// object's checksum (3 x uint64, little-endian as written), then the key, then the object.
#include "jit/code_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <vector>

#include "interp/error.h"
#include "interp/log.h"

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

// Code from the cache is executed, so only what this user wrote counts: a file owned by another
// user, or that others may write, is refused, as is a folder another user owns or anyone may
// write without the sticky bit (where anyone may swap an entry); said once per process.
std::string unsafe(const struct stat& st, bool folder) {
  if (st.st_uid != ::geteuid()) return "owned by user " + std::to_string(st.st_uid) + ", not this one";
  if (folder ? (st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX) : (st.st_mode & (S_IWGRP | S_IWOTH)))
    return "writable by other users";
  return "";
}

void warn_unsafe(const std::filesystem::path& path, const std::string& why) {
  static std::atomic<bool> warned{false};
  if (warned.exchange(true)) return;
  log(LogLevel::Warn, "code cache: ", path.string(), " is ", why, "; its code is not loaded, and nothing is stored there");
}

// The cache's entry folder (dir/cpu), when it is this user's own; else a warning once and false.
bool safe_folder(const std::filesystem::path& folder) {
  struct stat st{};
  if (::lstat(folder.c_str(), &st) != 0) return true;  // not there yet: store() makes it
  std::string why = S_ISDIR(st.st_mode) ? unsafe(st, true) : "not a folder";
  if (why.empty()) return true;
  warn_unsafe(folder, why);
  return false;
}

// The entry's bytes, from a regular file of this user's that others cannot write, of at most
// kMaxEntryBytes (checked on the opened file: a FIFO, a link to a device or a swapped file is a miss).
std::optional<std::string> read_entry(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat st{};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || uint64_t(st.st_size) > kMaxEntryBytes) {
    ::close(fd);
    return std::nullopt;
  }
  if (std::string why = unsafe(st, false); !why.empty()) {
    ::close(fd);
    warn_unsafe(path, why);
    return std::nullopt;
  }
  std::string data(size_t(st.st_size), '\0');
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::read(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += size_t(n);
  }
  ::close(fd);
  if (done != data.size()) return std::nullopt;
  return data;
}

// Makes the entry folder, for this user alone (0700, whatever the umask: under umask 0 a folder
// anyone may write would be refused by safe_folder). Returns the error, if any.
std::error_code make_entry_folder(const std::filesystem::path& folder) {
  std::error_code ec;
  std::filesystem::create_directories(folder.parent_path(), ec);
  if (!ec && ::mkdir(folder.c_str(), 0700) != 0 && errno != EEXIST) ec = std::error_code(errno, std::generic_category());
  return ec;
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
  if (!safe_folder(dir_ / "cpu")) return std::nullopt;
  std::optional<std::string> read = read_entry(path_of(key));
  if (!read) return std::nullopt;
  std::string data = std::move(*read);
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
  std::error_code ec = make_entry_folder(path.parent_path());
  if (ec) {
    warn_unwritable(dir_, ec.message());
    return;
  }
  if (!safe_folder(path.parent_path())) return;
  static std::atomic<uint64_t> counter{0};
  std::filesystem::path tmp = path;
  tmp += ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  {
    // 0600: an entry others could write is refused by load(), whatever the umask.
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
      warn_unwritable(dir_, std::strerror(errno));
      return;
    }
    const uint64_t sizes[3] = {key.size(), object.size(), fnv1a(object)};
    std::string bytes(kMagic, kMagicSize);
    bytes.append(reinterpret_cast<const char*>(sizes), sizeof sizes).append(key).append(object);
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      done += size_t(n);
    }
    const int err = errno;
    if (::close(fd) != 0 || done != bytes.size()) {
      std::filesystem::remove(tmp, ec);
      warn_unwritable(dir_, done != bytes.size() && err ? std::strerror(err) : "write failed");
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

std::string CodeCache::writable() const {
  if (!enabled()) return "the cache is turned off";
  const std::filesystem::path folder = dir_ / "cpu";
  std::error_code ec = make_entry_folder(folder);
  if (ec) return folder.string() + ": " + ec.message();
  struct stat st{};
  if (::lstat(folder.c_str(), &st) == 0)
    if (std::string why = S_ISDIR(st.st_mode) ? unsafe(st, true) : "not a folder"; !why.empty())
      return folder.string() + " is " + why;
  const std::filesystem::path probe = folder / (".probe." + std::to_string(::getpid()) + ".o.tmp.0");
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return folder.string() + ": " + std::strerror(errno);
  ::close(fd);
  std::filesystem::remove(probe, ec);
  return "";
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
