// Loading a shared library at run time through a documented search order, for the CUDA libraries
// that tier 2 dlopens (NVRTC, libcuda, cuBLASLt): a binary built with them runs where they are absent.
#pragma once
#include <string>
#include <vector>

namespace terrace::jit {

// The search order for one library.
struct LibrarySearch {
  std::string env_var;               // an override: a file, or a folder holding one of `sonames`
  std::vector<std::string> sonames;  // tried through the dynamic loader's own search (ld.so.cache)
  std::vector<std::string> dirs;     // then each soname in each of these folders
};

// The handle of the first candidate that loads (RTLD_NOW | RTLD_LOCAL), with its path in `path`;
// nullptr when none does, with `why` holding the first candidate's dlerror and the names of the
// others tried. A set
// override that fails to load is an answer in itself: nothing else is tried.
void* open_library(const LibrarySearch& search, std::string* path, std::string* why);

// dlsym, nullptr when the library lacks the symbol.
void* library_symbol(void* handle, const char* name);

}  // namespace terrace::jit
