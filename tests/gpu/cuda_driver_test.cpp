// The CUDA driver dlopen'd (jit/cuda/cuda_driver.h) and device memory (jit/cuda/cuda_memory.h). Tests that
// need a GPU skip with the driver's reason where there is none (the build machine).
#ifdef TERRACE_HAVE_CUDA
#include "jit/cuda/cuda_driver.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <vector>

#include "interp/error.h"
#include "jit/cuda/cuda_memory.h"
#include "jit/cuda/nvrtc.h"
#include "tests/support/gpu_skip.h"
#include "tests/support/session_helpers.h"

namespace terrace::jit::cuda {
namespace {

using ScopedFault = testing::FaultInjected;

TEST(CudaDriver, says_why_there_is_no_gpu_or_names_the_device) {
  std::string why;
  if (gpu_available(&why)) {
    const Device& d = device();
    EXPECT_FALSE(d.name.empty());
    EXPECT_EQ(d.arch().rfind("sm_", 0), 0u) << d.arch();
    EXPECT_GT(d.total_bytes, 0u);
    EXPECT_GE(driver().version, 12000);
    return;
  }
  EXPECT_FALSE(why.empty());
  try {
    driver();
    FAIL() << "driver() returned without a GPU";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::NotImplemented);
    EXPECT_NE(e.message().find(why), std::string::npos) << e.message();
  }
}

TEST(CudaDriver, no_gpu_fault_hides_the_device) {
  ScopedFault fault("no-gpu");
  std::string why;
  EXPECT_FALSE(gpu_available(&why));
  EXPECT_NE(why.find("TERRACE_FAULT=no-gpu"), std::string::npos) << why;
  EXPECT_THROW(driver(), Error);
}

TEST(CudaMemory, oom_fault_is_out_of_memory) {
  ScopedFault fault("oom:gpu");
  try {
    DeviceBuffer b(1024, nullptr);  // fails before touching the driver
    FAIL() << "allocated under oom:gpu";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::OutOfMemory);
    EXPECT_NE(e.message().find("1024 bytes"), std::string::npos) << e.message();
  }
}

const char* kAxpy = R"(
extern "C" __global__ void axpy(float* __restrict__ y, const float* __restrict__ x, float a, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    y[i] = a * x[i] + y[i];
}
)";

TEST(CudaDriver, kernel_runs_from_an_nvrtc_cubin) {
  SKIP_WITHOUT_GPU();
  Module module(nvrtc_compile(kAxpy, device().arch(), "axpy.cu"));
  CUfunction f = module.function("axpy");
  Stream stream;
  const long long n = 100000;
  std::vector<float> x(n), y(n);
  for (long long i = 0; i < n; ++i) {
    x[size_t(i)] = float(i);
    y[size_t(i)] = 1.0f;
  }
  DeviceBuffer dx(n * sizeof(float), stream.get()), dy(n * sizeof(float), stream.get());
  copy_to_device(dx.ptr(), x.data(), n * sizeof(float), stream);
  copy_to_device(dy.ptr(), y.data(), n * sizeof(float), stream);
  float a = 2.0f;
  CUdeviceptr py = dy.ptr(), px = dx.ptr();
  void* args[] = {&py, &px, &a, const_cast<long long*>(&n)};
  Event start, end;
  start.record(stream);
  launch(f, {unsigned((n + 255) / 256), 256, 0}, stream, args);
  end.record(stream);
  copy_to_host(y.data(), dy.ptr(), n * sizeof(float), stream);
  stream.synchronize();
  for (long long i = 0; i < n; ++i) ASSERT_EQ(y[size_t(i)], 2.0f * float(i) + 1.0f) << i;
  EXPECT_GT(Event::elapsed_ms(start, end), 0.0f);
}

TEST(CudaDriver, bad_cubin_names_cuModuleLoadData) {
  SKIP_WITHOUT_GPU();
  std::vector<char> junk(256, 'x');
  try {
    Module m(junk);
    FAIL() << "junk loaded as a module";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("cuModuleLoadData"), std::string::npos) << e.message();
  }
}

TEST(CudaDriver, missing_kernel_is_named) {
  SKIP_WITHOUT_GPU();
  Module module(nvrtc_compile(kAxpy, device().arch(), "axpy.cu"));
  try {
    module.function("no_such_kernel");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("no_such_kernel"), std::string::npos) << e.message();
  }
}

TEST(CudaMemory, impossible_allocation_is_out_of_memory) {
  SKIP_WITHOUT_GPU();
  Stream stream;
  try {
    DeviceBuffer b(size_t(1) << 50, stream.get());  // 1 PiB
    FAIL() << "allocated 1 PiB";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::OutOfMemory) << e.message();
  }
}

TEST(CudaMemory, pinned_round_trip_through_the_device) {
  SKIP_WITHOUT_GPU();
  Stream stream;
  PinnedBuffer pinned;
  const size_t n = 1 << 20;
  auto* p = static_cast<int32_t*>(pinned.reserve(n * sizeof(int32_t)));
  for (size_t i = 0; i < n; ++i) p[i] = int32_t(i * 7);
  DeviceBuffer d(n * sizeof(int32_t), stream.get());
  copy_to_device(d.ptr(), p, n * sizeof(int32_t), stream);
  std::vector<int32_t> back(n);
  copy_to_host(back.data(), d.ptr(), n * sizeof(int32_t), stream);
  stream.synchronize();
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(back[i], int32_t(i * 7)) << i;
}

// A captured graph replays its work on each launch (reading what the buffers hold then); a capture
// whose enqueue throws leaves the stream out of capture mode, usable.
TEST(CudaGraph, a_captured_copy_replays_on_each_launch_and_a_failed_capture_ends) {
  SKIP_WITHOUT_GPU();
  Stream stream;
  const size_t n = 4096, bytes = n * sizeof(int32_t);
  DeviceBuffer a(bytes, stream.get()), b(bytes, stream.get());
  TERRACE_CU(cuMemsetD8Async, b.ptr(), 0, bytes, stream.get());
  CapturedGraph copy(stream, 1, [&] { TERRACE_CU(cuMemcpyDtoDAsync, b.ptr(), a.ptr(), bytes, stream.get()); });
  std::vector<int32_t> in(n), back(n);
  for (int32_t round = 1; round <= 2; ++round) {
    for (size_t i = 0; i < n; ++i) in[i] = int32_t(i) * round;
    copy_to_device(a.ptr(), in.data(), bytes, stream);
    copy.launch(stream);
    copy_to_host(back.data(), b.ptr(), bytes, stream);
    stream.synchronize();
    ASSERT_EQ(back, in) << "round " << round;
  }
  EXPECT_THROW(CapturedGraph(stream, 2, [] { throw Error(ErrorCode::RuntimeError, "enqueue failed"); }), Error);
  copy_to_device(a.ptr(), in.data(), bytes, stream);  // fails if the stream were still capturing
  copy_to_host(back.data(), a.ptr(), bytes, stream);
  stream.synchronize();
  EXPECT_EQ(back, in);
}

}  // namespace
}  // namespace terrace::jit::cuda
#endif
