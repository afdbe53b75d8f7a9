// The CUDA driver API for tier 2, with libcuda dlopen'd: every binary runs where there is no GPU or
// no driver (gpu_available() says why not). Entry points come through cuGetProcAddress at the
// toolkit's CUDA_VERSION (cuda.h #defines names to versioned symbols; dlsym would get the legacy
// ABI), and every call goes through TERRACE_CU, which names the call and the driver's error.
//
// libcuda's search order: $TERRACE_LIBCUDA_PATH (the library, or a folder holding it), then
// libcuda.so.1 and libcuda.so through the dynamic loader, then /usr/lib/x86_64-linux-gnu,
// /usr/lib64 and /usr/local/cuda/compat.
#pragma once
#include <cuda.h>

#include <functional>
#include <string>
#include <vector>

namespace terrace::jit::cuda {

// The entry points Terrace uses, once each (X-macro: the Driver table and its loading).
#define TERRACE_CU_ENTRY_POINTS(X)                                                             \
  X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString) X(cuDeviceGetCount)   \
  X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceGetAttribute) X(cuDeviceTotalMem)               \
  X(cuDevicePrimaryCtxRetain) X(cuCtxSetCurrent) X(cuModuleLoadData) X(cuModuleUnload)        \
  X(cuModuleGetFunction) X(cuFuncGetAttribute) X(cuFuncSetAttribute) X(cuLaunchKernel) X(cuStreamCreate)            \
  X(cuStreamDestroy) X(cuStreamSynchronize) X(cuEventCreate) X(cuEventDestroy)                \
  X(cuEventRecord) X(cuEventSynchronize) X(cuEventElapsedTime) X(cuMemAllocAsync)             \
  X(cuMemFreeAsync) X(cuDeviceGetDefaultMemPool) X(cuMemPoolSetAttribute) X(cuMemGetInfo)     \
  X(cuMemHostAlloc) X(cuMemFreeHost) X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync)               \
  X(cuMemcpyDtoDAsync) X(cuMemsetD8Async) X(cuMemAlloc) X(cuMemFree) X(cuStreamBeginCapture)      \
  X(cuStreamEndCapture) X(cuGraphInstantiateWithFlags) X(cuGraphLaunch) X(cuGraphExecDestroy)  \
  X(cuGraphDestroy) X(cuGraphGetNodes)

struct Driver {
#define TERRACE_CU_FIELD(name) decltype(&::name) name = nullptr;
  TERRACE_CU_ENTRY_POINTS(TERRACE_CU_FIELD)
#undef TERRACE_CU_FIELD
  std::string path;    // the library loaded
  int version = 0;     // cuDriverGetVersion: 13000 for CUDA 13.0
};

// True when libcuda loads, cuInit succeeds and there is at least one device; otherwise false with
// the reason in `why`. TERRACE_FAULT=no-gpu answers false ("no-gpu injected"), for tests of the
// fallback. Loaded and initialised once per process.
bool gpu_available(std::string* why = nullptr);

// The loaded driver; throws Error(NotImplemented) with gpu_available's reason when there is none.
const Driver& driver();

// Throws Error for a failed driver call: OutOfMemory for CUDA_ERROR_OUT_OF_MEMORY, else
// RuntimeError; the message names the call, the error's name and the driver's string for it.
void check(CUresult result, const char* call);

// Every driver call: TERRACE_CU(cuModuleLoadData, &module, image).
#define TERRACE_CU(call, ...) \
  ::terrace::jit::cuda::check(::terrace::jit::cuda::driver().call(__VA_ARGS__), #call)

// The GPU tier 2 runs on: device 0, its primary context current on the calling thread.
struct Device {
  CUdevice device = 0;
  CUcontext context = nullptr;
  std::string name;  // "NVIDIA H100 80GB HBM3"
  int cc_major = 0, cc_minor = 0;
  size_t total_bytes = 0;
  int multiprocessors = 0;
  std::string arch() const;  // "sm_90": what NVRTC compiles for
};
// device 0, its primary context retained once and made current on this thread (cheap after the
// first call on a thread). Throws Error(NotImplemented) without a GPU.
const Device& device();

// A module loaded from a cubin; unloaded when it goes.
class Module {
 public:
  explicit Module(const std::vector<char>& cubin);
  ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  // Throws Error(RuntimeError) naming the kernel when the module lacks it.
  CUfunction function(const std::string& name) const;

 private:
  CUmodule module_ = nullptr;
};

// A non-blocking stream of the device's primary context.
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  CUstream get() const { return stream_; }
  void synchronize() const;

 private:
  CUstream stream_ = nullptr;
};

// An event for ordering and timing on a stream.
class Event {
 public:
  Event();
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(const Stream& stream);
  void synchronize() const;
  // Milliseconds between two recorded events (both complete).
  static float elapsed_ms(const Event& start, const Event& end);

 private:
  CUevent event_ = nullptr;
};

// A CUDA graph of what `enqueue` puts on `stream` (captured `times` times in a row, relaxed mode),
// instantiated; replayed by launch.
class CapturedGraph {
 public:
  CapturedGraph(const Stream& stream, int times, const std::function<void()>& enqueue);
  ~CapturedGraph();
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;
  void launch(const Stream& stream) const;

 private:
  CUgraph graph_ = nullptr;
  CUgraphExec exec_ = nullptr;
};

// The device time of one `enqueue` on `stream`, as a whole plan's CUDA graph runs it: run once
// (loading its kernels), captured 8 times into a graph, replayed 3 times after a warm replay.
// Timed back to back instead, a small library call measures its host work, not its kernel.
float graph_time_ms(Stream& stream, const std::function<void()>& enqueue);
// Of candidates timed in `ms` (the heuristic's order), the fastest, unless the first is within 5%
// of it: a closer race is noise, and would pick differently from run to run.
size_t fastest_or_first(const std::vector<float>& ms);

struct LaunchConfig {
  unsigned grid = 1, block = 256, shared_bytes = 0;
};
// Launches `f` (args: pointers to each argument's value, as cuLaunchKernel takes them).
void launch(CUfunction f, const LaunchConfig& config, const Stream& stream, void** args);

}  // namespace terrace::jit::cuda
