// Tier 1's library regions: a MatMul, Gemm or ConvTranspose (and the activation it absorbed), a
// MaxPool, an AveragePool, an LSTM, GRU or RNN (its outputs read outside) run by a oneDNN primitive, or a chain of convolutions (with the Relu/Clip activations and residual Adds after
// them) run in oneDNN's blocked layouts, validated against a bound on their own fp32 rounding
// computed op by op. tiers/cpu/cpu_backend.cpp asks these functions about library ops and hands such
// regions to compile_library.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "interp/graph.h"
#include "jit/cpu/dnnl_ops.h"
#include "kernels/fusion_group.h"
#include "tiers/partition.h"

namespace terrace::cpu_library {

// True for the ops tier 1 runs through oneDNN, each opening a region of its own.
bool is_library_op(Op op);
// MaxPool and AveragePool: a region of their own, or steps of a convolution chain.
inline bool is_pool(Op op) {
  return op == Op::MaxPool || op == Op::AveragePool || op == Op::GlobalAveragePool || op == Op::GlobalMaxPool;
}

// "" when tier 1 compiles `node` (a library op) through oneDNN, else the reason.
std::string can_compile(const Graph& g, const Node& node);

// True when `next`, the only reader of `last`'s result, joins the library region `last` ends:
// after a MatMul, Gemm or ConvTranspose its activation (Relu, Clip, Sigmoid, Tanh, LeakyRelu, Elu,
// HardSwish, Gelu: jit/cpu/dnnl_activation.h); after a Conv its activation, the next Conv (constant
// weights), a pool, a per-channel Mul, a Concat or Split along channels (4-D), or a residual Add of
// a value of the same static shape (also after the Conv's activation); after those, as after a
// Conv; after a pool, a Mul, a Concat or a Split, the next Conv, pool, Mul, Concat or Split.
bool absorbs(const Graph& g, const Node& last, const Node& next);

// Per region output, the error allowance of a library region (see Backend::error_allowance);
// undefined tensors for any other region.
std::vector<Tensor> error_allowance(const Graph& g, const Region& region, const std::vector<Tensor>& inputs);

// A compiled library region: its primitive and its buffers' slots (inputs in node order, then the
// output) in the region's slot table.
struct LibraryPart {
  std::unique_ptr<jit::DnnlPrimitive> primitive;
  std::vector<int> slots;
  std::string node;  // the op's node, for errors
};

// Compiles a library region; `slots` holds the region's inputs' signatures and gets the output's
// appended.
LibraryPart compile_library(const Graph& g, const Region& region, std::vector<kernels::TensorSig>& slots);

// A symbolic version of a library region (issue 36): a MatMul (and its bias) of constant float32
// [K, N] weights whose symbolic dims (`positions`, (input, dim)) are all rows of its first operand,
// as one primitive taking the rows per call (jit::make_rows_matmul). No primitive, and why in
// `why`, for any other region (products with an activation or two activations, convolutions,
// pools, recurrences: their primitives are made for one shape).
LibraryPart compile_rows_matmul(const Graph& g, const Region& region, std::vector<kernels::TensorSig>& slots,
                                const std::vector<std::pair<int, int>>& positions, std::string& why);

}  // namespace terrace::cpu_library
