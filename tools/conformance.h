// Conformance engine: finds ONNX backend test folders, runs each on a tier, compares with ONNX's data.
#pragma once
#include <functional>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "interp/compare.h"
#include "interp/graph.h"
#include "tiers/options.h"

namespace terrace::conformance {

// The ONNX backend test data shipped by Debian's libonnx-testdata.
inline constexpr const char* kDataRoot = "/usr/share/libonnx-testdata/data";

// How a test ended. Every status but Passed is a failure; NotImplemented is reported apart.
enum class Status { Passed, NotImplemented, InvalidModel, LoadError, RunError, ResultDiffers };
inline constexpr Status kAllStatuses[] = {Status::Passed,      Status::NotImplemented,
                                          Status::InvalidModel, Status::LoadError,
                                          Status::RunError,    Status::ResultDiffers};
const char* status_name(Status s);   // "passed", "not_implemented", "invalid_model", ...
const char* status_title(Status s);  // "Passed", "Not implemented", "Invalid model", ...
std::optional<Status> status_from_name(const std::string& name);

struct TestCase {
  std::string name;  // the folder name, e.g. "test_abs"
  std::string dir;   // holds model.onnx and test_data_set_N/
};

struct TestResult {
  std::string name;
  Status status = Status::Passed;
  std::string message;  // why it failed (empty when passed)
  std::vector<std::string> tiers;  // tiers the last call ran on ("interp", "cpu", "gpu")
  double ms = 0;
};

// One test_data_set_N folder: the graph's inputs and, where it has output files, the expected
// outputs (empty where none), read as the graph declares their kinds.
struct DataSet {
  std::string name;  // "test_data_set_0"
  std::vector<RValue> inputs, outputs;
};
// The data sets of `dir` (test_data_set_N folders, in N order); InvalidArgument when there are
// none or a file does not fit the graph.
std::vector<DataSet> load_data_sets(const Graph& g, const std::string& dir);

// ONNX's backend test runner compares floats with numpy's assert_allclose(rtol=1e-3, atol=1e-7);
// the harness judges every tier against ONNX's data with it (Tolerance::for_dtype, ARCHITECTURE.md, is for a
// compiled tier against the interpreter).
inline constexpr Tolerance kOnnxTolerance{1e-3, 1e-7};

// ONNX 1.18's node tests (opsets up to 23), as tools/fetch_onnx_tests.sh downloads them to
// ~/.cache/terrace/onnx-tests/onnx-1.18.0/node; they have their own expected-failures file,
// tests/conformance_expected_onnx118.txt.
inline constexpr const char* kOnnx118Suite = "onnx-1.18";

// The download folder of a suite name such as kOnnx118Suite; empty for other names.
std::string downloaded_suite_dir(const std::string& name);

// A DIR argument: an existing folder, a short name for a folder under kDataRoot ("node",
// "simple", "pytorch-converted", "pytorch-operator"), or kOnnx118Suite when downloaded. Throws
// InvalidArgument if none.
std::string resolve_suite_dir(const std::string& arg);

// The tests in `dirs` (each a test folder itself or a folder of test folders) whose names match
// `filter` (searched, as ctest -R does), sorted by name so that runs are deterministic.
std::vector<TestCase> discover_tests(const std::vector<std::string>& dirs,
                                     const std::optional<std::regex>& filter);

// Loads the test's model, runs every data set on `tier` and compares the outputs. Never throws:
// every error is classified into the result.
TestResult run_test(const TestCase& test, Tier tier, const Tolerance& tol = kOnnxTolerance);

// run_test for each test, in order, in this process (fast). Should a test crash the process, a
// signal handler names it before the process dies.
// `progress`, where given, is called after each test with the count done and the test's result.
using ProgressFn = std::function<void(size_t done, const TestResult& last)>;
std::vector<TestResult> run_tests_in_process(const std::vector<TestCase>& tests, Tier tier,
                                             const Tolerance& tol = kOnnxTolerance,
                                             const ProgressFn& progress = {});

// run_test in a forked child, so that a crash or a hang (past `timeout_s`) becomes a RunError
// instead of ending the whole run. Results come back in `tests` order; up to `jobs` children run
// at once. The parent never runs a kernel, so it never starts OpenMP threads before forking.
std::vector<TestResult> run_tests_isolated(const std::vector<TestCase>& tests, Tier tier,
                                           int jobs, int timeout_s, const Tolerance& tol = kOnnxTolerance,
                                           const ProgressFn& progress = {});

// Empty when `got` matches `expected` (kind, dtype, shape exactly; floats within `tol`, NaNs at
// the same places, infinities equal; everything else exactly); otherwise the first mismatch.
std::optional<std::string> compare_values(const RValue& expected, const RValue& got,
                                          const Tolerance& tol);

}  // namespace terrace::conformance
