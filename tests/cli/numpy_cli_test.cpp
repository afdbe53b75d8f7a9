// The CLI speaks numpy (issue 37, point 3): --input NAME=FILE.npy and FILE.npz, --expect FILE.npy,
// --output-dir writing NAME.npy, run's summary of each output's values, and bench's --duration,
// --concurrency and latency percentiles. The files are written here byte by byte
// (tests/support/npy_bytes.h): numpy is not needed.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "tests/support/cli_harness.h"
#include "tests/support/npy_bytes.h"
#include "tools/npy.h"

namespace {
using namespace cli_harness;
using cli_harness::terrace;  // the function, over namespace terrace
using namespace npy_bytes;

std::string write(const std::string& name, const std::string& bytes) {
  fs::path p = scratch() / name;
  std::ofstream(p, std::ios::binary) << bytes;
  return p.string();
}

// x for elementwise_model(): float32[2, 8], -2 to 1.75 in steps of 0.25.
std::vector<float> x_values() {
  std::vector<float> v;
  for (int i = 0; i < 16; ++i) v.push_back(-2 + 0.25f * float(i));
  return v;
}

std::string x_npy() { return write("x.npy", npy_array("<f4", "(2, 8)", raw(x_values()))); }

// out/sum = a + b and out:sum = a - b, a and b float[2, 3]: two inputs, and output names that are
// no file names (and meet once cleaned).
std::string two_input_model() {
  static const std::string path = [] {
    onnx::ModelProto m = new_model();
    auto* g = m.mutable_graph();
    for (const char* in : {"a", "b"}) add_value_info(g->add_input(), in, {"2", "3"});
    for (const char* out : {"out/sum", "out:sum"}) add_value_info(g->add_output(), out, {"2", "3"});
    for (auto [op, out] : {std::pair{"Add", "out/sum"}, std::pair{"Sub", "out:sum"}}) {
      auto* n = g->add_node();
      n->set_op_type(op);
      n->add_input("a");
      n->add_input("b");
      n->add_output(out);
    }
    return save(m, "two_inputs");
  }();
  return path;
}

std::string ab_npz() {
  return write("ab.npz", zip({{"a.npy", npy_array("<f4", "(2, 3)", raw<float>({1, 2, 3, 4, 5, 6}))},
                              {"b.npy", npy_array("<f4", "(2, 3)", raw<float>({10, 20, 30, 40, 50, 60}))}}));
}

terrace::Tensor read_npy(const fs::path& p) { return terrace::cli::tensor_from_npy(slurp(p), p.string()); }

TEST(CliNumpy, run_reads_a_npy_input_and_writes_each_output_as_name_npy) {
  fs::path dir = scratch() / "npy_out";
  Result r = terrace("run " + elementwise_model() + " --input x=" + x_npy() + " --output-format npy --output-dir " + dir.string());
  ASSERT_EQ(r.code, 0) << show(r);
  ASSERT_TRUE(fs::is_regular_file(dir / "y.npy")) << show(r);
  EXPECT_NE(r.out.find("wrote " + (dir / "y.npy").string() + " (output y)"), std::string::npos) << show(r);
  terrace::Tensor y = read_npy(dir / "y.npy");
  ASSERT_EQ(y.shape(), (terrace::Shape{2, 8}));
  std::vector<float> x = x_values();
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(y.data<float>()[i], std::max(x[i], 0.f) + x[i]) << i;
  // The written file is an expected output for --expect, as a .npy file.
  Result again = terrace("run " + elementwise_model() + " --input x=" + x_npy() + " --expect y=" + (dir / "y.npy").string());
  EXPECT_EQ(again.code, 0) << show(again);
  EXPECT_NE(again.out.find("check y: matches"), std::string::npos) << show(again);
  Result bad = terrace("run " + elementwise_model() + " --input x=" + x_npy() + " --expect y=" + x_npy());
  EXPECT_EQ(bad.code, 1) << show(bad);
  EXPECT_EQ(terrace("run " + elementwise_model() + " --random-inputs --output-format npz --output-dir d").code, 2);
  EXPECT_EQ(terrace("run " + elementwise_model() + " --random-inputs --output-format pb").code, 2) << "needs --output-dir";
}

TEST(CliNumpy, run_takes_every_input_of_an_npz_and_cleans_output_names_into_file_names) {
  fs::path dir = scratch() / "npz_out";
  Result r = terrace("run " + two_input_model() + " --input " + ab_npz() + " --output-format npy --output-dir " + dir.string());
  ASSERT_EQ(r.code, 0) << show(r);
  terrace::Tensor sum = read_npy(dir / "out_sum.npy"), diff = read_npy(dir / "out_sum_1.npy");
  EXPECT_EQ(sum.data<float>()[5], 66);
  EXPECT_EQ(diff.data<float>()[0], -9);
  EXPECT_NE(r.out.find("(output out:sum)"), std::string::npos) << show(r);
  // An npz array that is no graph input, and an input given twice, are usage errors.
  std::string c = write("c.npz", zip({{"c.npy", npy_array("<f4", "(2, 3)", raw<float>({1, 2, 3, 4, 5, 6}))}}));
  Result unknown = terrace("run " + two_input_model() + " --input " + c);
  EXPECT_EQ(unknown.code, 2) << show(unknown);
  EXPECT_NE(unknown.err.find("names 'c', which is not a graph input (inputs: a, b)"), std::string::npos) << show(unknown);
  std::string a = write("a.npy", npy_array("<f4", "(2, 3)", raw<float>({1, 2, 3, 4, 5, 6})));
  Result twice = terrace("run " + two_input_model() + " --input " + ab_npz() + " --input a=" + a);
  EXPECT_EQ(twice.code, 2) << show(twice);
  EXPECT_NE(twice.err.find("--input given twice for 'a'"), std::string::npos) << show(twice);
}

TEST(CliNumpy, run_prints_each_outputs_first_values_min_max_mean_and_nans) {
  std::vector<float> x = x_values();
  x[3] = std::numeric_limits<float>::quiet_NaN();
  std::string file = write("x_nan.npy", npy_array("<f4", "(2, 8)", raw(x)));
  fs::path json = scratch() / "summary.json";
  Result r = terrace("run " + elementwise_model() + " --input x=" + file + " --tier interp --json " + json.string());
  ASSERT_EQ(r.code, 0) << show(r);
  // y = Relu(x) + x: -2 .. -0.25 for the first half, then 0 .. 3.5; x[3] NaN.
  EXPECT_NE(r.out.find("output y: float32[2,8]  [-2, -1.75, -1.5, nan, -1, ...] min -2, max 3.5, mean 0.416667, NaN 1\n"),
            std::string::npos) << show(r);
  nlohmann::json j = nlohmann::json::parse(slurp(json));
  const nlohmann::json& v = j["outputs"][0]["values"];
  EXPECT_EQ(v["first"].size(), 5u) << v;
  EXPECT_EQ(v["min"], -2.0) << v;
  EXPECT_EQ(v["max"], 3.5) << v;
  EXPECT_EQ(v["nan_count"], 1) << v;
}

// Each bad file fails the run (exit 1, the status line FAILED) with an error naming the file and
// what is wrong with it.
TEST(CliNumpy, bad_numpy_inputs_fail_naming_the_file_and_the_problem) {
  const std::string good = npy_array("<f4", "(2, 8)", raw(x_values()));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {write("truncated.npy", good.substr(0, 50)), "ends inside its header"},
      {write("complex.npy", npy_array("<c8", "(2, 8)", raw(x_values()) + raw(x_values()))), "dtype '<c8' is not one Terrace reads"},
      {write("wide.npy", npy_array("<f4", "(2, 4)", raw(x_values()).substr(0, 32))),
       "is float32[2,4], but the model's input x is float32[batch,8]"},
      {write("double.npy", npy_array("<f8", "(2, 8)", std::string(128, '\0'))), "is float64[2,8], but the model's input x"},
      {write("fortran.npy", npy("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 8), }", raw(x_values()))),
       "Fortran order"},
      {write("text.txt", "x = [1, 2, 3]\n"), "a tensor file is a .npy file (numpy.save) or a TensorProto .pb file"},
      {write("x_in.npz", zip({{"x.npy", good}})), "give it to --input without NAME="},
  };
  for (auto& [file, want] : cases) {
    Result r = terrace("run " + elementwise_model() + " --input x=" + file);
    EXPECT_EQ(r.code, 1) << show(r);
    EXPECT_NE(r.err.find("InvalidArgument"), std::string::npos) << show(r);
    EXPECT_NE(r.err.find(file), std::string::npos) << "names the file\n" << show(r);
    EXPECT_NE(r.err.find(want), std::string::npos) << want << "\n" << show(r);
    EXPECT_EQ(r.last_line().rfind("&&&& FAILED", 0), 0u) << show(r);
  }
  std::string compressed = write("compressed.npz", zip({{"x.npy", good, 8}}));
  Result c = terrace("run " + elementwise_model() + " --input " + compressed);
  EXPECT_EQ(c.code, 1) << show(c);
  EXPECT_NE(c.err.find("member 'x.npy' is compressed"), std::string::npos) << show(c);
  EXPECT_NE(c.err.find("write it with numpy.savez"), std::string::npos) << show(c);
  // A single tensor without NAME= is a usage error that says how to give it.
  Result bare = terrace("run " + elementwise_model() + " --input " + x_npy());
  EXPECT_EQ(bare.code, 2) << show(bare);
  EXPECT_NE(bare.err.find("give a single tensor as --input NAME=FILE"), std::string::npos) << show(bare);
  Result missing = terrace("run " + elementwise_model() + " --input x=" + (scratch() / "no_such.npy").string());
  EXPECT_EQ(missing.code, 1) << show(missing);
  EXPECT_NE(missing.err.find("IoError"), std::string::npos) << show(missing);
}

TEST(CliNumpy, validate_and_bench_take_npz_inputs_and_npy_expectations) {
  std::string x_npz = write("x.npz", zip({{"x.npy", npy_array("<f4", "(2, 8)", raw(x_values()))}}));
  Result v = terrace("validate " + elementwise_model() + " --input " + x_npz + " --tier interp");
  EXPECT_EQ(v.code, 0) << show(v);
  fs::path dir = scratch() / "bench_expect";
  ASSERT_EQ(terrace("run " + elementwise_model() + " --input " + x_npz + " --output-format npy --output-dir " + dir.string()).code, 0);
  Result b = terrace("bench " + elementwise_model() + " --calls 3 --quiet --input " + x_npz + " --expect y=" +
                     (dir / "y.npy").string());
  EXPECT_EQ(b.code, 0) << show(b);
  Result bad = terrace("bench " + elementwise_model() + " --calls 2 --quiet --input x=" + write("t.npy", "\x93NUMPY"));
  EXPECT_EQ(bad.code, 1) << show(bad);
}

TEST(CliBench, duration_and_concurrency_report_percentiles_min_and_max) {
  fs::path json = scratch() / "bench_duration.json";
  Result r = terrace("bench " + elementwise_model() + " --duration 1 --concurrency 2 --tier interp --quiet --json " +
                     json.string());
  ASSERT_EQ(r.code, 0) << show(r);
  EXPECT_NE(r.out.find(" from 2 threads\n"), std::string::npos) << show(r);
  for (const char* word : {"p50 ", "p90 ", "p99 ", "min ", "max ", "calls/s"})
    EXPECT_NE(r.out.find(word), std::string::npos) << word << "\n" << show(r);
  nlohmann::json j = nlohmann::json::parse(slurp(json));
  EXPECT_EQ(j["concurrency"], 2);
  EXPECT_EQ(j["duration_s"], 1.0);
  const nlohmann::json& s = j["steady"];
  EXPECT_GT(s["count"].get<int64_t>(), 10) << s;
  EXPECT_GT(j["calls"].size(), 10u);
  EXPECT_LE(s["min_ms"].get<double>(), s["p50_ms"].get<double>()) << s;
  EXPECT_EQ(s["p50_ms"], s["median_ms"]) << s;
  EXPECT_LE(s["p50_ms"].get<double>(), s["p90_ms"].get<double>()) << s;
  EXPECT_LE(s["p90_ms"].get<double>(), s["p99_ms"].get<double>()) << s;
  EXPECT_LE(s["p99_ms"].get<double>(), s["max_ms"].get<double>()) << s;
  EXPECT_GT(s["calls_per_s"].get<double>(), 0) << s;
  for (const char* bad : {"--duration 0", "--duration abc", "--duration 1 --calls 5", "--concurrency 0"}) {
    Result u = terrace("bench " + elementwise_model() + " " + bad);
    EXPECT_EQ(u.code, 2) << bad << "\n" << show(u);
  }
}

// --device-io (inputs bound on tier 2's device, outputs left there) needs tier 2: below it, a
// usage error naming the tier the run would have, not a run that silently copies through the host.
TEST(CliBench, device_io_below_tier2_is_a_usage_error_naming_the_tier) {
  Result u = terrace("bench " + elementwise_model() + " --device-io --tier cpu --calls 2");
  EXPECT_EQ(u.code, 2) << show(u);
  EXPECT_NE(u.err.find("--device-io"), std::string::npos) << show(u);
  EXPECT_NE(u.err.find("highest tier is cpu"), std::string::npos) << show(u);
}

}  // namespace

namespace {

// Issue 36, point 5: --shapes NAME:DxD sets a random input's whole shape (trtexec's), for run,
// validate, compile and bench; --dim works for bench too. A shape the model's rank or fixed dims
// refuse, an unknown input and a malformed entry are usage errors naming what was wrong.
TEST(CliShapes, shapes_set_random_inputs_and_bad_ones_are_named) {
  const std::string m = elementwise_model();  // x: float32[batch, 8]
  Result r = terrace("run " + m + " --random-inputs --shapes x:3x8");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("output y: float32[3,8]"), std::string::npos) << r.out;
  EXPECT_EQ(terrace("validate " + m + " --random-inputs --shapes x:2x8 --tier interp").code, 0);
  EXPECT_EQ(terrace("bench " + m + " --shapes x:4x8 --calls 2").code, 0);
  EXPECT_EQ(terrace("bench " + m + " --dim batch=4 --calls 2").code, 0);
  struct Bad {
    std::string args, says;
  };
  for (const Bad& b : {Bad{"run " + m + " --random-inputs --shapes x:3x7", "input 'x' is [batch,8]"},
                       Bad{"run " + m + " --random-inputs --shapes x:3", "input 'x' is [batch,8]"},
                       Bad{"run " + m + " --random-inputs --shapes z:3x8", "'z', which is not a graph input"},
                       Bad{"run " + m + " --random-inputs --shapes x3x8", "expected NAME:DxD"},
                       Bad{"run " + m + " --shapes x:3x8", "it needs --random-inputs"},
                       Bad{"bench " + m + " --dim seq=4 --calls 2", "no graph input has a symbolic dim named 'seq'"}}) {
    Result bad = terrace(b.args);
    EXPECT_EQ(bad.code, 2) << b.args;
    EXPECT_NE(bad.err.find(b.says), std::string::npos) << b.args << "\n" << bad.err;
  }
}

}  // namespace
