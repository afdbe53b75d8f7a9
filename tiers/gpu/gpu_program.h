// What a tier-2 region is made of once compiled: its slot table (the region's inputs, its outputs,
// then intermediates) and its steps in launch order: generated kernels, cuBLASLt products, other
// library calls (cuDNN) and device-to-device copies. tiers/gpu/gpu_backend.cpp builds programs from
// the kernel IR and runs them; a library lowering (tiers/gpu/gpu_conv.*) builds one for a region of
// library ops.
#pragma once
#ifdef TERRACE_HAVE_CUDA
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "interp/tensor.h"
#include "jit/cuda/cublaslt_ops.h"
#include "jit/cuda/cuda_driver.h"
#include "kernels/fusion_group.h"

namespace terrace {

// One step of a GPU region: a generated kernel (fn), a cuBLASLt matmul (gemm: args are the slots
// of A, B, C, the bias and Y, -1 for those it has not), a library call (library: called with the
// device address of each slot of args, 0 for -1, and the stream), or a copy.
struct GpuKernel {
  std::string name;
  CUfunction fn = nullptr;
  std::shared_ptr<jit::cuda::CublasLtGemm> gemm;
  std::function<void(const CUdeviceptr* args, CUstream stream)> library;
  std::vector<int> args;  // per kernel parameter (LoweredFunc::buffers order): a region slot
  // A kernel whose rows move by 16-byte vectors: the parameters (indices into args) whose
  // pointers must be 16-byte aligned, and the kernel's element-by-element copy, launched where one
  // is not (kernels::cuda_aligned_params).
  std::vector<size_t> aligned;
  CUfunction element_fn = nullptr;
  int64_t extent = 1;     // the Parallel loop's range [0, extent)
  unsigned grid = 1, block = 1;
  bool copy = false;      // a device-to-device copy of slot args[0] into args[1] (a LoweredStep copy)
  // A lowered op's run-time index check (LoweredStep): the error word is zeroed before its first
  // kernel and read back after the region's last.
  int error_slot = -1;
  bool check_first = false, check_last = false;
  std::string node, error_message;
};

// A region's steps and slots; for generated kernels, their one CUDA C program.
struct GpuProgram {
  std::string source, ir;
  std::vector<GpuKernel> kernels;          // in launch order
  std::vector<kernels::TensorSig> slots;   // the region's inputs, its outputs, then intermediates
  std::vector<int> alias;                  // per slot, as LoweredRegion::alias (-1: own buffer)
  std::vector<Tensor> constants;           // values computed at compile time (alias -2 - i)
  std::vector<int> value_inputs;           // region inputs guarded by value
};

}  // namespace terrace
#endif
