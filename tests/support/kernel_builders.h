// Kernels the tests of the kernel IR and its renderers build, and the check that CUDA C compiles.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "interp/error.h"
#include "kernels/fusion_group.h"
#include "kernels/lower.h"
#include "kernels/lower_op.h"
#include "tests/support/attrs.h"
#ifdef TERRACE_HAVE_CUDA
#include "jit/cuda/nvrtc.h"
#endif

namespace terrace::testing {

// A fusion group of one binary elementwise op over `a` and `b` (broadcast), lowered as the tiers
// get it.
inline kernels::LoweredFunc binary_kernel(const std::string& name, Op op, DType t, Shape a, Shape b) {
  kernels::FusionGroup g;
  g.name = name;
  g.inputs = {{t, std::move(a)}, {t, std::move(b)}};
  kernels::FusedOp f;
  f.node.op = op;
  f.node.name = "n0";
  f.node.inputs = {0, 0};
  f.node.outputs = {0};
  f.operands = {kernels::Operand::input(0), kernels::Operand::input(1)};
  g.ops.push_back(std::move(f));
  g.ops.back().result = kernels::infer_result(g, 0);
  g.outputs.push_back(0);
  return kernels::lower(g);
}

// ReduceSum over `axis` (1: each row, 0: each column) of a float32 [rows, cols], keepdims 0.
inline kernels::OpKernels reduce_sum_kernels(int64_t rows, int64_t cols, int64_t axis = 1) {
  Node n;
  n.op = Op::ReduceSum;
  n.name = "sum";
  n.inputs = {0, 1};
  n.outputs = {2};
  n.attrs["keepdims"] = int_attr(0);
  static const Tensor axes_1 = Tensor::from_vector<int64_t>({1}, {1});
  static const Tensor axes_0 = Tensor::from_vector<int64_t>({1}, {0});
  std::vector<kernels::OpInput> in(2);
  in[0].sig = {DType::Float32, {rows, cols}};
  in[1].sig = {DType::Int64, {1}};
  in[1].value = axis == 1 ? &axes_1 : &axes_0;
  return kernels::lower_op(n, in, "sum");
}

}  // namespace terrace::testing

// Compiles `source` for sm_90 into an ELF cubin, or skips the test where NVRTC cannot be loaded
// (a macro: GTEST_SKIP must return from the test itself).
#ifdef TERRACE_HAVE_CUDA
#define EXPECT_COMPILES_FOR_SM90(source, program)                                                   \
  do {                                                                                              \
    std::string why_;                                                                               \
    if (!::terrace::jit::nvrtc_available(&why_)) GTEST_SKIP() << "NVRTC cannot be loaded: " << why_; \
    try {                                                                                           \
      std::vector<char> cubin_ = ::terrace::jit::nvrtc_compile(source, "sm_90", program, {"-default-device"}); \
      EXPECT_GT(cubin_.size(), 64u);                                                                \
      EXPECT_EQ(std::string(cubin_.data(), 4), "\x7f" "ELF");                                       \
    } catch (const ::terrace::Error& e) {                                                           \
      ADD_FAILURE() << e.what() << "\n---- source ----\n" << source;                                \
    }                                                                                               \
  } while (0)
#else
#define EXPECT_COMPILES_FOR_SM90(source, program) GTEST_SKIP() << "built without TERRACE_WITH_CUDA"
#endif
