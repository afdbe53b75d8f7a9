// CpuJit: Clang (in-process, on an in-memory buffer) -> LLVM module -> O3 -> object file -> LLJIT.
// Each compile owns its LLVMContext, CompilerInstance and TargetMachine, so compiles run in
// parallel; the LLJIT (one per CpuJit) only links, under a mutex.
#include "jit/cpu_jit.h"

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "clang/Basic/DiagnosticOptions.h"
#include "clang/CodeGen/CodeGenAction.h"
#include "clang/Frontend/CompilerInstance.h"
#include "clang/Frontend/CompilerInvocation.h"
#include "clang/Frontend/TextDiagnosticPrinter.h"
#include "clang/Lex/PreprocessorOptions.h"
#include "interp/error.h"
#include "interp/log.h"
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

namespace terrace::jit {
namespace {

// Consumes an llvm::Error into its message.
std::string take_message(llvm::Error err) { return llvm::toString(std::move(err)); }

template <typename T>
T take_or_fail(llvm::Expected<T> value, const std::string& what) {
  if (!value) fail(ErrorCode::CompileFailed, what, ": ", take_message(value.takeError()));
  if constexpr (std::is_reference_v<T>) return *value;
  else return std::move(*value);
}

double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) * 1e-6;
}

class Stopwatch {
 public:
  double lap_ms() {
    auto now = std::chrono::steady_clock::now();
    double ms = std::chrono::duration<double, std::milli>(now - start_).count();
    start_ = now;
    return ms;
  }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// TERRACE_DUMP_DIR: the generated source and object file, for reading and for repros. Best effort: a dump that
// cannot be written must not fail the compile.
void dump_file(const std::string& file, llvm::StringRef bytes) {
  const char* dir = std::getenv("TERRACE_DUMP_DIR");
  if (!dir || !*dir) return;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::ofstream(std::filesystem::path(dir) / file, std::ios::binary)
      .write(bytes.data(), std::streamsize(bytes.size()));
}

void initialize_llvm_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    llvm::InitializeNativeTargetAsmParser();
  });
}

}  // namespace

struct CpuJit::Impl {
  std::unique_ptr<llvm::orc::LLJIT> lljit;
  llvm::orc::JITTargetMachineBuilder host;
  std::vector<std::string> cc1_args;  // everything but the input file
  std::mutex link_mutex;
  uint64_t next_dylib = 0;
  CodeCache cache{CodeCache::default_dir()};

  explicit Impl(llvm::orc::JITTargetMachineBuilder jtmb) : host(std::move(jtmb)) {}

  std::unique_ptr<llvm::Module> frontend(const std::string& name, const std::string& source,
                                         llvm::LLVMContext& ctx);
  void optimize(llvm::Module& m, llvm::TargetMachine& tm);
  std::unique_ptr<llvm::MemoryBuffer> codegen(const std::string& name, llvm::Module& m,
                                              llvm::TargetMachine& tm);
};

struct CompiledCode::Impl {
  std::shared_ptr<CpuJit::Impl> jit;
  llvm::orc::JITDylib* dylib = nullptr;
};

CompiledCode::~CompiledCode() {
  if (!impl_ || !impl_->dylib) return;
  std::lock_guard<std::mutex> lock(impl_->jit->link_mutex);
  // Removing frees the code and its memory. A failure leaves the code loaded (a leak, not a
  // wrong answer), so it is only consumed.
  if (llvm::Error err = impl_->jit->lljit->getExecutionSession().removeJITDylib(*impl_->dylib))
    llvm::consumeError(std::move(err));
}

void* CompiledCode::symbol(const std::string& name) const {
  for (const auto& [n, addr] : symbols_)
    if (n == name) return addr;
  fail(ErrorCode::InvalidArgument, "compiled code ", name_, " has no looked-up symbol ", name);
}

std::unique_ptr<llvm::Module> CpuJit::Impl::frontend(const std::string& name,
                                                     const std::string& source,
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
  for (const std::string& a : cc1_args) args.push_back(a.c_str());
  args.push_back(file.c_str());
  if (!clang::CompilerInvocation::CreateFromArgs(ci.getInvocation(), args, ci.getDiagnostics()))
    fail(ErrorCode::CompileFailed, name, ": bad compiler arguments: ", diagnostics);
  // The source never touches the disk: the file name is remapped to the in-memory buffer.
  ci.getPreprocessorOpts().addRemappedFile(file, llvm::MemoryBuffer::getMemBufferCopy(source, file).release());
  clang::EmitLLVMOnlyAction action(&ctx);
  if (!ci.ExecuteAction(action)) fail(ErrorCode::CompileFailed, name, ": clang: ", diagnostics);
  std::unique_ptr<llvm::Module> m = action.takeModule();
  if (!m) fail(ErrorCode::CompileFailed, name, ": clang produced no module: ", diagnostics);
  return m;
}

void CpuJit::Impl::optimize(llvm::Module& m, llvm::TargetMachine& tm) {
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

std::unique_ptr<llvm::MemoryBuffer> CpuJit::Impl::codegen(const std::string& name, llvm::Module& m,
                                                          llvm::TargetMachine& tm) {
  llvm::SmallVector<char, 0> object;
  llvm::raw_svector_ostream os(object);
  llvm::legacy::PassManager pm;
  if (tm.addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::ObjectFile))
    fail(ErrorCode::CompileFailed, name, ": the target cannot emit object files");
  pm.run(m);
  return std::make_unique<llvm::SmallVectorMemoryBuffer>(std::move(object), name, false);
}

std::unique_ptr<CpuJit> CpuJit::create() {
  initialize_llvm_once();
  auto jtmb = take_or_fail(llvm::orc::JITTargetMachineBuilder::detectHost(), "detecting the host");
  jtmb.setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
  jtmb.setRelocationModel(llvm::Reloc::PIC_);  // calls into libm go through the JIT's stubs
  jtmb.setCodeModel(llvm::CodeModel::Small);
  auto impl = std::make_shared<Impl>(jtmb);
  impl->lljit = take_or_fail(llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(jtmb).create(),
                             "creating the LLJIT");
  // cc1 arguments: host triple, CPU and features; O3-quality IR (no optnone) but no LLVM passes,
  // which optimize() runs itself. No -ffast-math: NaN and Inf must survive. No headers at all.
  const llvm::Triple& triple = jtmb.getTargetTriple();
  impl->cc1_args = {"-triple", triple.str(), "-target-cpu", jtmb.getCPU(), "-O3",
                    "-disable-llvm-passes", "-std=c++20", "-ffp-contract=on",
                    "-nostdsysteminc", "-nobuiltininc", "-fno-rtti", "-w"};
  for (const std::string& f : jtmb.getFeatures().getFeatures()) {
    impl->cc1_args.push_back("-target-feature");
    impl->cc1_args.push_back(f);
  }
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

std::string CpuJit::target_description() const {
  return impl_->host.getTargetTriple().str() + " " + impl_->host.getCPU() + " " +
         impl_->host.getFeatures().getString();
}

std::shared_ptr<CompiledCode> CpuJit::compile(const std::string& name, const std::string& source,
                                              const std::vector<std::string>& symbols,
                                              const CodeCache* cache) {
  dump_file(name + ".cpp", source);
  if (fault_enabled("compile-fail:cpu"))
    fail(ErrorCode::CompileFailed, name, ": injected by TERRACE_FAULT=compile-fail:cpu");

  std::shared_ptr<CompiledCode> code(new CompiledCode());
  code->name_ = name;
  Stopwatch clock;
  const double cpu_start = thread_cpu_ms();
  const CodeCache& disk = cache ? *cache : impl_->cache;
  std::string key;
  if (disk.enabled()) {
    key = "terrace tier-1 object 1\nLLVM " LLVM_VERSION_STRING "\n" + target_description() + "\n";
    for (const std::string& a : impl_->cc1_args) key += a + " ";
    key += "\n" + source;
  }
  std::unique_ptr<llvm::MemoryBuffer> object;
  if (std::optional<std::string> hit = disk.enabled() ? disk.load(key) : std::nullopt) {
    object = llvm::MemoryBuffer::getMemBufferCopy(*hit, name);
    code->timings_.cached = true;
  } else {
    llvm::LLVMContext ctx;
    std::unique_ptr<llvm::Module> module = impl_->frontend(name, source, ctx);
    code->timings_.frontend_ms = clock.lap_ms();
    // Optimisation remarks (a loop that did not vectorise) are not errors: keep them off stderr.
    ctx.setDiagnosticHandlerCallBack([](const llvm::DiagnosticInfo*, void*) {}, nullptr);

    // A TargetMachine is not thread-safe but is reusable: one per compiling thread saves its
    // setup (a few ms) on every compile. Every CpuJit targets the host with the same options.
    thread_local std::unique_ptr<llvm::TargetMachine> tm;
    if (!tm) tm = take_or_fail(impl_->host.createTargetMachine(), name + ": creating the target machine");
    module->setDataLayout(tm->createDataLayout());
    module->setTargetTriple(tm->getTargetTriple().str());
    impl_->optimize(*module, *tm);
    code->timings_.optimize_ms = clock.lap_ms();
    object = impl_->codegen(name, *module, *tm);
    code->timings_.codegen_ms = clock.lap_ms();
    if (disk.enabled()) disk.store(key, object->getBuffer());
  }
  dump_file(name + ".o", object->getBuffer());

  {
    std::lock_guard<std::mutex> lock(impl_->link_mutex);
    auto& lljit = *impl_->lljit;
    std::string dylib_name = name + "#" + std::to_string(impl_->next_dylib++);
    llvm::orc::JITDylib& dylib = take_or_fail(lljit.createJITDylib(dylib_name), name + ": new JITDylib");
    code->impl_ = std::make_unique<CompiledCode::Impl>();
    code->impl_->jit = impl_;
    code->impl_->dylib = &dylib;
    if (llvm::Error err = lljit.addObjectFile(dylib, std::move(object)))
      fail(ErrorCode::CompileFailed, name, ": adding the object: ", take_message(std::move(err)));
    for (const std::string& s : symbols) {
      llvm::orc::ExecutorAddr addr = take_or_fail(lljit.lookup(dylib, s), name + ": linking " + s);
      code->symbols_.push_back({s, addr.toPtr<void*>()});
    }
  }
  code->timings_.link_ms = clock.lap_ms();
  code->timings_.cpu_ms = thread_cpu_ms() - cpu_start;
  return code;
}

}  // namespace terrace::jit
