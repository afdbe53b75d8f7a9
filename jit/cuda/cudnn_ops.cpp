// jit/cuda/cudnn_ops.h: cuDNN 9 dlopen'd; convolutions planned through the legacy API with FMA math only.
#include "jit/cuda/cudnn_ops.h"

#include <cudnn.h>
#include <glob.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <vector>

#include "interp/env_flag.h"
#include "interp/error.h"
#include "interp/log.h"
#include "interp/tensor.h"
#include "jit/cuda/cuda_memory.h"
#include "jit/cuda/dynlib.h"
#include "jit/tuning.h"

namespace terrace::jit::cuda {

namespace {

#define TERRACE_DNN_ENTRY_POINTS(X)                                                                  \
  X(cudnnGetVersion) X(cudnnGetErrorString) X(cudnnGetLastErrorString) X(cudnnCreate)               \
  X(cudnnSetStream) X(cudnnCreateTensorDescriptor) X(cudnnDestroyTensorDescriptor)                  \
  X(cudnnSetTensorNdDescriptor) X(cudnnCreateFilterDescriptor) X(cudnnDestroyFilterDescriptor)      \
  X(cudnnSetFilterNdDescriptor) X(cudnnCreateConvolutionDescriptor)                                 \
  X(cudnnDestroyConvolutionDescriptor) X(cudnnSetConvolutionNdDescriptor)                           \
  X(cudnnSetConvolutionGroupCount) X(cudnnSetConvolutionMathType)                                   \
  X(cudnnGetConvolutionNdForwardOutputDim) X(cudnnGetConvolutionForwardAlgorithm_v7)                \
  X(cudnnGetConvolutionForwardWorkspaceSize) X(cudnnConvolutionForward)

struct Dnn {
#define TERRACE_DNN_FIELD(name) decltype(&::name) name = nullptr;
  TERRACE_DNN_ENTRY_POINTS(TERRACE_DNN_FIELD)
#undef TERRACE_DNN_FIELD
  std::string path, version, why;
};

// Python environments' cuDNN wheels (PyTorch's): where pip puts libcudnn.so.9.
std::vector<std::string> python_dirs() {
  std::vector<std::string> roots;
  for (const char* env : {"VIRTUAL_ENV", "CONDA_PREFIX"})
    if (const char* v = std::getenv(env); v && *v) roots.push_back(std::string(v) + "/lib");
  roots.insert(roots.end(), {"/usr/lib", "/usr/local/lib", "/opt/*/lib"});
  if (const char* home = std::getenv("HOME"); home && *home) roots.push_back(std::string(home) + "/.local/lib");
  std::vector<std::string> dirs;
  for (const std::string& root : roots)
    for (const char* packages : {"site-packages", "dist-packages"})
      for (const char* lib : {"cudnn", "cu13"}) {
        const std::string pattern = root + "/python3*/" + packages + "/nvidia/" + lib + "/lib";
        glob_t g{};
        if (::glob(pattern.c_str(), GLOB_ONLYDIR, nullptr, &g) == 0)
          for (size_t i = 0; i < g.gl_pathc; ++i)
            if (std::find(dirs.begin(), dirs.end(), g.gl_pathv[i]) == dirs.end()) dirs.push_back(g.gl_pathv[i]);
        ::globfree(&g);
      }
  return dirs;
}

// One run of the search order: the library, its entry points and its version, or why not.
Dnn load() {
  Dnn d;
  std::vector<std::string> dirs = {"/usr/local/cuda/lib64", "/usr/local/cuda/lib"};
  for (std::string& dir : python_dirs()) dirs.push_back(std::move(dir));
  LibrarySearch search{"TERRACE_CUDNN_PATH", {"libcudnn.so.9"}, dirs};
  std::string why;
  void* lib = open_library(search, &d.path, &why);  // never closed: cuDNN is not made to unload
  if (!lib) {
    d.why = "no cuDNN 9: " + why;
    return d;
  }
#define TERRACE_DNN_BIND(name)                                                                   \
  d.name = reinterpret_cast<decltype(&::name)>(library_symbol(lib, #name));                      \
  if (!d.name && d.why.empty()) d.why = d.path + " lacks " #name;
  TERRACE_DNN_ENTRY_POINTS(TERRACE_DNN_BIND)
#undef TERRACE_DNN_BIND
  if (!d.why.empty()) return d;
  const size_t v = d.cudnnGetVersion();  // major * 10000 + minor * 100 + patch since cuDNN 9
  d.version = std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
  if (v / 10000 != 9) d.why = d.path + " is cuDNN " + d.version + "; Terrace needs cuDNN 9";
  return d;
}

// The library, loaded once per process (with or without a GPU: loading runs no device code).
Dnn& dnn() {
  static Dnn* d = nullptr;  // never destroyed: convolutions released at exit still reach cuDNN
  static std::once_flag once;
  std::call_once(once, [] {
    d = new Dnn(load());
    if (d->why.empty()) log(LogLevel::Debug, "tier 2: cuDNN ", d->version, " from ", d->path);
    else log(LogLevel::Info, "tier 2: convolutions stay on tier 1: ", d->why);
  });
  return *d;
}

// Throws for a failed cuDNN call: its name, cuDNN's string for the status and its last message.
void check_dnn(cudnnStatus_t s, const char* call, ErrorCode otherwise, const std::string& what) {
  if (s == CUDNN_STATUS_SUCCESS) return;
  char last[512] = {0};
  dnn().cudnnGetLastErrorString(last, sizeof last);
  fail(s == CUDNN_STATUS_ALLOC_FAILED ? ErrorCode::OutOfMemory : otherwise, call, ": ", dnn().cudnnGetErrorString(s),
       last[0] ? std::string(" (") + last + ")" : std::string(), " (", what, ")");
}

// Every cuDNN call: TERRACE_DNN(code for a failure, cudnnCall, args...), inside CudnnConv (spec_).
#define TERRACE_DNN(code, call, ...) \
  check_dnn(dnn().call(__VA_ARGS__), #call, ::terrace::ErrorCode::code, spec_.describe())

// cuDNN handles: one per concurrent call, reused (a handle is bound to the stream it is given,
// so two threads never share one at a time). Created on first need, kept for the process.
class HandlePool {
 public:
  cudnnHandle_t take(const std::string& what) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!free_.empty()) {
        cudnnHandle_t h = free_.back();
        free_.pop_back();
        return h;
      }
    }
    device();  // the primary context current on this thread: cuDNN's runtime uses it
    cudnnHandle_t h = nullptr;
    check_dnn(dnn().cudnnCreate(&h), "cudnnCreate", ErrorCode::RuntimeError, what);
    return h;
  }
  void give(cudnnHandle_t h) {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(h);
  }

 private:
  std::mutex mu_;
  std::vector<cudnnHandle_t> free_;
};

HandlePool& handles() {
  static auto* pool = new HandlePool;  // never destroyed: handles outlive static destructors
  return *pool;
}

struct Handle {
  explicit Handle(const std::string& what) : h(handles().take(what)) {}
  ~Handle() { handles().give(h); }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  cudnnHandle_t h;
};

const char* algo_name(cudnnConvolutionFwdAlgo_t a) {
  switch (a) {
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM: return "IMPLICIT_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM: return "IMPLICIT_PRECOMP_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_GEMM: return "GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_DIRECT: return "DIRECT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT: return "FFT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING: return "FFT_TILING";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD: return "WINOGRAD";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED: return "WINOGRAD_NONFUSED";
    default: return "?";
  }
}

// Algorithms whose result is a sum of the products in some order (the fp32 bound of
// cpu_library::error_allowance holds for any order).
bool sums_directly(cudnnConvolutionFwdAlgo_t a) {
  return a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM || a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_GEMM || a == CUDNN_CONVOLUTION_FWD_ALGO_DIRECT;
}

// The most workspace one convolution may take.
constexpr size_t kMaxWorkspaceBytes = size_t(256) << 20;

std::string join(const std::vector<int64_t>& v, const char* sep = ",") {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + std::to_string(v[i]);
  return s;
}

// A convolution's shapes as cuDNN takes them: 1-D as 2-D over a unit height (cuDNN's descriptors
// start at 4 dims).
struct CudnnShapes {
  std::vector<int64_t> x, w, y, strides, dilations, pads;
};

CudnnShapes cudnn_shapes(const ConvSpec& spec) {
  const size_t rank = spec.x.size();
  TERRACE_CHECK(rank >= 3 && rank <= 5 && spec.w.size() == rank && spec.strides.size() == rank - 2 &&
                    spec.dilations.size() == rank - 2 && spec.pads.size() == rank - 2,
                CompileFailed, spec.describe(),
                ": cuDNN convolutions take 1 to 3 spatial dims, one stride, dilation and pad each");
  CudnnShapes s{spec.x, spec.w, spec.y(), spec.strides, spec.dilations, spec.pads};
  if (rank == 3) {
    s.x.insert(s.x.begin() + 2, 1);
    s.w.insert(s.w.begin() + 2, 1);
    s.y.insert(s.y.begin() + 2, 1);
    s.strides.insert(s.strides.begin(), 1);
    s.dilations.insert(s.dilations.begin(), 1);
    s.pads.insert(s.pads.begin(), 0);
  }
  TERRACE_CHECK(shape_numel(s.y) > 0 && s.x[0] > 0, CompileFailed, spec.describe(),
                ": an empty convolution is no cuDNN call");
  for (const std::vector<int64_t>* t : {&s.x, &s.w, &s.y})
    TERRACE_CHECK(shape_numel(*t) < INT_MAX, CompileFailed, spec.describe(),
                  ": over 2^31 elements in one tensor (cuDNN's dims are 32-bit)");
  return s;
}

std::vector<int> ints(const std::vector<int64_t>& v) { return std::vector<int>(v.begin(), v.end()); }

// Row-major strides of a packed tensor of `dims`.
std::vector<int> packed_strides(const std::vector<int>& dims) {
  std::vector<int> s(dims.size(), 1);
  for (size_t i = dims.size() - 1; i > 0; --i) s[i - 1] = s[i] * dims[i];
  return s;
}

// An algorithm cuDNN may run for one convolution, and its time when timed.
struct Candidate {
  cudnnConvolutionFwdAlgo_t algo;
  size_t workspace;
  float ms = 0;
};

// TERRACE_CUDNN_ALGOS=any also admits Winograd and FFT (for measuring what they would gain:
// their error is not bounded by the validator's element-wise allowance, so a version using
// one is served only while its validation and re-checks pass).
bool any_algorithm() {
  static const bool any = [] {
    const char* e = std::getenv("TERRACE_CUDNN_ALGOS");
    return e && std::string(e) == "any";
  }();
  return any;
}

// What a timed choice depends on: the GPU, the driver, cuDNN, the problem and which algorithms
// are admitted (FMA math is fixed).
std::string tuning_key(const ConvSpec& spec) {
  const Device& d = device();
  return "cudnn-conv-fwd|" + d.name + "|" + d.arch() + "|driver " + std::to_string(driver().version) + "|cudnn " +
         dnn().version + "|" + spec.describe() + (any_algorithm() ? "|any" : "|direct");
}

}  // namespace

bool cudnn_available(std::string* why) {
  if (!gpu_available(why)) return false;  // asked each time: TERRACE_FAULT=no-gpu may come and go
  const Dnn& d = dnn();
  if (!d.why.empty() && why) *why = d.why;
  return d.why.empty();
}

bool cudnn_probe(std::string* path, std::string* version, std::string* why) {
  Dnn d = load();
  if (path) *path = d.path;
  if (version) *version = d.version;
  if (why) *why = d.why;
  return d.why.empty();
}

std::vector<int64_t> ConvSpec::y() const {
  std::vector<int64_t> out = {x.empty() ? 0 : x[0], w.empty() ? 0 : w[0]};
  for (size_t d = 0; d + 2 < x.size() && d + 2 < w.size(); ++d) {
    const int64_t span = (w[d + 2] - 1) * dilations.at(d) + 1;
    out.push_back((x[d + 2] + 2 * pads.at(d) - span) / strides.at(d) + 1);
  }
  return out;
}

std::string ConvSpec::describe() const {
  return "conv x[" + join(x) + "] w[" + join(w) + "] s" + join(strides) + " d" + join(dilations) + " p" + join(pads) +
         " g" + std::to_string(group);
}

struct CudnnConv::Impl {
  explicit Impl(const ConvSpec& spec) : spec_(spec) {}
  cudnnTensorDescriptor_t xd = nullptr, yd = nullptr;
  cudnnFilterDescriptor_t wd = nullptr;
  cudnnConvolutionDescriptor_t cd = nullptr;
  cudnnConvolutionFwdAlgo_t algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  size_t workspace = 0;
  bool timed = false;  // chosen by timing the candidates (else the heuristic's first)
  bool recorded = false;  // chosen by an earlier process's timing (jit/tuning.h)
  float ms = 0;        // its time, when timed
  const ConvSpec& spec_;  // the owner's, named for TERRACE_DNN
  ~Impl() {            // also where planning failed half-way
    if (cd) dnn().cudnnDestroyConvolutionDescriptor(cd);
    if (wd) dnn().cudnnDestroyFilterDescriptor(wd);
    for (cudnnTensorDescriptor_t t : {xd, yd})
      if (t) dnn().cudnnDestroyTensorDescriptor(t);
  }

  void set_descriptors(const CudnnShapes& s) {
    const int nd = int(s.x.size());
    const std::vector<int> xi = ints(s.x), wi = ints(s.w), yi = ints(s.y);
    TERRACE_DNN(CompileFailed, cudnnCreateTensorDescriptor, &xd);
    TERRACE_DNN(CompileFailed, cudnnCreateTensorDescriptor, &yd);
    TERRACE_DNN(CompileFailed, cudnnCreateFilterDescriptor, &wd);
    TERRACE_DNN(CompileFailed, cudnnCreateConvolutionDescriptor, &cd);
    TERRACE_DNN(CompileFailed, cudnnSetTensorNdDescriptor, xd, CUDNN_DATA_FLOAT, nd, xi.data(),
                packed_strides(xi).data());
    TERRACE_DNN(CompileFailed, cudnnSetFilterNdDescriptor, wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, nd, wi.data());
    const std::vector<int> pi = ints(s.pads), si = ints(s.strides), di = ints(s.dilations);
    TERRACE_DNN(CompileFailed, cudnnSetConvolutionNdDescriptor, cd, nd - 2, pi.data(), si.data(), di.data(),
                CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT);
    TERRACE_DNN(CompileFailed, cudnnSetConvolutionGroupCount, cd, int(spec_.group));
    // fp32 stays fp32: no TF32 tensor cores (CUDNN_DEFAULT_MATH would allow them on Ampere and later).
    TERRACE_DNN(CompileFailed, cudnnSetConvolutionMathType, cd, CUDNN_FMA_MATH);
    std::vector<int> got(size_t(nd), 0);
    TERRACE_DNN(CompileFailed, cudnnGetConvolutionNdForwardOutputDim, cd, xd, wd, nd, got.data());
    TERRACE_CHECK(got == yi, Internal, spec_.describe(), ": cuDNN's output dims differ from ONNX's [", join(s.y), "]");
    TERRACE_DNN(CompileFailed, cudnnSetTensorNdDescriptor, yd, CUDNN_DATA_FLOAT, nd, yi.data(),
                packed_strides(yi).data());
  }

  // The candidates, in the heuristic's order: algorithms that sum directly, with FMA math, whose
  // workspace fits.
  std::vector<Candidate> candidates(cudnnHandle_t h) const {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int returned = 0;
    TERRACE_DNN(CompileFailed, cudnnGetConvolutionForwardAlgorithm_v7, h, xd, wd, cd, yd,
                CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf);
    std::vector<Candidate> found;
    std::string refused;
    for (int i = 0; i < returned; ++i) {
      const cudnnConvolutionFwdAlgoPerf_t& r = perf[i];
      if (r.status != CUDNN_STATUS_SUCCESS || (!any_algorithm() && !sums_directly(r.algo)) ||
          r.mathType == CUDNN_TENSOR_OP_MATH || r.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) {
        continue;
      }
      size_t bytes = 0;
      // With the descriptor's FMA math: an algorithm that needs tensor ops is refused here.
      if (dnn().cudnnGetConvolutionForwardWorkspaceSize(h, xd, wd, cd, yd, r.algo, &bytes) != CUDNN_STATUS_SUCCESS ||
          bytes > kMaxWorkspaceBytes) {
        refused += std::string(refused.empty() ? "" : ", ") + algo_name(r.algo);
        continue;
      }
      found.push_back({r.algo, bytes});
    }
    TERRACE_CHECK(!found.empty(), CompileFailed, spec_.describe(),
                  ": cuDNN offers no fp32 FMA algorithm that sums directly",
                  refused.empty() ? std::string() : " (refused: " + refused + ")");
    return found;
  }

  // The candidate to run: the fastest by device time (fastest_or_first: the heuristic's first
  // unless another is more than 5% faster). This runs at compile time, on the background thread,
  // on zeroed scratch tensors of the problem's sizes, each candidate captured into a CUDA graph as
  // tier 2's whole plans run it (graph_time_ms); the heuristic's first where timing fails.
  size_t fastest(cudnnHandle_t h, const CudnnShapes& s, std::vector<Candidate>& candidates) {
    size_t best = 0;
    try {
      Stream stream;
      TERRACE_DNN(CompileFailed, cudnnSetStream, h, stream.get());
      const CUstream cs = stream.get();
      auto zeroed = [&](const std::vector<int64_t>& shape) {
        DeviceBuffer b(size_t(shape_numel(shape)) * sizeof(float), cs);
        TERRACE_CU(cuMemsetD8Async, b.ptr(), 0, b.bytes(), cs);
        return b;
      };
      DeviceBuffer xb = zeroed(s.x), wb = zeroed(s.w), yb = zeroed(s.y);
      const float alpha = 1.0f, beta = 0.0f;
      std::vector<float> ms;
      for (Candidate& c : candidates) {
        DeviceBuffer workspace(c.workspace, cs);
        c.ms = graph_time_ms(stream, [&] {
          TERRACE_DNN(CompileFailed, cudnnConvolutionForward, h, &alpha, xd, reinterpret_cast<const void*>(xb.ptr()),
                      wd, reinterpret_cast<const void*>(wb.ptr()), cd, c.algo,
                      reinterpret_cast<void*>(workspace.ptr()), c.workspace, &beta, yd,
                      reinterpret_cast<void*>(yb.ptr()));
        });
        ms.push_back(c.ms);
      }
      stream.synchronize();  // the scratch buffers are freed in order before the stream goes
      best = fastest_or_first(ms);
      timed = true;
    } catch (const Error& e) {
      if (e.code() == ErrorCode::OutOfMemory) throw;
      log(LogLevel::Info, "tier 2: ", spec_.describe(), ": timing cuDNN's algorithms failed (", e.message(),
          "); the heuristic's first is used");
      best = 0;
    }
    dnn().cudnnSetStream(h, nullptr);  // the timing stream is gone; every run sets its own
    return best;
  }
};

CudnnConv::CudnnConv(const ConvSpec& spec, const CodeCache* tuning) : spec_(spec), impl_(std::make_unique<Impl>(spec_)) {
  std::string why;
  TERRACE_CHECK(cudnn_available(&why), NotImplemented, "cuDNN is not available: ", why);
  device();  // the primary context current on this (compile) thread, for cuDNN's runtime
  const CudnnShapes s = cudnn_shapes(spec);
  Impl& p = *impl_;
  p.set_descriptors(s);
  Handle h(spec.describe());
  std::vector<Candidate> candidates = p.candidates(h.h);
  // Timed where there is a choice, unless an earlier process's record names a candidate on offer;
  // TERRACE_CUDNN_TUNE=0 keeps the heuristic's first.
  size_t best = 0;
  if (candidates.size() > 1 && env_flag("TERRACE_CUDNN_TUNE", true)) {
    const std::string key = tuning_key(spec);
    best = candidates.size();
    if (std::optional<std::string> kept = find_tuned(tuning, key))
      for (size_t i = 0; i < candidates.size() && best == candidates.size(); ++i)
        if (*kept == algo_name(candidates[i].algo)) best = i;
    p.recorded = best < candidates.size();
    if (!p.recorded) {
      TuningTimer timer;
      best = p.fastest(h.h, s, candidates);
      if (p.timed) keep_tuned(tuning, key, algo_name(candidates[best].algo));
    }
  }
  p.algo = candidates[best].algo;
  p.workspace = candidates[best].workspace;
  p.ms = candidates[best].ms;
  log(LogLevel::Debug, "tier 2: ", spec.describe(), ": cuDNN ", algorithm());
}

CudnnConv::~CudnnConv() = default;

std::string CudnnConv::algorithm() const {
  std::string s = std::string(algo_name(impl_->algo)) + ", workspace " + std::to_string(impl_->workspace) + " B";
  if (impl_->timed) s += ", timed " + std::to_string(impl_->ms) + " ms";
  if (impl_->recorded) s += ", from the tuning record";
  return s;
}

size_t CudnnConv::workspace_bytes() const { return impl_->workspace; }

void CudnnConv::run(CUdeviceptr x, CUdeviceptr w, CUdeviceptr y, CUstream stream) const {
  const Impl& p = *impl_;
  Handle h(spec_.describe());
  TERRACE_DNN(RuntimeError, cudnnSetStream, h.h, stream);
  DeviceBuffer workspace(p.workspace, stream);  // from the stream-ordered pool
  const float alpha = 1.0f, beta = 0.0f;
  TERRACE_DNN(RuntimeError, cudnnConvolutionForward, h.h, &alpha, p.xd, reinterpret_cast<const void*>(x), p.wd,
              reinterpret_cast<const void*>(w), p.cd, p.algo, reinterpret_cast<void*>(workspace.ptr()), p.workspace,
              &beta, p.yd, reinterpret_cast<void*>(y));
}

}  // namespace terrace::jit::cuda
