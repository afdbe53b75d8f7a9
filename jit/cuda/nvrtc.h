// NVRTC: CUDA C source -> cubin for one GPU architecture, without a GPU. libnvrtc is dlopen'd (a
// binary runs where the toolkit is absent); NVRTC's cost is mostly per program, so callers batch
// every kernel of a region into one source (DESIGN.md, "Tier 2").
#pragma once
#include <string>
#include <vector>

namespace terrace::jit {

// True when NVRTC can be loaded here; otherwise false and `why` (if given) says what is missing.
bool nvrtc_available(std::string* why = nullptr);

// "13.0": the loaded NVRTC's version (part of the disk cache key). Throws like nvrtc_compile.
std::string nvrtc_version();

// Compiles `source` (a self-contained translation unit, kernels declared extern "C") to a cubin
// for `arch` ("sm_90"). `options` are extra NVRTC options. Throws Error(CompileFailed) with NVRTC's
// log and the program's name on failure, Error(NotImplemented) when NVRTC is not available.
std::vector<char> nvrtc_compile(const std::string& source, const std::string& arch,
                                const std::string& program_name = "terrace.cu",
                                const std::vector<std::string>& options = {});

}  // namespace terrace::jit
