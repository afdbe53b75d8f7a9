// libterrace_clang_jit.so: Clang (in-process, on an in-memory buffer) -> LLVM module -> O3 ->
// object file -> LLJIT, behind jit/cpu/clang_jit_plugin.h's C ABI. Each compile owns its LLVMContext,
// CompilerInstance and TargetMachine, so compiles run in parallel; the LLJIT (one per
// TerraceClangJit) only links, under a mutex. Nothing of Terrace's core is linked in.
#include "jit/cpu/clang_jit_plugin.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>

#include "clang/Basic/DiagnosticOptions.h"
#include "clang/CodeGen/CodeGenAction.h"
#include "clang/Frontend/CompilerInstance.h"
#include "clang/Frontend/CompilerInvocation.h"
#include "clang/Frontend/TextDiagnosticPrinter.h"
#include "clang/Lex/PreprocessorOptions.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SmallVectorMemoryBuffer.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Target/TargetMachine.h"

struct TerraceClangJit {
  std::unique_ptr<llvm::orc::LLJIT> lljit;
  llvm::orc::JITTargetMachineBuilder host;
  std::vector<std::string> cc1_args;  // everything but the input file
  std::string target, key_prefix;
  std::mutex link_mutex;
  uint64_t next_dylib = 0;
  explicit TerraceClangJit(llvm::orc::JITTargetMachineBuilder jtmb) : host(std::move(jtmb)) {}
};

namespace {

// A failure inside the plugin: its message goes back through *error.
struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

char* copy_string(const std::string& s) {
  char* p = static_cast<char*>(std::malloc(s.size() + 1));
  if (p) std::memcpy(p, s.c_str(), s.size() + 1);
  return p;
}

// Runs `body`, turning a Failure (or anything else thrown) into a nonzero result and *error.
template <typename Body>
int guarded(char** error, Body body) {
  try {
    body();
    return 0;
  } catch (const std::exception& e) {
    *error = copy_string(e.what());
  } catch (...) {
    *error = copy_string("unknown exception in the Clang JIT");
  }
  return 1;
}

std::string take_message(llvm::Error err) { return llvm::toString(std::move(err)); }

template <typename T>
T take_or_fail(llvm::Expected<T> value, const std::string& what) {
  if (!value) throw Failure(what + ": " + take_message(value.takeError()));
  if constexpr (std::is_reference_v<T>) return *value;
  else return std::move(*value);
}

double lap_ms(std::chrono::steady_clock::time_point& start) {
  auto now = std::chrono::steady_clock::now();
  double ms = std::chrono::duration<double, std::milli>(now - start).count();
  start = now;
  return ms;
}

void initialize_llvm_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    llvm::InitializeNativeTargetAsmParser();
  });
}

std::unique_ptr<llvm::Module> frontend(const TerraceClangJit& jit, const std::string& name, const std::string& source,
                                       llvm::LLVMContext& ctx) {
  std::string diagnostics;
  llvm::raw_string_ostream diag_os(diagnostics);
  auto diag_opts = llvm::makeIntrusiveRefCnt<clang::DiagnosticOptions>();
  clang::CompilerInstance ci;
  ci.setVerboseOutputStream(diag_os);  // "N warnings generated." goes with the diagnostics
  ci.createDiagnostics(new clang::TextDiagnosticPrinter(diag_os, diag_opts.get()),
                       /*ShouldOwnClient=*/true);
  const std::string file = name + ".cpp";
  std::vector<const char*> args;
  for (const std::string& a : jit.cc1_args) args.push_back(a.c_str());
  args.push_back(file.c_str());
  if (!clang::CompilerInvocation::CreateFromArgs(ci.getInvocation(), args, ci.getDiagnostics()))
    throw Failure(name + ": bad compiler arguments: " + diagnostics);
  // The source never touches the disk: the file name is remapped to the in-memory buffer.
  ci.getPreprocessorOpts().addRemappedFile(file, llvm::MemoryBuffer::getMemBufferCopy(source, file).release());
  clang::EmitLLVMOnlyAction action(&ctx);
  if (!ci.ExecuteAction(action)) throw Failure(name + ": clang: " + diagnostics);
  std::unique_ptr<llvm::Module> m = action.takeModule();
  if (!m) throw Failure(name + ": clang produced no module: " + diagnostics);
  return m;
}

void optimize(llvm::Module& m, llvm::TargetMachine& tm) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PipelineTuningOptions tuning;
  tuning.LoopVectorization = true;
  tuning.SLPVectorization = true;
  tuning.LoopInterleaving = true;
  tuning.LoopUnrolling = true;
  llvm::PassBuilder pb(&tm, tuning);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3).run(m, mam);
}

llvm::SmallVector<char, 0> codegen(const std::string& name, llvm::Module& m, llvm::TargetMachine& tm) {
  llvm::SmallVector<char, 0> object;
  llvm::raw_svector_ostream os(object);
  llvm::legacy::PassManager pm;
  if (tm.addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::ObjectFile))
    throw Failure(name + ": the target cannot emit object files");
  pm.run(m);
  return object;
}

TerraceClangJit* create(char** error) {
  TerraceClangJit* made = nullptr;
  guarded(error, [&] {
    initialize_llvm_once();
    auto jtmb = take_or_fail(llvm::orc::JITTargetMachineBuilder::detectHost(), "detecting the host");
    jtmb.setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
    jtmb.setRelocationModel(llvm::Reloc::PIC_);  // calls into libm go through the JIT's stubs
    jtmb.setCodeModel(llvm::CodeModel::Small);
    auto jit = std::make_unique<TerraceClangJit>(jtmb);
    jit->lljit = take_or_fail(llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(jtmb).create(), "creating the LLJIT");
    // cc1 arguments: host triple, CPU and features; O3-quality IR (no optnone) but no LLVM passes,
    // which optimize() runs itself. No -ffast-math: NaN and Inf must survive. No headers at all.
    const llvm::Triple& triple = jtmb.getTargetTriple();
    jit->cc1_args = {"-triple", triple.str(), "-target-cpu", jtmb.getCPU(), "-O3",
                     "-disable-llvm-passes", "-std=c++20", "-ffp-contract=on",
                     "-nostdsysteminc", "-nobuiltininc", "-fno-rtti", "-w"};
    for (const std::string& f : jtmb.getFeatures().getFeatures()) {
      jit->cc1_args.push_back("-target-feature");
      jit->cc1_args.push_back(f);
    }
    jit->target = triple.str() + " " + jtmb.getCPU() + " " + jtmb.getFeatures().getString();
    jit->key_prefix = "terrace tier-1 object 1\nLLVM " LLVM_VERSION_STRING "\n" + jit->target + "\n";
    for (const std::string& a : jit->cc1_args) jit->key_prefix += a + " ";
    jit->key_prefix += "\n";
    made = jit.release();
  });
  return made;
}

void destroy(TerraceClangJit* jit) { delete jit; }

const char* target_description(const TerraceClangJit* jit) { return jit->target.c_str(); }
const char* cache_key_prefix(const TerraceClangJit* jit) { return jit->key_prefix.c_str(); }

int compile(TerraceClangJit* jit, const char* name_c, const char* source, size_t source_size, char** object,
            size_t* size, double* timings_ms, char** error) {
  return guarded(error, [&] {
    const std::string name = name_c;
    auto clock = std::chrono::steady_clock::now();
    llvm::LLVMContext ctx;
    std::unique_ptr<llvm::Module> module = frontend(*jit, name, std::string(source, source_size), ctx);
    timings_ms[0] = lap_ms(clock);
    // Optimisation remarks (a loop that did not vectorise) are not errors: keep them off stderr.
    ctx.setDiagnosticHandlerCallBack([](const llvm::DiagnosticInfo*, void*) {}, nullptr);
    // A TargetMachine is not thread-safe but is reusable: one per compiling thread saves its
    // setup (a few ms) on every compile. Every TerraceClangJit targets the host with the same options.
    thread_local std::unique_ptr<llvm::TargetMachine> tm;
    if (!tm) tm = take_or_fail(jit->host.createTargetMachine(), name + ": creating the target machine");
    module->setDataLayout(tm->createDataLayout());
    module->setTargetTriple(tm->getTargetTriple().str());
    optimize(*module, *tm);
    timings_ms[1] = lap_ms(clock);
    llvm::SmallVector<char, 0> bytes = codegen(name, *module, *tm);
    timings_ms[2] = lap_ms(clock);
    *object = static_cast<char*>(std::malloc(bytes.size() ? bytes.size() : 1));
    if (!*object) throw std::bad_alloc();
    std::memcpy(*object, bytes.data(), bytes.size());
    *size = bytes.size();
  });
}

int link(TerraceClangJit* jit, const char* name_c, const char* object, size_t size, const char* const* symbols,
         size_t count, void** addresses, void** dylib_out, char** error) {
  return guarded(error, [&] {
    const std::string name = name_c;
    std::lock_guard<std::mutex> lock(jit->link_mutex);
    auto& lljit = *jit->lljit;
    const std::string dylib_name = name + "#" + std::to_string(jit->next_dylib++);
    llvm::orc::JITDylib& dylib = take_or_fail(lljit.createJITDylib(dylib_name), name + ": new JITDylib");
    *dylib_out = &dylib;  // the caller unlinks it, whatever happens next
    auto buffer = llvm::MemoryBuffer::getMemBufferCopy(llvm::StringRef(object, size), name);
    if (llvm::Error err = lljit.addObjectFile(dylib, std::move(buffer)))
      throw Failure(name + ": adding the object: " + take_message(std::move(err)));
    for (size_t i = 0; i < count; ++i) {
      llvm::orc::ExecutorAddr addr = take_or_fail(lljit.lookup(dylib, symbols[i]), name + ": linking " + symbols[i]);
      addresses[i] = addr.toPtr<void*>();
    }
  });
}

void unlink(TerraceClangJit* jit, void* dylib) {
  std::lock_guard<std::mutex> lock(jit->link_mutex);
  if (llvm::Error err = jit->lljit->getExecutionSession().removeJITDylib(*static_cast<llvm::orc::JITDylib*>(dylib)))
    llvm::consumeError(std::move(err));
}

void free_memory(void* p) { std::free(p); }

const TerraceClangJitApi kApi{kTerraceClangJitAbi, create, destroy, target_description, cache_key_prefix, compile, link,
                              unlink, free_memory};

}  // namespace

extern "C" __attribute__((visibility("default"))) const TerraceClangJitApi* terrace_clang_jit_api(void) {
  return &kApi;
}
