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

}  // namespace
}  // namespace terrace::test
