// The CPU JIT itself: errors, fault injection, code removal, concurrent compiles, dumps.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "interp/error.h"
#include "jit/cpu/cpu_jit.h"
#include "interp/log.h"
#include "jit/cpu/cpu_kernel.h"
#include "kernels/lower.h"
#include "kernels/render_c.h"

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

// Each kernel parses only the prelude functions it calls, with what they call in turn
// (sigmoid calls exp's range reduction, not exp itself).
TEST(CpuJit, PreludeHoldsOnlyTheFunctionsAKernelCalls) {
  const std::string kernel = R"(extern "C" void uses_tanh(void** b, int64_t begin, int64_t end) {
  float* x = (float*)b[0];
  int32_t* y = (int32_t*)b[1];
  double* z = (double*)b[2];
  for (int64_t i = begin; i < end; ++i) {
    x[i] = tr_tanh_f32(tr_sigmoid_f32(x[i]));
    y[i] = tr_sat_cast<int32_t, float>(x[i], -2147483648.0f, 2147483520.0f, -2147483647 - 1, 2147483647);
    z[i] = tr_erf_f64(z[i]);
  }
})";
  std::string prelude = kernels::render_prelude(kernels::Dialect::Cpp, kernel);
  for (const char* wanted : {"tr_tanh_f32", "tr_sigmoid_f32", "tr_exp_parts", "tr_abs_f32", "tr_sat_cast", "TR_F64_LIBM(erf, erf)"})
    EXPECT_NE(prelude.find(wanted), std::string::npos) << wanted;
  for (const char* unwanted : {"tr_exp_f32", "tr_erf_f32", "tr_pow_f32", "tr_log_f32", "tr_f2h", "tr_pow_f64"})
    EXPECT_EQ(prelude.find(unwanted), std::string::npos) << unwanted;
  EXPECT_LT(prelude.size(), kernels::render_prelude(kernels::Dialect::Cpp).size() / 3);
  auto code = CpuJit::global().compile("uses_tanh", prelude + kernel, {"uses_tanh"});
  float x[1] = {0.5f};
  int32_t y[1] = {0};
  double z[1] = {0.5};
  void* buffers[3] = {x, y, z};
  code->kernel("uses_tanh")(buffers, 0, 1);
  EXPECT_NEAR(x[0], std::tanh(1.0f / (1.0f + std::exp(-0.5f))), 1e-6);
  EXPECT_EQ(y[0], 0);
  EXPECT_DOUBLE_EQ(z[0], std::erf(0.5));
}

// Equal kernels of two regions (a transformer's identical layers) share one compiled copy while
// either lives; another kernel (here another dtype) compiles anew.
TEST(CpuJit, KernelsWithTheSameSourceShareCompiledCode) {
  auto group = [](const std::string& name, DType dtype) {
    kernels::FusionGroup g;
    g.name = name;
    g.inputs = {{dtype, {64}}};
    kernels::FusedOp relu;
    relu.node.op = Op::Relu;
    relu.operands = {kernels::Operand::input(0)};
    relu.result = {dtype, {64}};
    g.ops = {relu};
    g.outputs = {0};
    return kernels::lower(g);
  };
  std::unique_ptr<CpuJit> jit = CpuJit::create();
  CpuKernel a = compile_cpu_kernel(group("layer0", DType::Float32), *jit);
  CpuKernel b = compile_cpu_kernel(group("layer1", DType::Float32), *jit);
  CpuKernel c = compile_cpu_kernel(group("layer2", DType::Float64), *jit);
  EXPECT_EQ(a.code, b.code);
  EXPECT_EQ(a.fn, b.fn);
  EXPECT_NE(a.code, c.code);
  float x[64], y[64];
  for (int i = 0; i < 64; ++i) x[i] = float(i - 32);
  void* buffers[2] = {x, y};
  run_cpu_kernel(b, buffers);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(y[i], std::max(0.0f, x[i])) << i;
}

}  // namespace
}  // namespace terrace::jit
