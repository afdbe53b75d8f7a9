// NVRTC through jit/cuda/nvrtc.h: CUDA C to an sm_90 cubin on a machine without a GPU.
#include "jit/cuda/nvrtc.h"

#include <gtest/gtest.h>

#include <cstring>

#include "interp/error.h"

#ifdef TERRACE_HAVE_CUDA

namespace terrace::jit {
namespace {

#define SKIP_WITHOUT_NVRTC()                                       \
  do {                                                             \
    std::string why_;                                              \
    if (!nvrtc_available(&why_)) GTEST_SKIP() << "no NVRTC: " << why_; \
  } while (0)

const char* kAxpy = R"(
extern "C" __global__ void axpy(float* __restrict__ y, const float* __restrict__ x, float a, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    y[i] = a * x[i] + y[i];
}
)";

TEST(Nvrtc, kernel_compiles_to_an_sm90_elf_cubin) {
  SKIP_WITHOUT_NVRTC();
  std::vector<char> cubin = nvrtc_compile(kAxpy, "sm_90", "axpy.cu");
  ASSERT_GT(cubin.size(), 64u);
  EXPECT_EQ(std::memcmp(cubin.data(), "\x7f" "ELF", 4), 0) << "a cubin is an ELF file";
  EXPECT_EQ(cubin[4], 2) << "64-bit ELF";
  // The kernel's name is in the ELF's symbol table.
  std::string bytes(cubin.begin(), cubin.end());
  EXPECT_NE(bytes.find("axpy"), std::string::npos);
}

TEST(Nvrtc, version_is_major_dot_minor) {
  SKIP_WITHOUT_NVRTC();
  std::string v = nvrtc_version();
  ASSERT_NE(v.find('.'), std::string::npos) << v;
  EXPECT_GE(std::stoi(v), 12) << v;
}

TEST(Nvrtc, syntax_error_is_compile_failed_with_the_log) {
  SKIP_WITHOUT_NVRTC();
  try {
    nvrtc_compile("extern \"C\" __global__ void broken(float* y) { y[0] = ; }", "sm_90", "broken.cu");
    FAIL() << "a syntax error compiled";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::CompileFailed);
    std::string m = e.message();
    EXPECT_NE(m.find("broken.cu"), std::string::npos) << m;          // the program's name
    EXPECT_NE(m.find("expected an expression"), std::string::npos) << m;  // NVRTC's log
  }
}

TEST(Nvrtc, unknown_option_is_compile_failed) {
  SKIP_WITHOUT_NVRTC();
  try {
    nvrtc_compile(kAxpy, "sm_90", "axpy.cu", {"--no-such-option"});
    FAIL() << "an unknown option was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::CompileFailed);
    EXPECT_NE(e.message().find("--no-such-option"), std::string::npos) << e.message();
  }
}

TEST(Nvrtc, virtual_arch_is_invalid_argument) {
  SKIP_WITHOUT_NVRTC();
  try {
    nvrtc_compile(kAxpy, "compute_90");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  }
}

}  // namespace
}  // namespace terrace::jit

#else
TEST(Nvrtc, not_built) { GTEST_SKIP() << "built without TERRACE_WITH_CUDA"; }
#endif
