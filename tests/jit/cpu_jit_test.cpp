// The CPU JIT itself: errors, fault injection, code removal, concurrent compiles, dumps.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <thread>

#include "interp/error.h"
#include "jit/cpu_jit.h"
#include "interp/log.h"

namespace terrace::jit {
namespace {

const char* kAddOne = R"(extern "C" void add_one(void** b, long long begin, long long end) {
  float* x = (float*)b[0];
  for (long long i = begin; i < end; ++i) x[i] += 1.0f;
})";

void expect_adds_one(const CompiledCode& code) {
  float data[4] = {1, 2, 3, 4};
  void* buffers[1] = {data};
  code.kernel("add_one")(buffers, 1, 3);
  EXPECT_EQ(data[0], 1);
  EXPECT_EQ(data[1], 3);
  EXPECT_EQ(data[2], 4);
  EXPECT_EQ(data[3], 4);
}

TEST(CpuJit, CompilesAndRunsSource) {
  auto code = CpuJit::global().compile("add_one", kAddOne, {"add_one"});
  expect_adds_one(*code);
  EXPECT_GT(code->timings().total_ms(), 0);
}

TEST(CpuJit, SyntaxErrorGivesCompileFailedWithDiagnostics) {
  try {
    CpuJit::global().compile("broken", "extern \"C\" void broken() { undeclared_name = 1; }", {"broken"});
    FAIL() << "expected CompileFailed";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::CompileFailed);
    EXPECT_NE(e.message().find("undeclared_name"), std::string::npos) << e.message();
  }
}

TEST(CpuJit, MissingSymbolGivesCompileFailed) {
  try {
    CpuJit::global().compile("add_one", kAddOne, {"no_such_function"});
    FAIL() << "expected CompileFailed";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::CompileFailed) << e.what();
  }
}

TEST(CpuJit, CompileFailFaultGivesCompileFailed) {
  ::setenv("TERRACE_FAULT", "miscompile:gpu, compile-fail:cpu", 1);
  EXPECT_TRUE(fault_enabled("compile-fail:cpu"));
  EXPECT_FALSE(fault_enabled("compile-fail"));
  try {
    CpuJit::global().compile("add_one", kAddOne, {"add_one"});
    ADD_FAILURE() << "expected CompileFailed";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::CompileFailed);
  }
  ::unsetenv("TERRACE_FAULT");
  EXPECT_FALSE(fault_enabled("compile-fail:cpu"));
  expect_adds_one(*CpuJit::global().compile("add_one", kAddOne, {"add_one"}));
}

TEST(CpuJit, RemovedCodeCanBeCompiledAgainUnderTheSameName) {
  auto jit = CpuJit::create();
  auto first = jit->compile("add_one", kAddOne, {"add_one"});
  expect_adds_one(*first);
  first.reset();  // removes the code through its JITDylib
  auto second = jit->compile("add_one", kAddOne, {"add_one"});
  expect_adds_one(*second);
}

TEST(CpuJit, SameKernelCompilesConcurrentlyFromTwoThreads) {
  std::shared_ptr<CompiledCode> a, b;
  std::thread t1([&] { a = CpuJit::global().compile("add_one", kAddOne, {"add_one"}); });
  std::thread t2([&] { b = CpuJit::global().compile("add_one", kAddOne, {"add_one"}); });
  t1.join();
  t2.join();
  ASSERT_TRUE(a && b);
  EXPECT_NE(a->symbol("add_one"), b->symbol("add_one")) << "each compile has its own copy";
  expect_adds_one(*a);
  expect_adds_one(*b);
}

TEST(CpuJit, DumpDirReceivesTheSource) {
  auto dir = std::filesystem::temp_directory_path() / ("terrace_dump_" + std::to_string(::getpid()));
  ::setenv("TERRACE_DUMP_DIR", dir.c_str(), 1);
  CpuJit::global().compile("add_one", kAddOne, {"add_one"});
  ::unsetenv("TERRACE_DUMP_DIR");
  EXPECT_TRUE(std::filesystem::exists(dir / "add_one.cpp"));
  std::filesystem::remove_all(dir);
}

TEST(CpuJit, LibmSymbolsResolveFromTheProcess) {
  const char* src = R"(extern "C" double call_fmod(double a, double b) { return __builtin_fmod(a, b); })";
  auto code = CpuJit::global().compile("call_fmod", src, {"call_fmod"});
  auto fn = reinterpret_cast<double (*)(double, double)>(code->symbol("call_fmod"));
  EXPECT_EQ(fn(7.5, 2.0), 1.5);
}

}  // namespace
}  // namespace terrace::jit
