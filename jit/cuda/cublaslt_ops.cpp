// jit/cuda/cublaslt_ops.h: cuBLASLt dlopen'd; row-major GEMMs as the column-major products cuBLASLt
// computes (Y^T = op(B)^T op(A)^T: B's storage is the first operand, A's the second).
#include "jit/cuda/cublaslt_ops.h"

#include <cublasLt.h>

#include <cstring>
#include <mutex>
#include <optional>
#include <vector>

#include "interp/env_flag.h"
#include "interp/error.h"
#include "interp/log.h"
#include "jit/cuda/cuda_memory.h"
#include "jit/cuda/dynlib.h"
#include "jit/tuning.h"

namespace terrace::jit::cuda {

namespace {

#define TERRACE_LT_ENTRY_POINTS(X)                                                                  \
  X(cublasLtCreate) X(cublasLtGetStatusString) X(cublasLtMatmulDescCreate)                         \
  X(cublasLtMatmulDescDestroy) X(cublasLtMatmulDescSetAttribute) X(cublasLtMatrixLayoutCreate)     \
  X(cublasLtMatrixLayoutDestroy) X(cublasLtMatrixLayoutSetAttribute)                               \
  X(cublasLtMatmulPreferenceCreate) X(cublasLtMatmulPreferenceDestroy)                             \
  X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmul)        \
  X(cublasLtGetVersion)

struct Lt {
#define TERRACE_LT_FIELD(name) decltype(&::name) name = nullptr;
  TERRACE_LT_ENTRY_POINTS(TERRACE_LT_FIELD)
#undef TERRACE_LT_FIELD
  cublasLtHandle_t handle = nullptr;
  std::string path, why;
};

Lt& lt() {
  static Lt l;
  static std::once_flag once;
  std::call_once(once, [] {
    std::string why;
    if (!gpu_available(&why)) {
      l.why = why;
      return;
    }
    LibrarySearch search{"TERRACE_CUBLASLT_PATH",
                         {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"},
                         {"/usr/local/cuda/lib64"}};
    void* lib = open_library(search, &l.path, &why);
    if (!lib) {
      l.why = "no cuBLASLt: " + why;
      return;
    }
#define TERRACE_LT_BIND(name)                                                                   \
  l.name = reinterpret_cast<decltype(&::name)>(library_symbol(lib, #name));                     \
  if (!l.name && l.why.empty()) l.why = l.path + " lacks " #name;
    TERRACE_LT_ENTRY_POINTS(TERRACE_LT_BIND)
#undef TERRACE_LT_BIND
    if (!l.why.empty()) return;
    device();
    if (cublasStatus_t s = l.cublasLtCreate(&l.handle); s != CUBLAS_STATUS_SUCCESS)
      l.why = std::string("cublasLtCreate: ") + l.cublasLtGetStatusString(s);
  });
  return l;
}

// Every cuBLASLt call: its name and cuBLASLt's string for the status.
#define TERRACE_LT(call, ...)                                                                   \
  do {                                                                                          \
    cublasStatus_t s_ = lt().call(__VA_ARGS__);                                                 \
    if (s_ != CUBLAS_STATUS_SUCCESS)                                                            \
      ::terrace::fail(s_ == CUBLAS_STATUS_ALLOC_FAILED ? ::terrace::ErrorCode::OutOfMemory      \
                                                       : ::terrace::ErrorCode::RuntimeError,    \
                      #call ": ", lt().cublasLtGetStatusString(s_), " (", spec_.describe(), ")"); \
  } while (0)

// Hopper's recommended cuBLAS workspace (GPU-NOTES.md).
constexpr size_t kWorkspaceBytes = size_t(32) << 20;
// The heuristic's candidates timed per GEMM where tuning is on.
constexpr int kCandidates = 8;

// What a timed choice depends on: the GPU, the driver, cuBLASLt and the problem.
std::string tuning_key(const GemmSpec& spec) {
  const Device& d = device();
  return "cublaslt-gemm|" + d.name + "|" + d.arch() + "|driver " + std::to_string(driver().version) + "|cublasLt " +
         std::to_string(lt().cublasLtGetVersion()) + "|" + spec.describe() + " strides " +
         std::to_string(spec.stride_a) + "," + std::to_string(spec.stride_b);
}

// An algorithm as the record keeps it: its opaque bytes in hex.
std::string algo_text(const cublasLtMatmulAlgo_t& a) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < sizeof a; ++i) {
    const uint8_t b = reinterpret_cast<const uint8_t*>(&a)[i];
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

}  // namespace

bool cublaslt_available(std::string* why) {
  const Lt& l = lt();
  if (!l.why.empty() && why) *why = l.why;
  return l.why.empty();
}

std::string GemmSpec::describe() const {
  std::string s = "gemm " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
  if (batch > 1) s += " batch " + std::to_string(batch);
  if (trans_a) s += " A^T";
  if (trans_b) s += " B^T";
  if (has_c) s += " +C";
  if (has_bias) s += " +bias";
  if (relu) s += " relu";
  return s;
}

struct CublasLtGemm::Impl {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t first = nullptr, second = nullptr, out = nullptr;
  cublasLtMatmulAlgo_t algo{};
  std::optional<DeviceBuffer> workspace;
  size_t workspace_bytes = 0;
  std::string chosen = "the heuristic's first";  // or "timed ..." / "from the tuning record"

  // The heuristic's candidates whose workspace fits, best first (at least one).
  std::vector<cublasLtMatmulHeuristicResult_t> candidates(const GemmSpec& spec) const {
    cublasLtMatmulPreference_t pref = nullptr;
    cublasStatus_t s = lt().cublasLtMatmulPreferenceCreate(&pref);
    size_t ws = kWorkspaceBytes;
    std::vector<cublasLtMatmulHeuristicResult_t> found(kCandidates);
    int n = 0;
    if (s == CUBLAS_STATUS_SUCCESS)
      s = lt().cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    if (s == CUBLAS_STATUS_SUCCESS)
      s = lt().cublasLtMatmulAlgoGetHeuristic(lt().handle, desc, first, second, out, out, pref, kCandidates,
                                              found.data(), &n);
    if (pref) lt().cublasLtMatmulPreferenceDestroy(pref);
    found.resize(size_t(std::max(n, 0)));
    std::erase_if(found, [](const auto& r) { return r.state != CUBLAS_STATUS_SUCCESS || r.workspaceSize > kWorkspaceBytes; });
    if (s != CUBLAS_STATUS_SUCCESS || found.empty())
      fail(ErrorCode::RuntimeError, "cublasLtMatmulAlgoGetHeuristic: ",
           s != CUBLAS_STATUS_SUCCESS ? lt().cublasLtGetStatusString(s) : "no algorithm", " (", spec.describe(), ")");
    return found;
  }

  // The candidate to run: as cuDNN's (jit/cuda/cudnn_ops.cpp), by device time on zeroed scratch
  // operands (fastest_or_first); the heuristic's first where timing fails.
  size_t fastest(const GemmSpec& spec, const std::vector<cublasLtMatmulHeuristicResult_t>& found) {
    try {
      Stream stream;
      const CUstream cs = stream.get();
      auto zeroed = [&](int64_t elements) {
        DeviceBuffer b(size_t(std::max<int64_t>(elements, 1)) * sizeof(float), cs);
        TERRACE_CU(cuMemsetD8Async, b.ptr(), 0, b.bytes(), cs);
        return b;
      };
      const int64_t batch_a = spec.stride_a ? spec.batch : 1, batch_b = spec.stride_b ? spec.batch : 1;
      DeviceBuffer a = zeroed(batch_a * spec.m * spec.k), b = zeroed(batch_b * spec.k * spec.n),
                   c = zeroed(spec.m * spec.n), bias = zeroed(spec.n), y = zeroed(spec.batch * spec.m * spec.n);
      std::vector<float> ms;
      for (const cublasLtMatmulHeuristicResult_t& r : found) {
        DeviceBuffer workspace(r.workspaceSize, cs);
        ms.push_back(graph_time_ms(stream, [&] {
          enqueue(spec, r.algo, workspace.ptr(), r.workspaceSize, a.ptr(), b.ptr(), c.ptr(), bias.ptr(), y.ptr(), cs);
        }));
      }
      stream.synchronize();  // the scratch buffers are freed in order before the stream goes
      const size_t best = fastest_or_first(ms);
      chosen = "timed " + std::to_string(ms[best]) + " ms, candidate " + std::to_string(best + 1) + " of " +
               std::to_string(found.size()) + " (the heuristic's first " + std::to_string(ms[0]) + " ms)";
      return best;
    } catch (const Error& e) {
      if (e.code() == ErrorCode::OutOfMemory) throw;
      log(LogLevel::Info, "tier 2: ", spec.describe(), ": timing cuBLASLt's algorithms failed (", e.message(),
          "); the heuristic's first is used");
      return 0;
    }
  }

  void enqueue(const GemmSpec& spec, const cublasLtMatmulAlgo_t& with, CUdeviceptr workspace, size_t workspace_bytes,
               CUdeviceptr a, CUdeviceptr b, CUdeviceptr c, CUdeviceptr bias, CUdeviceptr y, CUstream stream) const;
};

CublasLtGemm::CublasLtGemm(const GemmSpec& spec, const CodeCache* tuning, bool time_candidates)
    : spec_(spec), impl_(std::make_unique<Impl>()) {
  std::string why;
  TERRACE_CHECK(cublaslt_available(&why), NotImplemented, "cuBLASLt is not available: ", why);
  TERRACE_CHECK(!(spec.has_c && spec.batch > 1), InvalidArgument, spec.describe(), ": C with a batch");
  Impl& p = *impl_;
  TERRACE_LT(cublasLtMatmulDescCreate, &p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  // Column-major view: D[n,m] = op1(B) * op2(A).
  cublasOperation_t op1 = spec.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, op2 = spec.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  TERRACE_LT(cublasLtMatmulDescSetAttribute, p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op1, sizeof op1);
  TERRACE_LT(cublasLtMatmulDescSetAttribute, p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op2, sizeof op2);
  cublasLtEpilogue_t epilogue = spec.has_bias ? (spec.relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
                                              : (spec.relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT);
  TERRACE_LT(cublasLtMatmulDescSetAttribute, p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue);
  const uint64_t n = uint64_t(spec.n), m = uint64_t(spec.m), k = uint64_t(spec.k);
  // B stored [k,n] row-major is [n,k] column-major (ld n); stored [n,k] (trans_b) it is [k,n] (ld k).
  if (spec.trans_b) TERRACE_LT(cublasLtMatrixLayoutCreate, &p.first, CUDA_R_32F, k, n, int64_t(k));
  else TERRACE_LT(cublasLtMatrixLayoutCreate, &p.first, CUDA_R_32F, n, k, int64_t(n));
  if (spec.trans_a) TERRACE_LT(cublasLtMatrixLayoutCreate, &p.second, CUDA_R_32F, m, k, int64_t(m));
  else TERRACE_LT(cublasLtMatrixLayoutCreate, &p.second, CUDA_R_32F, k, m, int64_t(k));
  TERRACE_LT(cublasLtMatrixLayoutCreate, &p.out, CUDA_R_32F, n, m, int64_t(n));
  if (spec.batch > 1) {
    int32_t count = int32_t(spec.batch);
    int64_t sb = spec.stride_b, sa = spec.stride_a, sd = int64_t(m * n);
    for (auto [layout, stride] : {std::pair{p.first, sb}, std::pair{p.second, sa}, std::pair{p.out, sd}}) {
      TERRACE_LT(cublasLtMatrixLayoutSetAttribute, layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count);
      TERRACE_LT(cublasLtMatrixLayoutSetAttribute, layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                 sizeof stride);
    }
  }
  const std::vector<cublasLtMatmulHeuristicResult_t> found = p.candidates(spec);
  // Timed where asked and there is a choice, unless an earlier process's record names a candidate
  // on offer.
  size_t best = 0;
  if (found.size() > 1 && time_candidates) {
    const std::string key = tuning_key(spec);
    best = found.size();
    if (std::optional<std::string> kept = find_tuned(tuning, key))
      for (size_t i = 0; i < found.size() && best == found.size(); ++i)
        if (*kept == algo_text(found[i].algo)) best = i;
    if (best < found.size()) {
      p.chosen = "from the tuning record";
    } else {
      TuningTimer timer;
      best = p.fastest(spec, found);
      if (p.chosen.rfind("timed", 0) == 0) keep_tuned(tuning, key, algo_text(found[best].algo));
    }
  }
  p.algo = found[best].algo;
  p.workspace_bytes = found[best].workspaceSize;
  log(LogLevel::Debug, "tier 2: ", spec.describe(), ": cuBLASLt ", p.chosen);
}

CublasLtGemm::~CublasLtGemm() {
  Impl& p = *impl_;
  for (auto* l : {p.first, p.second, p.out})
    if (l) lt().cublasLtMatrixLayoutDestroy(l);
  if (p.desc) lt().cublasLtMatmulDescDestroy(p.desc);
}

// Sets the bias pointer on the shared descriptor: runs of one GEMM are serialised by its version's
// stream, as before.
void CublasLtGemm::Impl::enqueue(const GemmSpec& spec, const cublasLtMatmulAlgo_t& with, CUdeviceptr workspace,
                                 size_t workspace_bytes, CUdeviceptr a, CUdeviceptr b, CUdeviceptr c, CUdeviceptr bias,
                                 CUdeviceptr y, CUstream stream) const {
  const GemmSpec& spec_ = spec;  // named for TERRACE_LT's message
  if (spec.has_bias) {
    void* ptr = reinterpret_cast<void*>(bias);
    TERRACE_LT(cublasLtMatmulDescSetAttribute, desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &ptr, sizeof ptr);
  }
  const float beta = spec.has_c ? spec.beta : 0.0f;
  const void* c_ptr = spec.has_c ? reinterpret_cast<const void*>(c) : reinterpret_cast<const void*>(y);
  TERRACE_LT(cublasLtMatmul, lt().handle, desc, &spec.alpha, reinterpret_cast<const void*>(b), first,
             reinterpret_cast<const void*>(a), second, &beta, c_ptr, out, reinterpret_cast<void*>(y), out, &with,
             reinterpret_cast<void*>(workspace), workspace_bytes, stream);
}

void CublasLtGemm::run(CUdeviceptr a, CUdeviceptr b, CUdeviceptr c, CUdeviceptr bias, CUdeviceptr y,
                       CUstream stream) const {
  Impl& p = *impl_;
  DeviceBuffer workspace(p.workspace_bytes, stream);  // from the stream-ordered pool: about a microsecond
  p.enqueue(spec_, p.algo, workspace.ptr(), p.workspace_bytes, a, b, c, bias, y, stream);
}

std::string CublasLtGemm::algorithm() const { return impl_->chosen; }

}  // namespace terrace::jit::cuda
