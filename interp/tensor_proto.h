// TensorProto <-> Tensor: the one place that reads and writes ONNX tensor data (initializers,
// tensor attributes, .pb files), plus confined loading of external data and bounded proto parsing.
#pragma once
#include <string>
#include <string_view>

#include <onnx/onnx_pb.h>

#include "interp/tensor.h"

namespace terrace {

// The Terrace dtype of an ONNX TensorProto data-type code. Unknown codes are InvalidModel, valid
// ONNX types Terrace lacks (complex, ...) NotImplemented; `what` names the offending object.
DType dtype_from_proto_code(int code, const std::string& what);

// A TensorProto's raw_data: the field's, or where loading cut it from the parsed bytes
// (interp/raw_data_split.h), the bytes in the model file's mapping.
std::string_view raw_data_of(const onnx::TensorProto& p);

// Checks a TensorProto's type, dims and data size against each other without allocating anything
// proportional to the claimed size, so a hostile file cannot make Terrace allocate.
void check_tensor_proto(const onnx::TensorProto& p, const std::string& what);

// Converts a TensorProto (checked first) into a new Tensor. External data must already have been
// moved into raw_data by load_external_data; otherwise it is an InvalidModel error.
Tensor tensor_from_proto(const onnx::TensorProto& p, const std::string& what);
// The same, its values in a file's pages (Tensor::file_backed) when they take at least
// `file_backed_from` bytes: raw_data goes to the file without a heap copy first.
Tensor tensor_from_proto(const onnx::TensorProto& p, const std::string& what, size_t file_backed_from);

// Fills `p` with the tensor (raw_data for numbers and bools, string_data for strings).
void tensor_to_proto(const Tensor& t, onnx::TensorProto* p, const std::string& name = "");

// Replaces a tensor's external data (data_location EXTERNAL) with raw_data read from its file.
// The file must lie inside `base_dir`: a relative path without "..", no hard link, offset and
// length inside the file. A symbolic link on the way is followed only where it resolves inside
// `base_dir` or `link_root` (the Hugging Face cache: snapshots/REV/x -> ../../blobs/HASH), and the
// file it reaches must be a regular one. Tensors without external data are left alone.
void load_external_data(onnx::TensorProto& p, const std::string& base_dir, const std::string& what,
                        const std::string& link_root = "");

// How deep If/Loop/Scan bodies may nest in a model: each level is three protobuf messages
// (node, attribute, graph), and protobuf's parser recurses once per message level.
inline constexpr int kMaxSubgraphDepth = 64;
inline constexpr int kModelRecursionLimit = 3 * kMaxSubgraphDepth + 16;

// Parses a protobuf message from bytes (at most 2 GiB, the protobuf limit) nested at most
// `recursion_limit` messages deep; false on failure.
bool parse_proto(std::string_view bytes, google::protobuf::MessageLite* msg, int recursion_limit = kModelRecursionLimit);

// The whole content of a regular file of at most `max_bytes`; IoError naming the path if it
// cannot be read, is not a regular file (a FIFO, a device, a directory: checked without blocking
// and after following symlinks) or is larger. Every file Terrace reads comes through here or
// parse_proto_file.
inline constexpr uint64_t kMaxTensorFileBytes = uint64_t(1) << 31;  // protobuf parses no more
std::string read_file_bytes(const std::string& path, uint64_t max_bytes = kMaxTensorFileBytes);

// A read-only private mapping of the regular file at `path` (opened as read_file_bytes opens
// it), unmapped when it goes; IoError naming the path where it cannot be.
class FileMapping {
 public:
  explicit FileMapping(const std::string& path);
  ~FileMapping();
  FileMapping(const FileMapping&) = delete;
  FileMapping& operator=(const FileMapping&) = delete;
  std::string_view bytes() const { return bytes_; }

 private:
  std::string_view bytes_;
};

// Parses the protobuf message in the regular file at `path` (at most 2 GiB), reading it in blocks
// so that no copy of the whole file is held beside the message (a mapping's pages stay resident:
// loading BERT peaked at 1.02 GB, a 434 MB file and its parsed copy); nested at most
// `recursion_limit` messages deep. `size` gets the file's size. false when it does not parse;
// IoError naming the path when it cannot be opened or read.
bool parse_proto_file(const std::string& path, google::protobuf::MessageLite* msg, size_t* size,
                      int recursion_limit = kModelRecursionLimit);

}  // namespace terrace
