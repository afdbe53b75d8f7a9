// CpuJit: tier 1's one LLJIT owner. C++ source is compiled in-process by Clang, optimised with
// LLVM's O3 pipeline for the host CPU, and linked into the process. No LLVM header leaks from here.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "jit/code_cache.h"

namespace terrace::jit {

// The signature of every tier-1 kernel (kernels/render_c.h, Dialect::Cpp).
using CpuKernelFn = void (*)(void** buffers, int64_t begin, int64_t end);

// Where compile time went, in milliseconds.
struct CompileTimings {
  double frontend_ms = 0;  // Clang: parse and emit LLVM IR
  double optimize_ms = 0;  // the O3 module pipeline (loop and SLP vectorisation included)
  double codegen_ms = 0;   // machine code into an in-memory object file
  double link_ms = 0;      // JIT linking and symbol lookup
  // CPU time of the compiling thread over all phases: the wall times above include waiting for
  // the CPU on a loaded machine, this does not.
  double cpu_ms = 0;
  bool cached = false;  // the object came from the disk cache: no frontend, optimiser or codegen
  double total_ms() const { return frontend_ms + optimize_ms + codegen_ms + link_ms; }
};

// One compiled source, linked in its own JITDylib. Its code stays valid while the handle lives;
// destroying the handle removes the code from the JIT.
class CompiledCode {
 public:
  ~CompiledCode();
  CompiledCode(const CompiledCode&) = delete;
  CompiledCode& operator=(const CompiledCode&) = delete;

  const std::string& name() const { return name_; }
  // The address of a symbol looked up at compile time (InvalidArgument if it was not asked for).
  void* symbol(const std::string& name) const;
  CpuKernelFn kernel(const std::string& name) const {
    return reinterpret_cast<CpuKernelFn>(symbol(name));
  }
  const CompileTimings& timings() const { return timings_; }
  // Removes the object's disk cache entry (validation found the code wrong): the next process
  // compiles the source again instead of loading the same object. Nothing when it has none.
  void forget_cached() const;

  struct Impl;  // the JIT-side state (resource tracker)

 private:
  friend class CpuJit;
  CompiledCode() = default;
  std::string name_;
  std::vector<std::pair<std::string, void*>> symbols_;
  CompileTimings timings_;
  std::filesystem::path cache_file_;  // the disk cache entry it was loaded from or stored to
  std::unique_ptr<Impl> impl_;
};

class CpuJit {
 public:
  // Sets up the JIT for the host CPU. Throws CompileFailed when LLVM cannot target the host.
  static std::unique_ptr<CpuJit> create();
  // The process-wide JIT, created on first use.
  static CpuJit& global();
  ~CpuJit();

  // Compiles `source` (C++20; no #include needed) named `name` and looks up `symbols`
  // (extern "C" names). Thread-safe: any number of compiles run concurrently; only linking is
  // serialised. Throws CompileFailed carrying Clang's diagnostics. Honours TERRACE_DUMP_DIR
  // (writes <dir>/<name>.cpp, and <name>.o once compiled) and TERRACE_FAULT=compile-fail:cpu (fails every compile).
  // The object is looked up in, and stored to, `cache` (default: this JIT's, at
  // CodeCache::default_dir()), keyed by the source, the target, LLVM's version and the flags.
  std::shared_ptr<CompiledCode> compile(const std::string& name, const std::string& source,
                                        const std::vector<std::string>& symbols,
                                        const CodeCache* cache = nullptr);

  // "x86_64-pc-linux-gnu znver3 +avx2,...": what the code is specialised to (a cache key part).
  std::string target_description() const;

  struct Impl;

 private:
  explicit CpuJit(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

// TERRACE_DUMP_DIR: writes `bytes` as `file` there (generated source and objects, for reading and
// for repros; both tiers). Best effort: a dump that cannot be written must not fail the compile.
void dump_file(const std::string& file, std::string_view bytes);

}  // namespace terrace::jit
