// Tier-1 matrix products, convolutions and pooling through oneDNN (ARCHITECTURE.md),
// float32, on the caller's plain row-major / NCHW buffers. Each object is one primitive built for
// one signature (the region's guards keep the shapes fixed); run() is thread-safe.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "interp/graph.h"

namespace terrace::jit {

class DnnlPrimitive;
// dst [rows, n] = src [rows, k] . weights [k, n] (+ bias [n]), plain row-major float32, the rows
// given per call (run_shaped; oneDNN's runtime dims): one primitive for every size of a symbolic dim.
std::unique_ptr<DnnlPrimitive> make_rows_matmul(const Node& node, int64_t k, int64_t n, bool bias);
// dst [batch, m, n] = a [batch, m, k] . b [batch, k, n], both operands computed, m, k and n given
// per call (an attention's products over a symbolic sequence length).
std::unique_ptr<DnnlPrimitive> make_batched_matmul(const Node& node, int64_t batch);

class DnnlPrimitive {
 public:
  virtual ~DnnlPrimitive() = default;
  virtual const Shape& output_shape() const = 0;
  // inputs: the node's inputs in ONNX order (nullptr for an absent optional one).
  virtual void run(const std::vector<const float*>& inputs, float* output) const = 0;
  // A primitive with several outputs (a convolution chain whose intermediate results are read
  // outside its region): their shapes in order, the first being output_shape(), and a run that
  // writes them all.
  virtual size_t num_outputs() const { return 1; }
  virtual std::vector<Shape> output_shapes() const { return {output_shape()}; }
  virtual void run_outputs(const std::vector<const float*>& inputs, const std::vector<float*>& outputs) const {
    run(inputs, outputs.at(0));
  }
  // A primitive built for shapes known per call (make_rows_matmul, make_batched_matmul): its run
  // with the call's shapes of its first two inputs.
  virtual void run_shaped(const std::vector<const float*>& inputs, const std::vector<float*>& outputs,
                          const Shape& /*a*/, const Shape& /*b*/) const {
    run_outputs(inputs, outputs);
  }
  virtual bool runtime_shapes() const { return false; }
  // What the primitive is, for dumps and repros: the oneDNN primitive, its shapes, attributes and
  // post-ops ("oneDNN matmul: src [5,7] x weights [7,3] -> dst [5,3]; post-ops: relu").
  std::string describe() const { return description_; }

 protected:
  std::string description_;
};

// An activation applied to a primitive's result before it is stored (a oneDNN post-op): the Relu
// or Clip (Relu6 in MobileNets) that follows a convolution or a product in many models, fused
// instead of a pass of its own. Both are monotone and 1-Lipschitz, so a bound on the error before
// them holds after them too; the other kinds (Sigmoid, Tanh, LeakyRelu, Elu, HardSwish, Gelu in
// its erf and tanh forms) carry the bound through their slope plus their own rounding
// (jit/cpu/dnnl_activation.h). On inputs that are not all finite, the activation is applied with the
// interpreter's semantics instead (see all_finite in dnnl_ops.cpp).
struct DnnlActivation {
  // Swish: x * Sigmoid(x), the SiLU exporters write as those two nodes (cpu_library::swish_of).
  enum class Kind { None, Relu, Clip, Sigmoid, Tanh, LeakyRelu, Elu, HardSwish, HardSigmoid, Gelu, GeluTanh, Swish };
  Kind kind = Kind::None;
  float lo = 0.0f, hi = 0.0f;  // Clip's bounds, lo <= hi
  float alpha = 0.0f;          // LeakyRelu's slope below 0, Elu's alpha, HardSigmoid's slope
  float beta = 0.0f;           // HardSigmoid's offset
};

// ONNX MatMul (numpy broadcasting of batch dimensions, 1-D operands promoted), Gemm (transA,
// transB, alpha, beta, C broadcast to the output), Conv (1-3 spatial dimensions, groups, pads,
// auto_pad, strides, dilations, optional bias), MaxPool (without Indices) and AveragePool (pads,
// auto_pad, strides, dilations, ceil_mode, count_include_pad; refused with NotImplemented where
// oneDNN's windows cannot match ONNX's: an average counting padding whose ceil_mode window passes
// the pads, a window over padding only). `constants[i]`, when set, is the value of input i
// known at compile time (an initializer): a convolution's weights are then reordered once, here,
// into the layout oneDNN prefers. Throws Error(NotImplemented) naming the node and what is not
// supported, and Error(CompileFailed) with oneDNN's message when it builds no primitive.
std::unique_ptr<DnnlPrimitive> make_dnnl_primitive(const Node& node, const std::vector<Shape>& input_shapes,
                                                   const std::vector<const Tensor*>& constants,
                                                   DnnlActivation activation = {});

// One op of a convolution chain (make_dnnl_conv_chain). `inputs` name chain inputs by index
// (>= 0) or op k's result (-1 - k): a Conv's x, w and optional b; an Add's other operand; a
// Scale's two operands in the Mul's order, one of them per channel ([N or 1, C, 1, ...]: a
// squeeze-and-excitation block's Mul); a Concat's values along channels (4-D); a Slice's one
// value, of which it keeps channels [begin, end) (one output of a channel Split, 4-D).
struct DnnlChainOp {
  enum class Kind { Conv, Activation, Add, Pool, Scale, Concat, Slice } kind = Kind::Conv;
  Node node;                    // the ONNX node (a Conv's attributes; names in errors)
  std::vector<int> inputs;
  DnnlActivation activation;    // Kind::Activation
  int64_t begin = 0, end = 0;   // Kind::Slice
};

// Convolutions, each with the activations and the residual Add that follow it as post-ops
// (ResNet's Conv-Relu-Conv-Relu-Conv-Add-Relu, MobileNetV2's Conv-Clip-Conv-Clip-Conv, whole
// stages of them), run in the layouts oneDNN chooses (blocked, e.g. nChw16c on AVX-512): the
// chain's input is reordered from plain NCHW once, the intermediates never leave the blocked
// layout, the outputs are reordered back once; constant weights are reordered once, here. The
// first op is a Conv (or a MaxPool/AveragePool) reading a chain input; each later Conv or pool
// reads an earlier result (the last op of a step: a Conv and its post-ops, or a pool), an
// activation follows a Conv or an Add, an Add follows a Conv and reads a chain input or an earlier
// result of its shape. A pool runs in the layout its producer wrote (ResNet's stem: Conv, Relu,
// MaxPool, then the first block's two Convs reading the pool, all in one chain). A Scale multiplies
// an earlier result (or a chain input) by a per-channel value in the blocked layout, so that a
// squeeze-and-excitation block (pool, two 1x1 Convs, the Mul) stays in the chain. A Concat of
// channels and a Slice of them (YOLO's C2f: Split, branches, Concat) copy whole channel blocks in
// the blocked layout (jit/cpu/channel_loops.h). An Add may also follow a Conv's activation (a
// bottleneck's residual after SiLU: a sum post-op after the eltwise one). `outputs`: the
// ops whose results run() writes, in order (empty: the last op's). A single Conv whose kernel is
// 1x1 keeps plain layouts (as fast as reordering at its edges, measured). A chain
// with a zero-sized tensor never reaches oneDNN, and one whose inputs are not all finite runs
// with the interpreter's semantics (its Conv kernel and its activations). run() takes the chain
// inputs in order.
std::unique_ptr<DnnlPrimitive> make_dnnl_conv_chain(const std::vector<DnnlChainOp>& ops,
                                                    const std::vector<Shape>& input_shapes,
                                                    const std::vector<const Tensor*>& constants,
                                                    const std::vector<int>& outputs = {});

// "" when make_dnnl_primitive handles this node with float32 inputs of these ranks (shapes may
// still be refused at compile time), else the reason.
std::string dnnl_can_compile(const Node& node, const std::vector<DType>& dtypes,
                             const std::vector<std::optional<size_t>>& ranks);

}  // namespace terrace::jit
