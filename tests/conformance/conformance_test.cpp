// Conformance harness tests: value comparison as ONNX's runner does it, and test classification.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include <gtest/gtest.h>
#include <onnx/defs/parser.h>
#include <onnx/onnx_pb.h>

#include "interp/onnx_import.h"
#include "tools/conformance.h"

namespace terrace::conformance {
namespace {

namespace fs = std::filesystem;

Tensor floats(std::vector<float> v) { return Tensor::from_vector<float>({int64_t(v.size())}, v); }

bool same(const RValue& want, const RValue& got) { return !compare_values(want, got, kOnnxTolerance); }

TEST(CompareValues, floats_within_rtol_and_atol_match) {
  EXPECT_TRUE(same(floats({1000.f, 0.f}), floats({1000.9f, 1e-8f})));
  EXPECT_FALSE(same(floats({1000.f}), floats({1001.1f})));
  EXPECT_FALSE(same(floats({0.f}), floats({1e-6f})));  // atol is 1e-7, as in ONNX's runner
}

TEST(CompareValues, nan_positions_must_match) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(same(floats({nan, 1.f}), floats({nan, 1.f})));
  EXPECT_FALSE(same(floats({nan, 1.f}), floats({1.f, nan})));
}

TEST(CompareValues, infinities_must_be_equal) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(same(floats({inf, -inf}), floats({inf, -inf})));
  EXPECT_FALSE(same(floats({inf}), floats({-inf})));
  EXPECT_FALSE(same(floats({inf}), floats({3e38f})));
}

TEST(CompareValues, dtype_and_shape_must_match_exactly) {
  EXPECT_FALSE(same(floats({1.f}), Tensor::from_vector<double>({1}, {1.0})));
  EXPECT_FALSE(same(floats({1.f, 2.f}), Tensor::from_vector<float>({1, 2}, {1.f, 2.f})));
}

TEST(CompareValues, integers_and_strings_are_exact) {
  EXPECT_FALSE(same(Tensor::from_vector<int64_t>({1}, {INT64_MAX}),
                    Tensor::from_vector<int64_t>({1}, {INT64_MAX - 1})));
  EXPECT_FALSE(same(Tensor::from_vector<std::string>({1}, {"a"}),
                    Tensor::from_vector<std::string>({1}, {"b"})));
}

TEST(CompareValues, sequences_compare_length_then_elements) {
  RValue two = RValue::sequence({floats({1.f}), floats({2.f})});
  EXPECT_TRUE(same(two, RValue::sequence({floats({1.f}), floats({2.f})})));
  EXPECT_FALSE(same(two, RValue::sequence({floats({1.f})})));
  auto m = compare_values(two, RValue::sequence({floats({1.f}), floats({3.f})}), kOnnxTolerance);
  ASSERT_TRUE(m);
  EXPECT_NE(m->find("sequence element 1"), std::string::npos) << *m;
  EXPECT_FALSE(same(two, RValue(floats({1.f}))));  // a tensor is not a sequence
}

TEST(CompareValues, optionals_compare_presence_then_element) {
  RValue empty;
  empty.kind = ValueKind::Optional;
  RValue full = empty;
  full.has_element = true;
  full.tensor = floats({1.f});
  EXPECT_TRUE(same(empty, empty));
  EXPECT_FALSE(same(empty, full));
  RValue other = full;
  other.tensor = floats({2.f});
  EXPECT_FALSE(same(full, other));
}

// Writes ONNX-test-data folders (model.onnx, test_data_set_0/) under a temporary root.
class TestFolders : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = ::testing::TempDir() + "/terrace_conformance_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // A test whose model is the ONNX text `model` (or raw bytes when it does not parse).
  TestCase make(const std::string& name, const std::string& model, const std::vector<Tensor>& inputs,
                const std::vector<Tensor>& outputs) {
    std::string dir = root_ + "/" + name;
    fs::create_directories(dir + "/test_data_set_0");
    onnx::ModelProto m;
    std::string bytes = model;
    if (onnx::OnnxParser::Parse(m, model.c_str()).IsOK()) m.SerializeToString(&bytes);
    std::ofstream(dir + "/model.onnx", std::ios::binary) << bytes;
    for (size_t i = 0; i < inputs.size(); ++i)
      save_tensor_pb(inputs[i], dir + "/test_data_set_0/input_" + std::to_string(i) + ".pb");
    for (size_t i = 0; i < outputs.size(); ++i)
      save_tensor_pb(outputs[i], dir + "/test_data_set_0/output_" + std::to_string(i) + ".pb");
    return {name, dir};
  }

  std::string root_;
};

const char* kRelu = R"(
<ir_version: 8, opset_import: ["" : 17]>
g (float[2] X) => (float[2] Y) { Y = Relu(X) }
)";

TEST_F(TestFolders, matching_outputs_pass) {
  TestResult r = run_test(make("test_relu", kRelu, {floats({-1.f, 2.f})}, {floats({0.f, 2.f})}), Tier::Interp);
  EXPECT_EQ(r.status, Status::Passed) << r.message;
}

TEST_F(TestFolders, wrong_output_is_result_differs_naming_the_output) {
  TestResult r = run_test(make("test_relu", kRelu, {floats({-1.f, 2.f})}, {floats({0.f, 3.f})}), Tier::Interp);
  EXPECT_EQ(r.status, Status::ResultDiffers);
  EXPECT_NE(r.message.find("'Y'"), std::string::npos) << r.message;
}

TEST_F(TestFolders, malformed_model_is_invalid_model) {
  TestResult r = run_test(make("test_bad", "not a model", {}, {}), Tier::Interp);
  EXPECT_EQ(r.status, Status::InvalidModel) << r.message;
}

TEST_F(TestFolders, op_of_another_domain_is_not_implemented) {
  const char* custom = R"(
<ir_version: 8, opset_import: ["" : 17, "com.example" : 1]>
g (float[2] X) => (float[2] Y) { Y = com.example.Frobnicate(X) }
)";
  TestResult r = run_test(make("test_custom", custom, {floats({1.f, 2.f})}, {floats({1.f, 2.f})}), Tier::Interp);
  EXPECT_EQ(r.status, Status::NotImplemented) << r.message;
}

TEST_F(TestFolders, wrong_input_dtype_is_run_error) {
  TestResult r = run_test(make("test_relu", kRelu, {Tensor::from_vector<int32_t>({2}, {1, 2})},
                               {floats({1.f, 2.f})}),
                          Tier::Cpu);
  EXPECT_EQ(r.status, Status::RunError) << r.message;
}

TEST_F(TestFolders, discovery_filters_and_sorts_by_name) {
  make("test_b", kRelu, {}, {});
  make("test_a", kRelu, {}, {});
  make("other", kRelu, {}, {});
  std::vector<TestCase> tests = discover_tests({root_}, std::regex("^test_"));
  ASSERT_EQ(tests.size(), 2u);
  EXPECT_EQ(tests[0].name, "test_a");
  EXPECT_EQ(tests[1].name, "test_b");
}

TEST_F(TestFolders, isolated_runs_give_the_in_process_results_in_order) {
  std::vector<TestCase> tests = {
      make("test_pass", kRelu, {floats({-1.f, 2.f})}, {floats({0.f, 2.f})}),
      make("test_fail", kRelu, {floats({-1.f, 2.f})}, {floats({1.f, 2.f})}),
      make("test_bad", "not a model", {}, {})};
  std::vector<TestResult> isolated = run_tests_isolated(tests, Tier::Interp, 2, 60);
  ASSERT_EQ(isolated.size(), tests.size());
  for (size_t i = 0; i < tests.size(); ++i) {
    TestResult here = run_test(tests[i], Tier::Interp);
    EXPECT_EQ(isolated[i].name, tests[i].name);
    EXPECT_EQ(isolated[i].status, here.status) << isolated[i].message;
    EXPECT_EQ(isolated[i].message, here.message);
  }
}

}  // namespace
}  // namespace terrace::conformance
