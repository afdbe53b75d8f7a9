// Static shape inference for imported models: ONNX's own inference, guarded against hostile input.
#pragma once
#include <onnx/onnx_pb.h>

#include <cstdint>
#include <string>
#include <vector>

namespace terrace {

// Fills in value_info (dtype and shape) of intermediate values with ONNX's shape inference.
// ONNX 1.12's per-op inference functions trust attribute values (an out-of-range `axis` indexes
// past a vector, a zero stride divides by zero), so each op's function runs behind a guard that
// skips the op when its attributes disagree with its inputs' ranks; the kernels then report the
// problem cleanly at run time. Inference is a best effort: when declared shapes (graph outputs,
// value_info) disagree with what the graph computes, it runs again without them and returns a
// warning per disagreeing output; when it still fails, every graph's value_info and outputs are
// restored, so a failure records nothing.
// Nodes in kOwnDomain (onnx_import moves there the ones whose version ONNX 1.12 does not know)
// are Terrace's to infer: their outputs' dtypes, and shapes where the op's rule is simple
// (same shape, broadcasting, Reduce*, Split); ONNX then carries on from what they give.
std::vector<std::string> infer_shapes(onnx::ModelProto& m);

// The most dims a value may have. An input whose length becomes a result's rank (Expand's and
// Reshape's shape, ConstantOfShape's input) is refused past it: a declared int64[2^40] would make
// inference build a shape of 2^40 dims.
inline constexpr int64_t kMaxRank = 64;

// Which input of `op` gives a result's rank by its length (-1: none); `second`: a second such input.
int rank_giving_input(const std::string& op, int* second = nullptr);

// The private domain of nodes whose op version is newer than ONNX 1.12's registry.
inline constexpr const char* kOwnDomain = "terrace.own";

}  // namespace terrace
