// Shape rules of data-movement ops that the interpreter (interp/ops/shape*.cpp) and tier 1's
// lowering (kernels/lower_movement*.cpp) must apply identically: Reshape's target, Slice's
// clamping, Pad's modes.
#pragma once
#include <cstdint>
#include <vector>

#include "interp/graph.h"

namespace terrace {

// Reshape's target: 0 copies the input dim (unless allowzero), -1 is inferred from the rest.
// InvalidArgument naming the node when the target does not fit the input.
Shape reshape_target(const Node& node, const Shape& in, std::vector<int64_t> target, bool allowzero);

// One axis of a slice after ONNX's clamping rules: `len` elements from `start` by `step`.
struct AxisRange {
  int64_t start, step, len;
};
AxisRange clamp_range(int64_t start, int64_t end, int64_t step, int64_t dim);

enum class PadMode { Constant, Reflect, Edge, Wrap };
// The node's `mode` attribute; InvalidModel naming the node for an unknown one.
PadMode pad_mode(const Node& node);

}  // namespace terrace
