// Terrace's own model validation, run before ONNX's checker and shape inference.
#pragma once
#include <string>

#include <onnx/onnx_pb.h>

namespace terrace {

// The default-domain opset versions Terrace implements. Older models load when every op they use
// has the same meaning (schema version) at their opset as at kMinOpset; from opset 18 on, each
// node's version in force is checked against interp/op_versions.def (interp/op_versions.h).
constexpr int kMinOpset = 7;
constexpr int kMaxOpset = 23;

// Checks what ONNX 1.12's checker and shape inference would crash on or misjudge, and what would
// make Terrace allocate without bound: a missing graph, an unsupported opset (above kMaxOpset,
// or below kMinOpset with an op whose meaning changed since), tensors whose data
// size disagrees with their dims (checked before any allocation), negative dims, unknown data
// types, ops Terrace lacks or from other domains, undefined or doubly defined values, and cycles.
// Along the way it reads external data into raw_data (confined to `base_dir`, see
// load_external_data) and sorts every graph's nodes topologically (a cycle is InvalidModel), so
// the model it leaves is self-contained and ordered. Throws terrace::Error naming the problem.
// `link_root`: a second folder a symbolic link to external data may resolve into (where the model
// file's own link points: the Hugging Face cache's blobs folder).
void verify_model(onnx::ModelProto& m, const std::string& base_dir, const std::string& link_root = "");

// The default-domain opset version the model imports (after verify_model: always present).
int default_opset(const onnx::ModelProto& m);

// True for the ONNX default domain ("" or "ai.onnx").
bool is_default_domain(const std::string& domain);

}  // namespace terrace
