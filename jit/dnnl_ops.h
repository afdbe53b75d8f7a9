// Tier-1 matrix products and convolutions through oneDNN (ARCHITECTURE.md),
// float32, on the caller's plain row-major / NCHW buffers. Each object is one primitive built for
// one signature (the region's guards keep the shapes fixed); run() is thread-safe.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "interp/graph.h"

namespace terrace::jit {

class DnnlPrimitive {
 public:
  virtual ~DnnlPrimitive() = default;
  virtual const Shape& output_shape() const = 0;
  // inputs: the node's inputs in ONNX order (nullptr for an absent optional one).
  virtual void run(const std::vector<const float*>& inputs, float* output) const = 0;
  // What the primitive is, for dumps and repros: the oneDNN primitive, its shapes, attributes and
  // post-ops ("oneDNN matmul: src [5,7] x weights [7,3] -> dst [5,3]; post-ops: relu").
  std::string describe() const { return description_; }

 protected:
  std::string description_;
};

// ONNX MatMul (numpy broadcasting of batch dimensions, 1-D operands promoted), Gemm (transA,
// transB, alpha, beta, C broadcast to the output) and Conv (1-3 spatial dimensions, groups, pads,
// auto_pad, strides, dilations, optional bias). `constants[i]`, when set, is the value of input i
// known at compile time (an initializer): a convolution's weights are then reordered once, here,
// into the layout oneDNN prefers. Throws Error(NotImplemented) naming the node and what is not
// supported, and Error(CompileFailed) with oneDNN's message when it builds no primitive.
// An activation applied to the primitive's result before it is stored (a oneDNN post-op): the
// Relu that follows a convolution or a product in many models, fused instead of a pass of its own.
// (Clip as a post-op was measured and left out: with the plain layouts here, oneDNN 2.6's
// im2col+GEMM convolution applies it slowly, and MobileNetV2 took 70-126 ms instead of 33.)
struct DnnlActivation {
  enum class Kind { None, Relu } kind = Kind::None;
};

std::unique_ptr<DnnlPrimitive> make_dnnl_primitive(const Node& node, const std::vector<Shape>& input_shapes,
                                                   const std::vector<const Tensor*>& constants,
                                                   DnnlActivation activation = {});

// "" when make_dnnl_primitive handles this node with float32 inputs of these ranks (shapes may
// still be refused at compile time), else the reason.
std::string dnnl_can_compile(const Node& node, const std::vector<DType>& dtypes,
                             const std::vector<std::optional<size_t>>& ranks);

}  // namespace terrace::jit
