// CpuJit: tier 1's compiles through the Clang JIT plugin (jit/cpu/clang_jit_plugin.h), loaded with
// dlopen on the first compile; the disk cache, dumps and fault injection stay here. Compiles run
// in parallel; the plugin links under its own mutex.
#include "jit/cpu/cpu_jit.h"

#include <dlfcn.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "interp/error.h"
#include "interp/exit_order.h"
#include "interp/log.h"
#include "jit/cpu/clang_jit_plugin.h"

namespace terrace::jit {
namespace {

double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) * 1e-6;
}

// The plugin's file: TERRACE_CLANG_JIT_PLUGIN; else terrace/ beside the library holding this code
// (an installed libterrace.so in P/lib), the program's own folder, lib/terrace/ beside it (the
// terrace CLI in P/bin); else the build tree's and the install prefix's, as configured.
std::vector<std::string> plugin_candidates() {
  std::vector<std::string> paths;
  if (const char* env = std::getenv("TERRACE_CLANG_JIT_PLUGIN"); env && *env) return {env};
  const std::string file = "libterrace_clang_jit.so";
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&plugin_candidates), &info) && info.dli_fname) {
    std::error_code ec;
    const std::filesystem::path self = std::filesystem::canonical(info.dli_fname, ec);
    if (!ec) {
      paths.push_back((self.parent_path() / "terrace" / file).string());
      paths.push_back((self.parent_path() / file).string());  // copied beside the program (a bundle)
      paths.push_back((self.parent_path().parent_path() / "lib" / "terrace" / file).string());
    }
  }
#ifdef TERRACE_CLANG_JIT_BUILD_PATH
  paths.push_back(TERRACE_CLANG_JIT_BUILD_PATH);
#endif
#ifdef TERRACE_CLANG_JIT_INSTALL_PATH
  paths.push_back(TERRACE_CLANG_JIT_INSTALL_PATH);
#endif
  return paths;
}

// The plugin's functions, loaded once (never unloaded: compiled code lives in its JIT).
const TerraceClangJitApi& plugin() {
  static const TerraceClangJitApi* api = [] {
    std::string tried;
    for (const std::string& path : plugin_candidates()) {
      if (!std::filesystem::exists(path)) {
        tried += "\n  " + path + ": not found";
        continue;
      }
      void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!handle) {
        tried += "\n  " + path + ": " + dlerror();
        continue;
      }
      auto entry = reinterpret_cast<const TerraceClangJitApi* (*)()>(dlsym(handle, "terrace_clang_jit_api"));
      const TerraceClangJitApi* found = entry ? entry() : nullptr;
      if (!found || found->abi_version != kTerraceClangJitAbi) {
        tried += "\n  " + path + ": not a Terrace Clang JIT plugin of ABI " + std::to_string(kTerraceClangJitAbi);
        continue;
      }
      log(LogLevel::Debug, "tier 1: Clang JIT plugin ", path);
      at_exit_refresh();  // LLVM's statics now exist: stop compiles at exit before they go
      return found;
    }
    fail(ErrorCode::CompileFailed, "tier 1 cannot load its Clang JIT plugin (libterrace_clang_jit.so; ",
         "TERRACE_CLANG_JIT_PLUGIN names another):", tried);
  }();
  return *api;
}

// A message the plugin allocated, as a string (freed).
std::string take(char* message) {
  std::string s = message ? message : "(no message)";
  plugin().free_memory(message);
  return s;
}

}  // namespace

void dump_file(const std::string& file, std::string_view bytes) {
  const char* dir = std::getenv("TERRACE_DUMP_DIR");
  if (!dir || !*dir) return;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::ofstream(std::filesystem::path(dir) / file, std::ios::binary)
      .write(bytes.data(), std::streamsize(bytes.size()));
}

struct CpuJit::Impl {
  TerraceClangJit* jit = nullptr;
  CodeCache cache{CodeCache::default_dir()};
  ~Impl() {
    if (jit) plugin().destroy(jit);
  }
};

struct CompiledCode::Impl {
  std::shared_ptr<CpuJit::Impl> jit;
  void* dylib = nullptr;
};

CompiledCode::~CompiledCode() {
  // Removing frees the code and its memory.
  if (impl_ && impl_->dylib) plugin().unlink(impl_->jit->jit, impl_->dylib);
}

void CompiledCode::forget_cached() const {
  std::error_code ec;
  if (!cache_file_.empty() && std::filesystem::remove(cache_file_, ec))
    log(LogLevel::Info, "code cache: removed ", cache_file_.string(), " (", name_, " failed validation)");
}

void* CompiledCode::symbol(const std::string& name) const {
  for (const auto& [n, addr] : symbols_)
    if (n == name) return addr;
  fail(ErrorCode::InvalidArgument, "compiled code ", name_, " has no looked-up symbol ", name);
}

std::unique_ptr<CpuJit> CpuJit::create() {
  const TerraceClangJitApi& api = plugin();
  auto impl = std::make_shared<Impl>();
  char* error = nullptr;
  impl->jit = api.create(&error);
  if (!impl->jit) fail(ErrorCode::CompileFailed, "tier 1's JIT: ", take(error));
  return std::unique_ptr<CpuJit>(new CpuJit(std::move(impl)));
}

// Never destroyed: a compile a session abandoned (TierManager's destructor) may still run in it
// while the process exits and static objects are destroyed.
CpuJit& CpuJit::global() {
  static CpuJit* jit = create().release();
  return *jit;
}

CpuJit::CpuJit(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
CpuJit::~CpuJit() = default;

std::string CpuJit::target_description() const { return plugin().target_description(impl_->jit); }

std::shared_ptr<CompiledCode> CpuJit::compile(const std::string& name, const std::string& source,
                                              const std::vector<std::string>& symbols,
                                              const CodeCache* cache) {
  dump_file(name + ".cpp", source);
  if (fault_enabled("compile-fail:cpu"))
    fail(ErrorCode::CompileFailed, name, ": injected by TERRACE_FAULT=compile-fail:cpu");

  const TerraceClangJitApi& api = plugin();
  std::shared_ptr<CompiledCode> code(new CompiledCode());
  code->name_ = name;
  auto clock = std::chrono::steady_clock::now();
  const double cpu_start = thread_cpu_ms();
  const CodeCache& disk = cache ? *cache : impl_->cache;
  const std::string key = disk.enabled() ? api.cache_key_prefix(impl_->jit) + source : std::string();
  std::string object;
  if (disk.enabled()) code->cache_file_ = disk.path_of(key);
  if (std::optional<std::string> hit = disk.enabled() ? disk.load(key) : std::nullopt) {
    object = std::move(*hit);
    code->timings_.cached = true;
  } else {
    char* bytes = nullptr;
    size_t size = 0;
    double ms[3] = {0, 0, 0};
    char* error = nullptr;
    if (api.compile(impl_->jit, name.c_str(), source.data(), source.size(), &bytes, &size, ms, &error))
      fail(ErrorCode::CompileFailed, take(error));
    object.assign(bytes, size);
    api.free_memory(bytes);
    code->timings_.frontend_ms = ms[0];
    code->timings_.optimize_ms = ms[1];
    code->timings_.codegen_ms = ms[2];
    if (disk.enabled()) disk.store(key, object);
  }
  dump_file(name + ".o", object);

  clock = std::chrono::steady_clock::now();
  std::vector<const char*> names;
  for (const std::string& s : symbols) names.push_back(s.c_str());
  std::vector<void*> addresses(symbols.size(), nullptr);
  code->impl_ = std::make_unique<CompiledCode::Impl>();
  code->impl_->jit = impl_;
  char* error = nullptr;
  if (api.link(impl_->jit, name.c_str(), object.data(), object.size(), names.data(), names.size(), addresses.data(),
               &code->impl_->dylib, &error))
    fail(ErrorCode::CompileFailed, take(error));
  for (size_t i = 0; i < symbols.size(); ++i) code->symbols_.push_back({symbols[i], addresses[i]});
  code->timings_.link_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - clock).count();
  code->timings_.cpu_ms = thread_cpu_ms() - cpu_start;
  return code;
}

}  // namespace terrace::jit
