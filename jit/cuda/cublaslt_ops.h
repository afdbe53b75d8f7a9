// GEMM on the GPU through cuBLASLt, dlopen'd like libcuda: fp32 in IEEE fp32 arithmetic
// (CUBLAS_COMPUTE_32F: no TF32), row-major tensors, a bias along N and Relu as epilogues.
//
// libcublasLt's search order: $TERRACE_CUBLASLT_PATH (the library, or a folder holding it), then
// libcublasLt.so.13, libcublasLt.so.12 and libcublasLt.so through the dynamic loader, then
// /usr/local/cuda/lib64.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "jit/cuda/cuda_driver.h"

namespace terrace::jit {
class CodeCache;
}

namespace terrace::jit::cuda {

// True when libcublasLt loads (and a GPU is there); otherwise false with the reason.
bool cublaslt_available(std::string* why = nullptr);

// Y[b] = relu?(alpha * op(A[b]) * op(B[b]) + beta * C + bias) for b < batch, all row-major fp32:
// op(A) is [m,k] (A stored [k,m] when trans_a), op(B) is [k,n] (stored [n,k] when trans_b).
// C, when given, is [m,n] (batch 1); the bias a vector of n.
struct GemmSpec {
  int64_t m = 0, n = 0, k = 0;
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0;  // elements between batches (0: the operand is shared)
  bool trans_a = false, trans_b = false;
  float alpha = 1, beta = 0;
  bool has_c = false, has_bias = false, relu = false;
  std::string describe() const;  // "gemm 1x512x784 +bias relu"
};

// A GEMM planned once (layouts, an algorithm, its workspace) and run often. The algorithm: the
// heuristic's first, or with `time_candidates`, of its first 8 whose workspace fits, the fastest
// by device time (captured into a CUDA graph on zeroed scratch operands, as cuDNN's are timed)
// where another beats the first by more than 5%, unless the tuning record in `tuning`
// (jit/tuning.h) names one on offer. Every candidate sums in fp32 (CUBLAS_COMPUTE_32F), within the
// validator's bound for any summation order, split-K included.
class CublasLtGemm {
 public:
  // Throws Error(NotImplemented) where cuBLASLt is missing, Error(RuntimeError) naming the call
  // where it refuses the problem.
  explicit CublasLtGemm(const GemmSpec& spec, const CodeCache* tuning = nullptr, bool time_candidates = true);
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;
  // Device pointers; `c` and `bias` only where the spec has them. Asynchronous on `stream`.
  void run(CUdeviceptr a, CUdeviceptr b, CUdeviceptr c, CUdeviceptr bias, CUdeviceptr y, CUstream stream) const;
  const GemmSpec& spec() const { return spec_; }
  std::string algorithm() const;  // how the algorithm was chosen: "timed ...", "from the tuning record", ...

 private:
  struct Impl;
  GemmSpec spec_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace terrace::jit::cuda
