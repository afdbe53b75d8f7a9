// terrace cache: what the disk code cache holds (info) and emptying it (clear).
#include <cstdio>

#include "tiers/options.h"
#include "tools/cli_util.h"
#include "tools/json_out.h"

#ifdef TERRACE_HAVE_CPU_JIT
#include "jit/code_cache.h"
#endif

namespace terrace::cli {

const CommandDef kCacheCommand{
    "cache",
    "info|clear",
    "Shows (info) or empties (clear) the disk cache of compiled tier-1 objects.",
    {
        {"--dir", "DIR", "the cache folder (default: $TERRACE_CACHE_DIR, else ~/.cache/terrace)"},
        {"--json", "FILE", "write what info or clear found as JSON"},
    },
    1,
    1,
    "action (info or clear)",
    "The cache keeps compiled tier-1 objects across processes, at most TERRACE_CACHE_MAX_MB MiB\n"
    "(default 512); past that the least recently used entries are removed. TERRACE_CACHE_DIR set\n"
    "to an empty value turns it off.\n",
};

int cmd_cache(const ParsedArgs& args) {
  const std::string& action = args.operands[0];
  if (action != "info" && action != "clear")
    throw UsageError{"cache expects info or clear, got '" + action + "'"};
  const std::string json_path = args.get("--json").value_or("");
  if (args.get("--json") && json_path.empty()) throw UsageError{"--json needs a file name"};
  Json j;
  j["action"] = action;
  auto done = [&](int rc) {
    if (!json_path.empty()) write_json_file(json_path, j);
    return rc;
  };
#ifndef TERRACE_HAVE_CPU_JIT
  std::printf("this build has no tier-1 JIT, hence no code cache\n");
  j["enabled"] = false;
  j["why"] = "this build has no tier-1 JIT";
  return done(0);
#else
  std::filesystem::path dir = args.get("--dir") ? std::filesystem::path(*args.get("--dir"))
                                                : jit::CodeCache::default_dir();
  jit::CodeCache cache(dir);
  j["dir"] = cache.dir().string();
  j["enabled"] = cache.enabled();
  if (!cache.enabled()) {
    std::printf("the code cache is off (TERRACE_CACHE_DIR is set and empty)\n");
    j["why"] = "TERRACE_CACHE_DIR is set and empty";
    return done(0);
  }
  auto mib = [](uint64_t b) { return double(b) / double(1 << 20); };
  j["max_bytes"] = cache.max_bytes();
  if (action == "info") {
    jit::CodeCache::Info info = cache.info();
    std::printf("code cache: %s\n", cache.dir().c_str());
    std::printf("entries: %llu, %.2f MiB of at most %.0f MiB (TERRACE_CACHE_MAX_MB)\n",
                (unsigned long long)info.entries, mib(info.bytes), mib(cache.max_bytes()));
    j["entries"] = info.entries;
    j["bytes"] = info.bytes;
    return done(0);
  }
  jit::CodeCache::Info removed = cache.clear();
  std::printf("code cache: %s: removed %llu entries, %.2f MiB\n", cache.dir().c_str(),
              (unsigned long long)removed.entries, mib(removed.bytes));
  jit::CodeCache::Info left = cache.info();
  j["removed_entries"] = removed.entries;
  j["removed_bytes"] = removed.bytes;
  j["entries_left"] = left.entries;
  if (left.entries) {
    std::printf("%llu entries could not be removed\n", (unsigned long long)left.entries);
    return done(1);
  }
  return done(0);
#endif
}

}  // namespace terrace::cli
