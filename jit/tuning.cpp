#include "jit/tuning.h"

#include "jit/code_cache.h"

namespace terrace::jit {
namespace {

thread_local double tuning_ms = 0;

std::string record_key(std::string_view key) { return "tuning|" + std::string(key); }

}  // namespace

double tuning_ms_on_this_thread() { return tuning_ms; }

TuningTimer::~TuningTimer() {
  tuning_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
}

std::optional<std::string> find_tuned(const CodeCache* cache, std::string_view key) {
  if (!cache || !cache->enabled()) return std::nullopt;
  return cache->load(record_key(key));
}

void keep_tuned(const CodeCache* cache, std::string_view key, std::string_view choice) {
  if (cache && cache->enabled()) cache->store(record_key(key), choice);
}

}  // namespace terrace::jit
