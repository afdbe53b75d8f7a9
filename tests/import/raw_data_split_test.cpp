// Loading a model file with its large weights read from the file's mapping rather than parsed by
// protobuf (interp/raw_data_split.h): which fields are cut, that the values and the errors are
// those of the plain parse, and that bytes the splitter does not read are left to protobuf.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "interp/raw_data_split.h"
#include "interp/tensor_proto.h"
#include "tests/import/import_util.h"
#include "tiers/session.h"

namespace terrace::test {
namespace {

constexpr size_t kMiB = size_t(1) << 20;

// Y = MatMul(X, W) + B; W float [256, 1024] (1 MiB), B float [1024], S an unused int64 table of
// 1 MiB (integer data is never cut); W's bytes one larger when `wrong_size`.
std::string model_bytes(std::vector<float>& w, bool wrong_size = false) {
  onnx::ModelProto m = parse_model(R"(
<ir_version: 8, opset_import: ["" : 17]>
mm (float[N, 256] X) => (float[N, 1024] Y)
{
  P = MatMul(X, W)
  Y = Add(P, B)
}
)");
  w.resize(256 * 1024);
  for (size_t i = 0; i < w.size(); ++i) w[i] = float(int(i % 2003) - 1001) / 1024.0f;
  auto add = [&](const char* name, std::vector<int64_t> dims, int type, std::string raw) {
    add_raw_initializer(m, name, dims, type, std::move(raw));
  };
  std::string wb(reinterpret_cast<const char*>(w.data()), w.size() * sizeof(float));
  if (wrong_size) wb.push_back('\0');
  add("S", {int64_t(kMiB / 8)}, onnx::TensorProto::INT64, std::string(kMiB, '\1'));
  add("W", {256, 1024}, onnx::TensorProto::FLOAT, wb);
  add("B", {1024}, onnx::TensorProto::FLOAT, std::string(1024 * sizeof(float), '\0'));
  return bytes_of(m);
}

std::string write_file(const std::string& bytes, const std::string& leaf) {
  const auto dir = std::filesystem::temp_directory_path() / ("terrace-split-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / leaf).string();
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

TEST(RawDataSplit, only_large_float_raw_data_of_the_main_graph_is_cut) {
  std::vector<float> w;
  const std::string bytes = model_bytes(w);
  const std::optional<SplitModel> s = split_large_raw_data(bytes, kMiB);
  ASSERT_TRUE(s);
  ASSERT_EQ(s->cut.size(), 1u) << "W only: S is integer data, B is small";
  EXPECT_EQ(s->cut[0].first, 1u);  // W is the second initializer
  EXPECT_EQ(s->cut[0].second, std::string_view(reinterpret_cast<const char*>(w.data()), w.size() * sizeof(float)));
  EXPECT_LT(s->parsed.size(), bytes.size() - kMiB + 64);
  onnx::ModelProto parsed, whole;
  ASSERT_TRUE(parse_proto(s->parsed, &parsed));
  ASSERT_TRUE(parse_proto(bytes, &whole));
  EXPECT_EQ(parsed.graph().initializer(1).raw_data().size(), 1u);
  parsed.mutable_graph()->mutable_initializer(1)->clear_raw_data();
  whole.mutable_graph()->mutable_initializer(1)->clear_raw_data();
  EXPECT_EQ(bytes_of(parsed), bytes_of(whole)) << "everything else parses as before";
  EXPECT_FALSE(split_large_raw_data(bytes, 2 * kMiB)) << "nothing that large: parsed as it is";
}

TEST(RawDataSplit, bytes_it_does_not_read_are_left_to_protobuf) {
  std::vector<float> w;
  const std::string bytes = model_bytes(w);
  EXPECT_FALSE(split_large_raw_data(bytes.substr(0, bytes.size() - 10), kMiB)) << "truncated";
  onnx::ModelProto m;
  ASSERT_TRUE(parse_proto(bytes, &m));
  std::string twice = bytes_of(m);
  onnx::ModelProto graph_only;
  *graph_only.mutable_graph() = m.graph();
  twice += bytes_of(graph_only);  // a second graph field, which protobuf merges into the first
  EXPECT_FALSE(split_large_raw_data(twice, kMiB));
  EXPECT_FALSE(split_large_raw_data(std::string("\x0b\x00", 2), kMiB)) << "a group";
}

TEST(RawDataSplit, a_file_loads_the_values_and_errors_of_the_plain_parse) {
  std::vector<float> w;
  const std::string bytes = model_bytes(w);
  const Model from_file = load_onnx_file(write_file(bytes, "model.onnx"));
  const Model from_bytes = load_onnx_bytes(bytes);
  for (const char* name : {"W", "B", "S"}) {
    const Tensor& a = from_file.graph->initializers.at(from_file.graph->find_value(name));
    const Tensor& b = from_bytes.graph->initializers.at(from_bytes.graph->find_value(name));
    ASSERT_EQ(a.shape(), b.shape()) << name;
    EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0) << name;
  }
  std::vector<float> unused;
  const std::string bad = write_file(model_bytes(unused, true), "bad.onnx");
  try {
    load_onnx_file(bad);
    ADD_FAILURE() << "a raw_data one byte longer than W's dims loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidModel);
    EXPECT_NE(e.message().find("initializer 'W': raw_data holds 1048577 bytes"), std::string::npos) << e.message();
  }
  // A Session loaded from the file answers as one loaded from the bytes.
  Options interp;
  interp.max_tier = Tier::Interp;
  Tensor x = Tensor::empty(DType::Float32, {2, 256});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = float(i % 7) - 3.0f;
  const NamedTensors a = Session::load(write_file(bytes, "model.onnx"), interp)->run({{"X", x}});
  const NamedTensors b = Session::load_bytes(bytes, interp)->run({{"X", x}});
  EXPECT_EQ(std::memcmp(a.at(0).second.raw(), b.at(0).second.raw(), a.at(0).second.nbytes()), 0);
}

}  // namespace
}  // namespace terrace::test
