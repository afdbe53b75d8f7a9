// ONNX import (placeholder until the importer lands).
#include "interp/onnx_import.h"

namespace terrace {
Model load_onnx_file(const std::string& path) { fail(ErrorCode::NotImplemented, "ONNX import"); }
Model load_onnx_bytes(std::string_view, const std::string&) { fail(ErrorCode::NotImplemented, "ONNX import"); }
Tensor tensor_from_pb_bytes(std::string_view, const std::string&) { fail(ErrorCode::NotImplemented, "pb"); }
Tensor load_tensor_pb(const std::string&) { fail(ErrorCode::NotImplemented, "pb"); }
std::string tensor_to_pb_bytes(const Tensor&, const std::string&) { fail(ErrorCode::NotImplemented, "pb"); }
void save_tensor_pb(const Tensor&, const std::string&, const std::string&) { fail(ErrorCode::NotImplemented, "pb"); }
RValue load_value_pb(const std::string&, ValueKind) { fail(ErrorCode::NotImplemented, "pb"); }
}  // namespace terrace
