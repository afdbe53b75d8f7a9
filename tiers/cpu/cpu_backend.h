// Tier 1: fused CPU kernels through Clang and LLVM ORC, library ops through oneDNN; registered in
// tiers/ladder.cpp.
#pragma once
#include <memory>
#include <string>

#include "tiers/backend.h"

namespace terrace {

// The tier-1 backend. `cache_dir`: where compiled objects are kept across processes
// (Options::cache_dir; empty: the JIT's default, $TERRACE_CACHE_DIR or ~/.cache/terrace). nullptr,
// with the reason in `why`, in a build without the JIT.
std::unique_ptr<Backend> make_cpu_backend(const std::string& cache_dir = "", std::string* why = nullptr);

}  // namespace terrace
