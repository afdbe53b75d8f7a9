// CodeCache: compiled object files on disk, so that a kernel compiled once is only linked in
// later processes. The contract (ARCHITECTURE.md, "The disk code cache"): the key covers everything
// the object depends on; each file carries its key and a checksum, is written under a temporary
// name and renamed; a file that is unreadable, truncated or corrupt is a miss, never an error.
//
// The cache holds at most max_bytes (default 512 MiB, $TERRACE_CACHE_MAX_MB): after a store that
// takes it past the limit, the least recently used entries (a hit refreshes an entry's time) are
// removed until it fits again. A directory that cannot be written is reported once per process
// (a warning on stderr) and then skipped. `terrace cache info|clear` inspects and empties it.
// Its code is executed: an entry owned by another user or writable by others, or an entry folder
// another user owns or anyone may write (without the sticky bit), is never loaded (a warning).
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace terrace::jit {

class CodeCache {
 public:
  // The default limit on the cache's size: 512 MiB (a ResNet-50's objects take a few MiB).
  static constexpr uint64_t kDefaultMaxBytes = uint64_t(512) << 20;

  // Entries live in dir/cpu/. An empty dir disables the cache. max_bytes 0: default_max_bytes().
  explicit CodeCache(std::filesystem::path dir, uint64_t max_bytes = 0);

  // $TERRACE_CACHE_DIR, or ~/.cache/terrace when it is unset; set and empty disables the cache.
  static std::filesystem::path default_dir();
  // $TERRACE_CACHE_MAX_MB (a whole number of MiB, at least 1) or kDefaultMaxBytes. A value that is
  // not a positive number is reported once (stderr) and the default used.
  static uint64_t default_max_bytes();

  bool enabled() const { return !dir_.empty(); }
  const std::filesystem::path& dir() const { return dir_; }
  uint64_t max_bytes() const { return max_bytes_; }
  // The object stored under exactly this key, or nullopt (no entry, or a bad one).
  std::optional<std::string> load(std::string_view key) const;
  // Stores the object under the key, then evicts the oldest entries past max_bytes. Best effort:
  // a cache that cannot be written is skipped (with a warning, once per process).
  void store(std::string_view key, std::string_view object) const;
  // "" when entries can be stored (the folder made, a file written and removed), else why not.
  std::string writable() const;
  // The file an entry for this key lives in (for tests).
  std::filesystem::path path_of(std::string_view key) const;

  struct Info {
    uint64_t entries = 0;  // entry files
    uint64_t bytes = 0;    // their total size
  };
  // What the cache holds now (nothing when it is disabled or its folder does not exist).
  Info info() const;
  // Removes every entry (and leftover temporary files); returns what was removed.
  Info clear() const;
  // Removes the least recently used entries until the cache holds at most max_bytes; returns
  // how many were removed. store() calls it.
  uint64_t evict() const;

 private:
  std::filesystem::path dir_;
  uint64_t max_bytes_;
};

}  // namespace terrace::jit
