// CodeCache: compiled object files on disk, so that a kernel compiled once is only linked in
// later processes. DESIGN.md's contract: the key covers everything the object depends on; each
// file carries its key and a checksum, is written under a temporary name and renamed; a file that
// is unreadable, truncated or corrupt is a miss, never an error.
#pragma once
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace terrace::jit {

class CodeCache {
 public:
  // Entries live in dir/cpu/. An empty dir disables the cache.
  explicit CodeCache(std::filesystem::path dir);

  // $TERRACE_CACHE_DIR, or ~/.cache/terrace when it is unset; set and empty disables the cache.
  static std::filesystem::path default_dir();

  bool enabled() const { return !dir_.empty(); }
  // The object stored under exactly this key, or nullopt (no entry, or a bad one).
  std::optional<std::string> load(std::string_view key) const;
  // Stores the object under the key. Best effort: a cache that cannot be written is skipped.
  void store(std::string_view key, std::string_view object) const;
  // The file an entry for this key lives in (for tests).
  std::filesystem::path path_of(std::string_view key) const;

 private:
  std::filesystem::path dir_;
};

}  // namespace terrace::jit
