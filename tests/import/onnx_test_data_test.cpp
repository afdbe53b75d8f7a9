// Every model of the ONNX backend test data loads or fails with a clean terrace::Error.
#include <filesystem>
#include <map>

#include "tests/import/import_util.h"

namespace terrace::test {
namespace {

namespace fs = std::filesystem;
constexpr const char* kTestData = "/usr/share/libonnx-testdata/data";

TEST(OnnxTestData, every_model_loads_or_fails_cleanly) {
  if (!fs::is_directory(kTestData)) GTEST_SKIP() << kTestData << " is not installed";
  std::map<std::string, int> loaded, total;
  std::map<std::string, int> failures_by_code;
  for (const auto& suite : fs::directory_iterator(kTestData)) {
    if (!suite.is_directory()) continue;
    std::string name = suite.path().filename().string();
    for (const auto& test : fs::directory_iterator(suite.path())) {
      fs::path model = test.path() / "model.onnx";
      if (!fs::exists(model)) continue;
      ++total[name];
      try {
        load_onnx_file(model.string());
        ++loaded[name];
      } catch (const Error& e) {
        ++failures_by_code[error_code_name(e.code())];
        // Only unsupported features may fail; a malformed-model verdict on ONNX's own test data
        // would be an importer bug, except for the few models that reference missing files.
        if (e.code() != ErrorCode::NotImplemented)
          ADD_FAILURE() << test.path().filename().string() << ": " << e.what();
      }
    }
  }
  for (const auto& [name, n] : total)
    std::printf("[ summary  ] %s: %d of %d models load\n", name.c_str(), loaded[name], n);
  for (const auto& [code, n] : failures_by_code)
    std::printf("[ summary  ] %d models fail with %s\n", n, code.c_str());
  EXPECT_GT(loaded["node"], 800);
}

// Reads test_data_set_0's input_i.pb / output_i.pb as the kinds the graph declares for them.
int load_test_data(const Graph& g, const fs::path& test_dir) {
  int files = 0;
  auto load = [&](const std::vector<int>& ids, const char* prefix) {
    for (size_t i = 0; i < ids.size(); ++i) {
      fs::path pb = test_dir / "test_data_set_0" / (prefix + std::to_string(i) + ".pb");
      if (!fs::exists(pb)) continue;
      ValueKind kind = g.value(ids[i]).info.kind;
      load_value_pb(pb.string(), kind == ValueKind::Unknown ? ValueKind::Tensor : kind);
      ++files;
    }
  };
  load(g.inputs, "input_");
  load(g.outputs, "output_");
  return files;
}

TEST(OnnxTestData, node_test_data_files_load_as_their_declared_kinds) {
  fs::path node = fs::path(kTestData) / "node";
  if (!fs::is_directory(node)) GTEST_SKIP() << node << " is not installed";
  int files = 0;
  for (const auto& test : fs::directory_iterator(node)) {
    Model m;
    try {
      m = load_onnx_file((test.path() / "model.onnx").string());
    } catch (const Error&) {
      continue;  // counted by every_model_loads_or_fails_cleanly
    }
    try {
      files += load_test_data(*m.graph, test.path());
    } catch (const Error& e) {
      ADD_FAILURE() << test.path().filename().string() << ": " << e.what();
    }
  }
  std::printf("[ summary  ] %d node test data files load\n", files);
  EXPECT_GT(files, 2000);
}

}  // namespace
}  // namespace terrace::test
