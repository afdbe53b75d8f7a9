// jit/cuda/cuda_driver.h: libcuda dlopen'd, its entry points through cuGetProcAddress.
#include "jit/cuda/cuda_driver.h"

#include <mutex>

#include "interp/error.h"
#include "interp/log.h"
#include "jit/cuda/dynlib.h"

namespace terrace::jit::cuda {

namespace {

struct Loaded {
  Driver driver;
  std::string why;  // empty when the driver is usable
};

// The driver's name and string for a result (they come from the driver itself).
std::string describe(const Driver& d, CUresult r) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (d.cuGetErrorName) d.cuGetErrorName(r, &name);
  if (d.cuGetErrorString) d.cuGetErrorString(r, &text);
  return std::string(name ? name : "CUDA error " + std::to_string(int(r))) + " (" + (text ? text : "no description") + ")";
}

Loaded& loaded() {
  static Loaded l;
  static std::once_flag once;
  std::call_once(once, [] {
    Driver& d = l.driver;
    LibrarySearch search{"TERRACE_LIBCUDA_PATH",
                         {"libcuda.so.1", "libcuda.so"},
                         {"/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/local/cuda/compat"}};
    std::string why;
    void* lib = open_library(search, &d.path, &why);
    if (!lib) {
      l.why = "no CUDA driver (libcuda): " + why;
      return;
    }
    auto get_proc = reinterpret_cast<decltype(&::cuGetProcAddress)>(library_symbol(lib, "cuGetProcAddress_v2"));
    if (!get_proc) {
      l.why = d.path + " has no cuGetProcAddress_v2: a driver older than CUDA 12";
      return;
    }
    auto resolve = [&](const char* name, void** fn) {
      CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
      CUresult r = get_proc(name, fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &found);
      if ((r != CUDA_SUCCESS || !*fn) && l.why.empty())
        l.why = d.path + ": cuGetProcAddress(" + name + ", " + std::to_string(CUDA_VERSION) + ") found nothing" +
                (found == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT ? " (the driver is older than the toolkit)" : "");
    };
#define TERRACE_CU_RESOLVE(name) resolve(#name, reinterpret_cast<void**>(&d.name));
    TERRACE_CU_ENTRY_POINTS(TERRACE_CU_RESOLVE)
#undef TERRACE_CU_RESOLVE
    if (!l.why.empty()) return;
    if (CUresult r = d.cuInit(0); r != CUDA_SUCCESS) {
      l.why = "cuInit: " + describe(d, r);
      return;
    }
    d.cuDriverGetVersion(&d.version);
    int count = 0;
    if (CUresult r = d.cuDeviceGetCount(&count); r != CUDA_SUCCESS) {
      l.why = "cuDeviceGetCount: " + describe(d, r);
      return;
    }
    if (count == 0) l.why = "the CUDA driver (" + d.path + ") sees no device";
  });
  return l;
}

}  // namespace

bool gpu_available(std::string* why) {
  if (fault_enabled("no-gpu")) {
    if (why) *why = "no GPU: injected by TERRACE_FAULT=no-gpu";
    return false;
  }
  const Loaded& l = loaded();
  if (!l.why.empty() && why) *why = l.why;
  return l.why.empty();
}

const Driver& driver() {
  std::string why;
  TERRACE_CHECK(gpu_available(&why), NotImplemented, "tier 2 needs a GPU: ", why);
  return loaded().driver;
}

void check(CUresult result, const char* call) {
  if (result == CUDA_SUCCESS) return;
  fail(result == CUDA_ERROR_OUT_OF_MEMORY ? ErrorCode::OutOfMemory : ErrorCode::RuntimeError, call, ": ",
       describe(loaded().driver, result));
}

std::string Device::arch() const { return "sm_" + std::to_string(cc_major) + std::to_string(cc_minor); }

const Device& device() {
  static Device dev;
  static std::once_flag once;
  std::call_once(once, [] {
    TERRACE_CU(cuDeviceGet, &dev.device, 0);
    char name[256] = {};
    TERRACE_CU(cuDeviceGetName, name, int(sizeof name), dev.device);
    dev.name = name;
    TERRACE_CU(cuDeviceGetAttribute, &dev.cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev.device);
    TERRACE_CU(cuDeviceGetAttribute, &dev.cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev.device);
    TERRACE_CU(cuDeviceGetAttribute, &dev.multiprocessors, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev.device);
    TERRACE_CU(cuDeviceTotalMem, &dev.total_bytes, dev.device);
    TERRACE_CU(cuDevicePrimaryCtxRetain, &dev.context, dev.device);  // kept for the process
  });
  // The primary context, current on each thread that uses the device (the compile and call
  // threads both do).
  thread_local bool current = false;
  if (!current) {
    TERRACE_CU(cuCtxSetCurrent, dev.context);
    current = true;
  }
  return dev;
}

Module::Module(const std::vector<char>& cubin) {
  device();
  TERRACE_CU(cuModuleLoadData, &module_, cubin.data());
}

Module::~Module() {
  if (module_) driver().cuModuleUnload(module_);  // a failure here has no one to tell
}

CUfunction Module::function(const std::string& name) const {
  CUfunction f = nullptr;
  CUresult r = driver().cuModuleGetFunction(&f, module_, name.c_str());
  if (r != CUDA_SUCCESS)
    fail(ErrorCode::RuntimeError, "cuModuleGetFunction(", name, "): ", describe(driver(), r));
  // A kernel with more than 8 KB of shared memory a block (rows of 2,048 floats kept there; a
  // block's fold values take a few hundred bytes) prefers the largest carveout: the driver's
  // default (135 KB for a 256-thread softmax block, Nsight Compute on the H100) left room for 3
  // blocks an SM. The others keep the default and its larger L1: the largest carveout made a
  // layernorm with its rows in registers 8% slower (0.1036 ms against 0.0958 over 8192x4096 on
  // the H100).
  int shared = 0;
  TERRACE_CU(cuFuncGetAttribute, &shared, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f);
  if (shared > (8 << 10))
    TERRACE_CU(cuFuncSetAttribute, f, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
               int(CU_SHAREDMEM_CARVEOUT_MAX_SHARED));
  return f;
}

Stream::Stream() {
  device();
  TERRACE_CU(cuStreamCreate, &stream_, CU_STREAM_NON_BLOCKING);
}
Stream::~Stream() {
  if (stream_) driver().cuStreamDestroy(stream_);
}
void Stream::synchronize() const { TERRACE_CU(cuStreamSynchronize, stream_); }

Event::Event() {
  device();
  TERRACE_CU(cuEventCreate, &event_, CU_EVENT_DEFAULT);
}
Event::~Event() {
  if (event_) driver().cuEventDestroy(event_);
}
void Event::record(const Stream& stream) { TERRACE_CU(cuEventRecord, event_, stream.get()); }
void Event::synchronize() const { TERRACE_CU(cuEventSynchronize, event_); }
float Event::elapsed_ms(const Event& start, const Event& end) {
  float ms = 0;
  TERRACE_CU(cuEventElapsedTime, &ms, start.event_, end.event_);
  return ms;
}

CapturedGraph::CapturedGraph(const Stream& stream, int times, const std::function<void()>& enqueue) {
  TERRACE_CU(cuStreamBeginCapture, stream.get(), CU_STREAM_CAPTURE_MODE_RELAXED);
  try {
    for (int i = 0; i < times; ++i) enqueue();
  } catch (...) {
    CUgraph partial = nullptr;  // the stream leaves capture mode either way
    if (driver().cuStreamEndCapture(stream.get(), &partial) == CUDA_SUCCESS && partial) driver().cuGraphDestroy(partial);
    throw;
  }
  TERRACE_CU(cuStreamEndCapture, stream.get(), &graph_);
  try {
    TERRACE_CU(cuGraphInstantiateWithFlags, &exec_, graph_, 0);
  } catch (...) {
    driver().cuGraphDestroy(graph_);
    throw;
  }
}

CapturedGraph::~CapturedGraph() {
  if (exec_) driver().cuGraphExecDestroy(exec_);
  if (graph_) driver().cuGraphDestroy(graph_);
}

void CapturedGraph::launch(const Stream& stream) const { TERRACE_CU(cuGraphLaunch, exec_, stream.get()); }

float graph_time_ms(Stream& stream, const std::function<void()>& enqueue) {
  constexpr int kCaptured = 8, kReplays = 3;
  enqueue();
  stream.synchronize();
  CapturedGraph graph(stream, kCaptured, enqueue);
  graph.launch(stream);  // warm
  Event start, end;
  start.record(stream);
  for (int rep = 0; rep < kReplays; ++rep) graph.launch(stream);
  end.record(stream);
  end.synchronize();
  return Event::elapsed_ms(start, end) / float(kCaptured * kReplays);
}

size_t fastest_or_first(const std::vector<float>& ms) {
  size_t best = 0;
  for (size_t i = 1; i < ms.size(); ++i)
    if (ms[i] < ms[best]) best = i;
  return !ms.empty() && ms[0] <= ms[best] * 1.05f ? 0 : best;
}

void launch(CUfunction f, const LaunchConfig& c, const Stream& stream, void** args) {
  TERRACE_CU(cuLaunchKernel, f, c.grid, 1, 1, c.block, 1, 1, c.shared_bytes, stream.get(), args, nullptr);
}

}  // namespace terrace::jit::cuda
