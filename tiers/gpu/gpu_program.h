// What a tier-2 region is made of once compiled: its slot table (the region's inputs, its outputs,
// then intermediates) and its steps in launch order (tiers/region_program.h's step type): generated
// kernels, cuBLASLt products, other library calls (cuDNN) and device-to-device copies. tiers/gpu/gpu_backend.cpp builds programs from
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
#include "tiers/region_program.h"

namespace terrace {

// Tier 2's work in a step (tiers/region_program.h): a generated kernel (fn), a cuBLASLt matmul
// (gemm: its slots are those of A, B, C, the bias and Y, -1 for those it has not), or a library
// call (library: called with the device address of each slot, 0 for -1, and the stream).
struct GpuWork {
  std::string name;
  CUfunction fn = nullptr;
  std::shared_ptr<jit::cuda::CublasLtGemm> gemm;
  std::function<void(const CUdeviceptr* args, CUstream stream)> library;
  // A kernel whose rows move by 16-byte vectors: the parameters (indices into the step's slots)
  // whose pointers must be 16-byte aligned, and the kernel's element-by-element copy, launched
  // where one is not (kernels::cuda_aligned_params).
  std::vector<size_t> aligned;
  CUfunction element_fn = nullptr;
  int64_t extent = 1;  // the Parallel loop's range [0, extent)
  unsigned grid = 1, block = 1;
};
using GpuStep = ProgramStep<GpuWork>;

// A region's steps and slots; for generated kernels, their one CUDA C program.
struct GpuProgram {
  std::string source, ir;
  std::vector<GpuStep> steps;              // in launch order
  std::vector<kernels::TensorSig> slots;   // the region's inputs, its outputs, then intermediates
  std::vector<int> alias;                  // per slot, as LoweredRegion::alias (-1: own buffer)
  std::vector<Tensor> constants;           // values computed at compile time (alias -2 - i)
  std::vector<int> value_inputs;           // region inputs guarded by value
};

}  // namespace terrace
#endif
