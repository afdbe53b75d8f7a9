// The C ABI between tier 1's JIT (jit/cpu/cpu_jit.cpp, in every Terrace binary) and its Clang and LLVM
// half (jit/cpu/clang_jit_plugin.cpp, libterrace_clang_jit.so), which the JIT loads with dlopen on its
// first compile. LLVM's and Clang's libraries run hundreds of static constructors when they are
// mapped: 58 MB of a process stayed resident before a single kernel was compiled (smaps of
// `terrace run --tier interp` on the MLP: libLLVM 42.6 MB, libclang-cpp 15.4 MB). A session whose
// regions are all library calls (oneDNN) never loads them.
//
// Plain C types only: no exception, allocation or C++ object crosses the boundary. A function that
// fails returns nonzero (or null) and sets *error to a message the caller frees with free_memory.
#pragma once
#include <cstddef>

extern "C" {

struct TerraceClangJit;  // one LLJIT, targeting the host

struct TerraceClangJitApi {
  int abi_version;  // kTerraceClangJitAbi
  TerraceClangJit* (*create)(char** error);
  void (*destroy)(TerraceClangJit* jit);  // after every JITDylib it linked is unlinked
  // What compiled code depends on: the host's triple, CPU and features; and that plus LLVM's
  // version and the compiler's flags (the disk cache's key). Owned by the JIT.
  const char* (*target_description)(const TerraceClangJit* jit);
  const char* (*cache_key_prefix)(const TerraceClangJit* jit);
  // C++ source to an object file (*object: `size` bytes, free with free_memory); timings_ms:
  // frontend, optimisation, code generation. Thread-safe.
  int (*compile)(TerraceClangJit* jit, const char* name, const char* source, size_t source_size, char** object,
                 size_t* size, double* timings_ms, char** error);
  // Links an object file into a new JITDylib (*dylib) and looks up `count` symbols into
  // addresses[]. Thread-safe (linking is serialised inside).
  int (*link)(TerraceClangJit* jit, const char* name, const char* object, size_t size, const char* const* symbols,
              size_t count, void** addresses, void** dylib, char** error);
  // Removes a JITDylib and frees its code (a failure leaves it loaded: a leak, not a wrong answer).
  void (*unlink)(TerraceClangJit* jit, void* dylib);
  void (*free_memory)(void* p);
};

// The plugin's one exported symbol.
const TerraceClangJitApi* terrace_clang_jit_api(void);
}

inline constexpr int kTerraceClangJitAbi = 1;
