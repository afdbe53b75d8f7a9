// ONNX import: model files or bytes -> a validated terrace::Graph; TensorProto files <-> Tensors.
#pragma once
#include <map>
#include <string>
#include <string_view>

#include "interp/graph.h"

namespace onnx {
class ModelProto;
}

namespace terrace {

struct Model {
  std::shared_ptr<Graph> graph;
  int64_t ir_version = 0;
  std::map<std::string, int64_t> opsets;  // domain ("" is the default domain) -> version
  std::string producer;
  std::string dir;  // folder the model was loaded from (external data is confined to it)
};

// Loads, validates (Terrace's own checks first, then ONNX's checker and shape inference) and
// converts a model. Every malformed model is an Error with code InvalidModel (or NotImplemented
// for valid models that use what Terrace lacks, IoError for unreadable files) naming the problem.
Model load_onnx_file(const std::string& path);
// `base_dir` is where external data files are looked up; empty: external data is rejected.
Model load_onnx_bytes(std::string_view bytes, const std::string& base_dir = "");
// What load_onnx_bytes does after parsing (Terrace's checks, ONNX's checker, shape inference,
// conversion), on a model built in memory (interp/graph_builder.h); `mp` is consumed.
Model load_onnx_model(onnx::ModelProto& mp, const std::string& base_dir = "");

// Serialized TensorProto <-> Tensor (the .pb files of ONNX test data and `terrace run --input`).
Tensor tensor_from_pb_bytes(std::string_view bytes, const std::string& what);
Tensor load_tensor_pb(const std::string& path);
std::string tensor_to_pb_bytes(const Tensor& t, const std::string& name = "");
void save_tensor_pb(const Tensor& t, const std::string& path, const std::string& name = "");
// A .pb file holding a TensorProto, SequenceProto or OptionalProto, read as the given kind.
RValue load_value_pb(const std::string& path, ValueKind kind);

}  // namespace terrace
