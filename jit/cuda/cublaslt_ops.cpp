// jit/cuda/cublaslt_ops.h: cuBLASLt dlopen'd; row-major GEMMs as the column-major products cuBLASLt
// computes (Y^T = op(B)^T op(A)^T: B's storage is the first operand, A's the second).
#include "jit/cuda/cublaslt_ops.h"

#include <cublasLt.h>

#include <mutex>
#include <optional>
#include <vector>

#include "interp/error.h"
#include "jit/cuda/cuda_memory.h"
#include "jit/cuda/dynlib.h"

namespace terrace::jit::cuda {

namespace {

#define TERRACE_LT_ENTRY_POINTS(X)                                                                  \
  X(cublasLtCreate) X(cublasLtGetStatusString) X(cublasLtMatmulDescCreate)                         \
  X(cublasLtMatmulDescDestroy) X(cublasLtMatmulDescSetAttribute) X(cublasLtMatrixLayoutCreate)     \
  X(cublasLtMatrixLayoutDestroy) X(cublasLtMatrixLayoutSetAttribute)                               \
  X(cublasLtMatmulPreferenceCreate) X(cublasLtMatmulPreferenceDestroy)                             \
  X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmul)

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
};

CublasLtGemm::CublasLtGemm(const GemmSpec& spec) : spec_(spec), impl_(std::make_unique<Impl>()) {
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
  cublasLtMatmulPreference_t pref = nullptr;
  TERRACE_LT(cublasLtMatmulPreferenceCreate, &pref);
  size_t ws = kWorkspaceBytes;
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t s = lt().cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                              sizeof ws);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = lt().cublasLtMatmulAlgoGetHeuristic(lt().handle, p.desc, p.first, p.second, p.out, p.out, pref, 1, &result,
                                           &found);
  lt().cublasLtMatmulPreferenceDestroy(pref);
  if (s != CUBLAS_STATUS_SUCCESS || found == 0)
    fail(ErrorCode::RuntimeError, "cublasLtMatmulAlgoGetHeuristic: ",
         s != CUBLAS_STATUS_SUCCESS ? lt().cublasLtGetStatusString(s) : "no algorithm", " (", spec.describe(), ")");
  p.algo = result.algo;
  p.workspace_bytes = result.workspaceSize;
}

CublasLtGemm::~CublasLtGemm() {
  Impl& p = *impl_;
  for (auto* l : {p.first, p.second, p.out})
    if (l) lt().cublasLtMatrixLayoutDestroy(l);
  if (p.desc) lt().cublasLtMatmulDescDestroy(p.desc);
}

void CublasLtGemm::run(CUdeviceptr a, CUdeviceptr b, CUdeviceptr c, CUdeviceptr bias, CUdeviceptr y,
                       CUstream stream) const {
  Impl& p = *impl_;
  if (spec_.has_bias) {
    void* ptr = reinterpret_cast<void*>(bias);
    TERRACE_LT(cublasLtMatmulDescSetAttribute, p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &ptr, sizeof ptr);
  }
  DeviceBuffer workspace(p.workspace_bytes, stream);  // from the stream-ordered pool: about a microsecond
  const float beta = spec_.has_c ? spec_.beta : 0.0f;
  const void* c_ptr = spec_.has_c ? reinterpret_cast<const void*>(c) : reinterpret_cast<const void*>(y);
  TERRACE_LT(cublasLtMatmul, lt().handle, p.desc, &spec_.alpha, reinterpret_cast<const void*>(b), p.first,
             reinterpret_cast<const void*>(a), p.second, &beta, c_ptr, p.out, reinterpret_cast<void*>(y), p.out,
             &p.algo, reinterpret_cast<void*>(workspace.ptr()), p.workspace_bytes, stream);
}

}  // namespace terrace::jit::cuda
