// jit/cuda/nvrtc.h: NVRTC dlopen'd and driven to cubin.
//
// libnvrtc's search order: $TERRACE_NVRTC_PATH (the library, or a folder holding it), then the
// sonames libnvrtc.so.13, libnvrtc.so.12 and libnvrtc.so through the dynamic loader's search, then
// the same names in /usr/local/cuda/lib64. Only nvrtc.h is used at build time, for the types.
#include "jit/cuda/nvrtc.h"

#include <nvrtc.h>

#include <mutex>

#include "interp/error.h"
#include "jit/cuda/dynlib.h"

namespace terrace::jit {

namespace {

struct Nvrtc {
  std::string path;  // the library loaded
  std::string why;   // why it is not, where it is not
  const char* (*GetErrorString)(nvrtcResult) = nullptr;
  nvrtcResult (*Version)(int*, int*) = nullptr;
  nvrtcResult (*CreateProgram)(nvrtcProgram*, const char*, const char*, int, const char* const*,
                               const char* const*) = nullptr;
  nvrtcResult (*DestroyProgram)(nvrtcProgram*) = nullptr;
  nvrtcResult (*CompileProgram)(nvrtcProgram, int, const char* const*) = nullptr;
  nvrtcResult (*GetProgramLogSize)(nvrtcProgram, size_t*) = nullptr;
  nvrtcResult (*GetProgramLog)(nvrtcProgram, char*) = nullptr;
  nvrtcResult (*GetCUBINSize)(nvrtcProgram, size_t*) = nullptr;
  nvrtcResult (*GetCUBIN)(nvrtcProgram, char*) = nullptr;
  bool ok() const { return why.empty(); }
};

template <typename F>
bool bind(void* lib, F*& fn, const char* name, std::string& why) {
  fn = reinterpret_cast<F*>(library_symbol(lib, name));
  if (!fn && why.empty()) why = std::string("libnvrtc lacks ") + name;
  return fn != nullptr;
}

const Nvrtc& nvrtc() {
  static Nvrtc n;
  static std::once_flag once;
  std::call_once(once, [] {
    LibrarySearch search{"TERRACE_NVRTC_PATH",
                         {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"},
                         {"/usr/local/cuda/lib64"}};
    std::string why;
    void* lib = open_library(search, &n.path, &why);
    if (!lib) {
      n.why = "libnvrtc: " + why;
      return;
    }
    bind(lib, n.GetErrorString, "nvrtcGetErrorString", n.why);
    bind(lib, n.Version, "nvrtcVersion", n.why);
    bind(lib, n.CreateProgram, "nvrtcCreateProgram", n.why);
    bind(lib, n.DestroyProgram, "nvrtcDestroyProgram", n.why);
    bind(lib, n.CompileProgram, "nvrtcCompileProgram", n.why);
    bind(lib, n.GetProgramLogSize, "nvrtcGetProgramLogSize", n.why);
    bind(lib, n.GetProgramLog, "nvrtcGetProgramLog", n.why);
    bind(lib, n.GetCUBINSize, "nvrtcGetCUBINSize", n.why);
    bind(lib, n.GetCUBIN, "nvrtcGetCUBIN", n.why);
    if (!n.why.empty()) n.why += " (" + n.path + ")";
  });
  return n;
}

const Nvrtc& loaded() {
  const Nvrtc& n = nvrtc();
  TERRACE_CHECK(n.ok(), NotImplemented, "NVRTC is not available: ", n.why);
  return n;
}

// Every NVRTC call goes through this: the call's name, NVRTC's string for its result and the
// caller's `context_` (which program, for which arch).
#define TERRACE_NVRTC_CHECK(n, call, ...)                                                     \
  do {                                                                                        \
    nvrtcResult r_ = (n).call(__VA_ARGS__);                                                   \
    if (r_ != NVRTC_SUCCESS)                                                                  \
      ::terrace::fail(::terrace::ErrorCode::CompileFailed, "nvrtc" #call ": ",                \
                      (n).GetErrorString(r_), context_);                                      \
  } while (0)

// Destroys the program on every way out.
struct Program {
  const Nvrtc& n;
  nvrtcProgram p = nullptr;
  ~Program() {
    if (p) n.DestroyProgram(&p);
  }
};

}  // namespace

bool nvrtc_available(std::string* why) {
  const Nvrtc& n = nvrtc();
  if (!n.ok() && why) *why = n.why;
  return n.ok();
}

std::string nvrtc_version() {
  const Nvrtc& n = loaded();
  int major = 0, minor = 0;
  std::string context_;
  TERRACE_NVRTC_CHECK(n, Version, &major, &minor);
  return std::to_string(major) + "." + std::to_string(minor);
}

std::vector<char> nvrtc_compile(const std::string& source, const std::string& arch,
                                const std::string& program_name,
                                const std::vector<std::string>& options) {
  const Nvrtc& n = loaded();
  TERRACE_CHECK(arch.rfind("sm_", 0) == 0, InvalidArgument, "nvrtc_compile: arch '", arch,
                "' is not a real architecture (sm_XY): a cubin needs one");
  std::string context_ = " (program " + program_name + ", " + arch + ")";
  Program prog{n};
  TERRACE_NVRTC_CHECK(n, CreateProgram, &prog.p, source.c_str(), program_name.c_str(), 0, nullptr,
                      nullptr);
  std::vector<std::string> opts = {"--gpu-architecture=" + arch, "--std=c++17"};
  opts.insert(opts.end(), options.begin(), options.end());
  std::vector<const char*> argv;
  for (const auto& o : opts) argv.push_back(o.c_str());
  nvrtcResult r = n.CompileProgram(prog.p, int(argv.size()), argv.data());
  if (r != NVRTC_SUCCESS) {
    size_t size = 0;
    std::string log;
    if (n.GetProgramLogSize(prog.p, &size) == NVRTC_SUCCESS && size > 1) {
      log.resize(size);
      if (n.GetProgramLog(prog.p, log.data()) != NVRTC_SUCCESS) log.clear();
      while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
    }
    std::string opt_list;
    for (const auto& o : opts) opt_list += " " + o;
    fail(ErrorCode::CompileFailed, "nvrtcCompileProgram: ", n.GetErrorString(r), context_,
         "; options:", opt_list, "\n", log.empty() ? "(no log)" : log);
  }
  size_t size = 0;
  TERRACE_NVRTC_CHECK(n, GetCUBINSize, prog.p, &size);
  std::vector<char> cubin(size);
  TERRACE_NVRTC_CHECK(n, GetCUBIN, prog.p, cubin.data());
  return cubin;
}

}  // namespace terrace::jit
