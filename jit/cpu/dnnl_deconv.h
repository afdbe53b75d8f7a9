// Tier 1's ConvTranspose through oneDNN (dnnl::deconvolution_forward), float32 on plain NCHW
// buffers, one primitive per signature (ARCHITECTURE.md, jit/cpu/dnnl_ops.h). The geometry (pads,
// auto_pad, output_padding, output_shape) is the interpreter's conv_transpose_geometry, so the
// attributes mean one thing everywhere; the arithmetic is oneDNN's, validated against the
// interpreter within cpu_library's error allowance.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "interp/graph.h"
#include "jit/cpu/dnnl_ops.h"

namespace terrace::jit {

// ONNX ConvTranspose (1-3 spatial dimensions, groups, strides, dilations, pads, auto_pad,
// output_padding, output_shape, optional bias) with an optional activation fused as a post-op.
// Output rows the transposed kernel never reaches (output_padding, an output_shape larger than
// the full result, negative pads) hold the bias, as in the interpreter: oneDNN computes the part
// its taps reach and the rest is filled. A zero-sized tensor never reaches oneDNN, and inputs
// that are not all finite (with an activation to fuse) run the interpreter's kernel and
// activation. `constants[1]`, when set, is the weights' value known at compile time: reordered
// once into the layout oneDNN prefers. Throws Error(InvalidArgument) naming the node for shapes
// that do not fit, Error(NotImplemented) for more than 3 spatial dimensions, Error(CompileFailed)
// with oneDNN's message when it builds no primitive.
std::unique_ptr<DnnlPrimitive> make_dnnl_deconvolution(const Node& node, const std::vector<Shape>& input_shapes,
                                                       const std::vector<const Tensor*>& constants,
                                                       DnnlActivation activation = {});

// "" when make_dnnl_deconvolution handles a ConvTranspose with inputs of these dtypes and ranks
// (shapes may still be refused at compile time), else the reason.
std::string dnnl_deconv_can_compile(const Node& node, const std::vector<DType>& dtypes,
                                    const std::vector<std::optional<size_t>>& ranks);

}  // namespace terrace::jit
