// Tier 1 backend: region -> fusion groups -> kernel IR -> C++ -> Clang/ORC (terrace_jit).
#include "tiers/backend.h"

namespace terrace {

#ifndef TERRACE_HAVE_CPU_JIT
// Built without the JIT library: no tier-1 backend, every region stays on the interpreter.
std::unique_ptr<Backend> make_cpu_backend() { return nullptr; }
#endif

}  // namespace terrace
