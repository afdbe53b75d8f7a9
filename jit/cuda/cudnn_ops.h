// Convolutions on the GPU through cuDNN 9's legacy API, dlopen'd like libcuda and cuBLASLt: NCHW
// fp32 in IEEE fp32 arithmetic (CUDNN_FMA_MATH: no TF32, no tensor-op conversion), groups
// (depthwise included), symmetric pads, strides and dilations, 1 to 3 spatial dims. Bias, residual
// and activation are not cuDNN's here: strict fp32 has no fused cuDNN plan (GPU-NOTES.md section
// 4), so tier 2 runs them in a generated epilogue kernel (tiers/gpu/gpu_conv.cpp).
//
// libcudnn's search order: $TERRACE_CUDNN_PATH (the library, or a folder holding libcudnn.so.9),
// then libcudnn.so.9 through the dynamic loader, then /usr/local/cuda/lib64 and /usr/local/cuda/lib,
// then Python environments' wheels (PyTorch's nvidia-cudnn-cu12/cu13): nvidia/cudnn/lib and
// nvidia/cu13/lib under site-packages and dist-packages of $VIRTUAL_ENV/lib/python3*, $CONDA_PREFIX/lib/python3*,
// /usr/lib/python3*, /usr/local/lib/python3*, /opt/*/lib/python3* and ~/.local/lib/python3*.
// libcudnn.so.9 finds its sub-libraries (libcudnn_cnn.so.9, ...) beside itself ($ORIGIN).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "jit/cuda/cuda_driver.h"

namespace terrace::jit {
class CodeCache;
}

namespace terrace::jit::cuda {

// True when there is a GPU and libcudnn (major version 9) loads with every entry point Terrace
// uses; otherwise false with the reason. The library is loaded once per process (the GPU is asked
// about on every call); no cuDNN handle is created here (the first convolution planned does).
bool cudnn_available(std::string* why = nullptr);

// The search itself, run afresh (no GPU needed): true with the library's path and its version
// ("9.19.0") when a libcudnn of major version 9 with every entry point loads, else false with
// why. For tests and diagnostics (terrace's reports); cudnn_available keeps the first answer.
bool cudnn_probe(std::string* path, std::string* version, std::string* why);

// y = conv(x, w): x [N, C, D...], w [M, C/group, k...], 1 to 3 spatial dims, cross-correlation
// as ONNX's Conv, pads the same at both ends of each spatial dim (pads.size() == spatial dims).
struct ConvSpec {
  std::vector<int64_t> x, w;
  int64_t group = 1;
  std::vector<int64_t> strides, dilations, pads;
  std::vector<int64_t> y() const;  // [N, M, out...]
  std::string describe() const;     // "conv x[1,64,56,56] w[64,64,3,3] s1,1 d1,1 p1,1 g1"
};

// A convolution planned once (descriptors, an algorithm, its workspace size) and run often.
// The candidates are the algorithms cuDNN's heuristic offers that sum products directly
// (IMPLICIT_GEMM, IMPLICIT_PRECOMP_GEMM, GEMM, DIRECT), whose rounding the fp32 bound of any
// summation order covers; FFT and Winograd transforms, whose errors scale with the whole tile's or
// tensor's magnitudes rather than each output's own terms, are never chosen. Where several
// remain, each is timed (captured into a CUDA graph and replayed, on zeroed scratch tensors) and
// the fastest kept, unless the tuning record in `tuning` (jit/tuning.h) names one on offer;
// TERRACE_CUDNN_TUNE=0 takes the heuristic's first instead. Planning runs at compile time.
class CudnnConv {
 public:
  // Throws Error(NotImplemented) without cuDNN, Error(CompileFailed) for a problem cuDNN refuses
  // or that is too large for its 32-bit dims, naming the call and cuDNN's message. Needs
  // N > 0 and a non-empty output (an empty problem is the caller's: no cuDNN call).
  explicit CudnnConv(const ConvSpec& spec, const CodeCache* tuning = nullptr);
  ~CudnnConv();
  CudnnConv(const CudnnConv&) = delete;
  CudnnConv& operator=(const CudnnConv&) = delete;
  // Device pointers, NCHW packed; asynchronous on `stream`. The workspace comes from the
  // stream-ordered pool. Thread-safe (each call takes a cuDNN handle of its own from a pool).
  void run(CUdeviceptr x, CUdeviceptr w, CUdeviceptr y, CUstream stream) const;
  const ConvSpec& spec() const { return spec_; }
  std::string algorithm() const;  // "IMPLICIT_PRECOMP_GEMM, workspace 0 B"
  size_t workspace_bytes() const;

 private:
  struct Impl;
  ConvSpec spec_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace terrace::jit::cuda
