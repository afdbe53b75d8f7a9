// Loading a model file without protobuf copying its weights: the main graph's large initializers'
// raw_data fields are cut out of the bytes protobuf parses (each left as a one-byte raw_data, so
// ONNX's checker still sees one value field) and read from the file's mapping instead, straight
// into Tensor::file_backed. Protobuf's copy was the largest left in a load (BERT-base: 0.86 s
// against ONNX Runtime's 0.6).
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <onnx/onnx_pb.h>

namespace terrace {

struct SplitModel {
  std::string parsed;  // the model's bytes with each cut raw_data field cut to one byte
  // (index among the main graph's initializers, its raw bytes in the input)
  std::vector<std::pair<size_t, std::string_view>> cut;
};

// Cuts every raw_data field of at least `min_bytes` from the main graph's initializers (but the
// integer, bool and string ones, which shape inference may read as data) of a ModelProto's bytes. nullopt where nothing is cut, or where the bytes are not plain wire format
// this reads (groups, a graph field given twice, lengths past the end): then the bytes are parsed
// as they are, and protobuf says what is wrong with them.
std::optional<SplitModel> split_large_raw_data(std::string_view model, size_t min_bytes);

// The raw bytes of TensorProtos whose raw_data was cut (tensor_proto.h reads them through
// raw_data_of), for the thread that loads a model, while an instance lives.
class CutRawData {
 public:
  // `mapped`: the bytes lie in a read-only mapping of the file (done() may drop their pages).
  explicit CutRawData(bool mapped);
  ~CutRawData();
  CutRawData(const CutRawData&) = delete;
  CutRawData& operator=(const CutRawData&) = delete;
  void add(const onnx::TensorProto* p, std::string_view bytes);
  // This thread's cut bytes for `p`, or nullopt.
  static std::optional<std::string_view> find(const onnx::TensorProto& p);
  // Lets the kernel drop the pages of `p`'s bytes once they have been copied (a mapping's pages
  // would stay resident to the end of the load).
  static void done(const onnx::TensorProto& p);

 private:
  std::vector<std::pair<const onnx::TensorProto*, std::string_view>> cut_;
  bool mapped_;
  CutRawData* outer_;
};

}  // namespace terrace
