// Shared helpers for the importer tests: models from ONNX text, serialization, expected failures.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <onnx/defs/parser.h>
#include <onnx/onnx_pb.h>

#include "interp/onnx_import.h"

namespace terrace::test {

// A ModelProto from ONNX's text format; fails the test if it does not parse.
inline onnx::ModelProto parse_model(const char* text) {
  onnx::ModelProto m;
  auto status = onnx::OnnxParser::Parse(m, text);
  EXPECT_TRUE(status.IsOK()) << status.ErrorMessage();
  return m;
}

// Adds an initializer holding `raw` as its raw_data.
inline void add_raw_initializer(onnx::ModelProto& m, const std::string& name, const std::vector<int64_t>& dims,
                                int data_type, std::string raw) {
  onnx::TensorProto* t = m.mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(data_type);
  for (int64_t d : dims) t->add_dims(d);
  t->set_raw_data(std::move(raw));
}

inline std::string bytes_of(const onnx::ModelProto& m) {
  std::string s;
  m.SerializeToString(&s);
  return s;
}

// X (float[N,3]) + initializer B, then Relu: the smallest model with every kind of graph value.
inline const char* kSmallModel = R"(
<ir_version: 8, opset_import: ["" : 17]>
small (float[N, 3] X) => (float[N, 3] Y)
<float[3] B = {1.0, 2.0, 3.0}>
{
  T = Add(X, B)
  Y = Relu(T)
}
)";

// The error loading `bytes` raises, or nullopt if it loads.
inline std::optional<Error> load_error(const std::string& bytes, const std::string& dir = "") {
  try {
    load_onnx_bytes(bytes, dir);
  } catch (const Error& e) {
    return e;
  }
  return std::nullopt;
}

// Expects loading to fail with `code` and a message containing `part`.
inline void expect_load_error(const std::string& bytes, ErrorCode code, const std::string& part,
                              const std::string& dir = "") {
  std::optional<Error> e = load_error(bytes, dir);
  ASSERT_TRUE(e.has_value()) << "the model loaded, but should fail with '" << part << "'";
  EXPECT_EQ(error_code_name(e->code()), std::string(error_code_name(code))) << e->what();
  EXPECT_NE(e->message().find(part), std::string::npos) << e->what();
}

}  // namespace terrace::test
