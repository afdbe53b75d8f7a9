// terrace cache: what the disk code cache holds (info) and emptying it (clear).
#include <cstdio>

#include "tiers/options.h"
#include "tools/cli_util.h"

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
#ifndef TERRACE_HAVE_CPU_JIT
  std::printf("this build has no tier-1 JIT, hence no code cache\n");
  return 0;
#else
  std::filesystem::path dir = args.get("--dir") ? std::filesystem::path(*args.get("--dir"))
                                                : jit::CodeCache::default_dir();
  jit::CodeCache cache(dir);
  if (!cache.enabled()) {
    std::printf("the code cache is off (TERRACE_CACHE_DIR is set and empty)\n");
    return 0;
  }
  auto mib = [](uint64_t b) { return double(b) / double(1 << 20); };
  if (action == "info") {
    jit::CodeCache::Info info = cache.info();
    std::printf("code cache: %s\n", cache.dir().c_str());
    std::printf("entries: %llu, %.2f MiB of at most %.0f MiB (TERRACE_CACHE_MAX_MB)\n",
                (unsigned long long)info.entries, mib(info.bytes), mib(cache.max_bytes()));
    return 0;
  }
  jit::CodeCache::Info removed = cache.clear();
  std::printf("code cache: %s: removed %llu entries, %.2f MiB\n", cache.dir().c_str(),
              (unsigned long long)removed.entries, mib(removed.bytes));
  jit::CodeCache::Info left = cache.info();
  if (left.entries) {
    std::printf("%llu entries could not be removed\n", (unsigned long long)left.entries);
    return 1;
  }
  return 0;
#endif
}

}  // namespace terrace::cli
