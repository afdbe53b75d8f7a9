// The C API (capi/terrace_c.h), called only through its function table: runs, zero-copy inputs,
// metadata, reports, options, cancellation, and a status with the right code on every error path.
// The models are written by the public graph builder (test fixtures, not the API under test).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "interp/graph_builder.h"
#include "capi/terrace_c.h"

extern "C" int capi_from_c(const void* model, size_t size, char* out, size_t out_size);

namespace {

const TerraceApi* api() { return TerraceGetApi(TERRACE_API_VERSION); }

// y = relu(x @ w + b), x float32 [batch, 3]; and z = Identity(x).
std::string mlp_model(bool with_identity = false) {
  terrace::GraphBuilder b("mlp");
  auto x = b.input("x", terrace::DType::Float32, {"batch", 3});
  auto w = b.constant("w", terrace::Tensor::from_vector<float>({3, 2}, {1, -1, 2, 0, -3, 1}));
  auto bias = b.constant("b", terrace::Tensor::from_vector<float>({2}, {0.5f, -0.5f}));
  b.node("Relu", "relu", {b.op("Add", {b.op("MatMul", {x, w}), bias})}, {}, {"y"});
  b.output("y");
  if (with_identity) {
    b.node("Identity", "same", {x}, {}, {"z"});
    b.output("z");
  }
  return b.to_onnx();
}

// A status's code and message, the status released.
struct Outcome {
  TerraceErrorCode code;
  std::string message;
};
Outcome outcome(TerraceStatus* s) {
  Outcome o{api()->GetErrorCode(s), api()->GetErrorMessage(s)};
  api()->ReleaseStatus(s);
  return o;
}
#define EXPECT_ERROR(call, want_code, needle)                                          \
  do {                                                                                \
    Outcome o_ = outcome(call);                                                       \
    EXPECT_EQ(o_.code, want_code) << o_.message;                                      \
    EXPECT_NE(o_.message.find(needle), std::string::npos) << o_.message;              \
  } while (0)
#define ASSERT_OK(call)                                     \
  do {                                                      \
    Outcome o_ = outcome(call);                             \
    ASSERT_EQ(o_.code, TERRACE_OK) << o_.message;           \
  } while (0)

// One call of mlp_model() on x = [[1, 2, 3]], its output released.
TerraceStatus* run_once(TerraceSession* session) {
  std::vector<float> x = {1, 2, 3};
  const int64_t shape[2] = {1, 3};
  TerraceValue* in = nullptr;
  if (TerraceStatus* s = api()->CreateTensorOverData(TERRACE_FLOAT32, shape, 2, x.data(), 12, &in)) return s;
  const char* name = "x";
  const TerraceValue* inputs[1] = {in};
  TerraceValue* out = nullptr;
  TerraceStatus* s = api()->Run(session, nullptr, &name, inputs, 1, &out, 1);
  api()->ReleaseValue(out);
  api()->ReleaseValue(in);
  return s;
}

// A session on the interpreter, without the disk cache.
struct Fixture : ::testing::Test {
  void SetUp() override {
    ASSERT_OK(api()->CreateOptions(&options));
    ASSERT_OK(api()->SetMaxTier(options, TERRACE_TIER_INTERP));
    ASSERT_OK(api()->SetCacheDir(options, ""));
    const std::string bytes = mlp_model(true);
    ASSERT_OK(api()->CreateSessionFromBytes(bytes.data(), bytes.size(), options, &session));
  }
  void TearDown() override {
    api()->ReleaseSession(session);
    api()->ReleaseOptions(options);
  }
  // Runs on x [rows, 3] over `data`; returns the status, outputs in out[0..1].
  TerraceStatus* run(std::vector<float>& data, int64_t rows, TerraceValue** out, const char* name = "x",
                     const TerraceRunOptions* ro = nullptr) {
    const int64_t shape[2] = {rows, 3};
    TerraceValue* x = nullptr;
    TerraceStatus* s = api()->CreateTensorOverData(TERRACE_FLOAT32, shape, 2, data.data(), data.size() * 4, &x);
    if (s) return s;
    const TerraceValue* inputs[1] = {x};
    s = api()->Run(session, ro, &name, inputs, 1, out, 2);
    api()->ReleaseValue(x);
    return s;
  }
  TerraceOptions* options = nullptr;
  TerraceSession* session = nullptr;
};

TEST(CApi, a_newer_version_than_the_library_gets_no_table) {
  EXPECT_NE(TerraceGetApi(1), nullptr);
  EXPECT_EQ(TerraceGetApi(TERRACE_API_VERSION), TerraceGetApi(1)) << "one table serves every older version";
  EXPECT_EQ(TerraceGetApi(TERRACE_API_VERSION + 1), nullptr);
  EXPECT_EQ(TerraceGetApi(0), nullptr);
  EXPECT_STREQ(api()->GetVersionString(), "0.1.0");
}

TEST_F(Fixture, run_over_caller_memory_gives_the_product_and_copies_an_output_aliasing_the_input) {
  std::vector<float> x = {1, 2, 3, -1, 0, 1};
  TerraceValue* out[2] = {nullptr, nullptr};
  ASSERT_OK(run(x, 2, out));
  TerraceDType dtype;
  size_t rank = 0;
  const int64_t* dims = nullptr;
  ASSERT_OK(api()->GetTensorType(out[0], &dtype, &rank, &dims));
  EXPECT_EQ(dtype, TERRACE_FLOAT32);
  ASSERT_EQ(rank, 2u);
  EXPECT_EQ(dims[0], 2);
  EXPECT_EQ(dims[1], 2);
  float* y = nullptr;
  ASSERT_OK(api()->GetTensorData(out[0], reinterpret_cast<void**>(&y)));
  EXPECT_FLOAT_EQ(y[0], 0.0f);  // relu(1 + 4 - 9 + 0.5)
  EXPECT_FLOAT_EQ(y[1], 1.5f);  // relu(-1 + 0 + 3 - 0.5)
  EXPECT_FLOAT_EQ(y[2], 0.0f);
  EXPECT_FLOAT_EQ(y[3], 1.5f);
  // z = Identity(x): the caller's memory may go once the run returns, so z is a copy.
  float* z = nullptr;
  ASSERT_OK(api()->GetTensorData(out[1], reinterpret_cast<void**>(&z)));
  EXPECT_NE(z, x.data());
  EXPECT_EQ(std::memcmp(z, x.data(), 24), 0);
  api()->ReleaseValue(out[0]);
  api()->ReleaseValue(out[1]);
}

TEST(CApi, a_tensor_over_caller_memory_is_that_memory_and_an_owned_one_is_zeroed) {
  std::vector<int64_t> data = {1, 2, 3};
  const int64_t shape[1] = {3};
  TerraceValue* v = nullptr;
  ASSERT_OK(api()->CreateTensorOverData(TERRACE_INT64, shape, 1, data.data(), 24, &v));
  void* p = nullptr;
  ASSERT_OK(api()->GetTensorData(v, &p));
  EXPECT_EQ(p, data.data());
  api()->ReleaseValue(v);
  EXPECT_EQ(data[2], 3) << "releasing the value leaves the caller's memory alone";
  ASSERT_OK(api()->CreateTensor(TERRACE_FLOAT64, shape, 1, &v));
  size_t bytes = 0;
  ASSERT_OK(api()->GetTensorSize(v, &bytes));
  EXPECT_EQ(bytes, 24u);
  ASSERT_OK(api()->GetTensorData(v, &p));
  EXPECT_EQ(static_cast<double*>(p)[2], 0.0);
  api()->ReleaseValue(v);
}

TEST_F(Fixture, names_dtypes_shapes_and_dim_names_of_inputs_and_outputs) {
  size_t n_in = 0, n_out = 0;
  ASSERT_OK(api()->SessionGetInputCount(session, &n_in));
  ASSERT_OK(api()->SessionGetOutputCount(session, &n_out));
  EXPECT_EQ(n_in, 1u);
  EXPECT_EQ(n_out, 2u);
  const char* name = nullptr;
  ASSERT_OK(api()->SessionGetInputName(session, 0, &name));
  EXPECT_STREQ(name, "x");
  ASSERT_OK(api()->SessionGetOutputName(session, 1, &name));
  EXPECT_STREQ(name, "z");
  TerraceDType dtype;
  int64_t rank = 0;
  const int64_t* dims = nullptr;
  ASSERT_OK(api()->SessionGetInputType(session, 0, &dtype, &rank, &dims));
  EXPECT_EQ(dtype, TERRACE_FLOAT32);
  ASSERT_EQ(rank, 2);
  EXPECT_EQ(dims[0], -1);
  EXPECT_EQ(dims[1], 3);
  ASSERT_OK(api()->SessionGetInputDimName(session, 0, 0, &name));
  EXPECT_STREQ(name, "batch");
  ASSERT_OK(api()->SessionGetOutputType(session, 0, &dtype, &rank, &dims));
  EXPECT_EQ(dtype, TERRACE_FLOAT32);
  ASSERT_EQ(rank, 2);
  EXPECT_EQ(dims[1], 2);
  EXPECT_ERROR(api()->SessionGetInputName(session, 1, &name), TERRACE_INVALID_ARGUMENT, "input index 1 is out of range");
  EXPECT_ERROR(api()->SessionGetOutputType(session, 2, &dtype, &rank, &dims), TERRACE_INVALID_ARGUMENT,
               "output index 2 is out of range");
  EXPECT_ERROR(api()->SessionGetInputDimName(session, 0, 2, &name), TERRACE_INVALID_ARGUMENT, "input 'x' has no dim 2");
}

TEST(CApi, loads_from_a_path_and_a_bad_path_is_io_error_naming_it) {
  const std::string dir = ::testing::TempDir() + "/terrace_capi";
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/mlp.onnx";
  std::ofstream(path, std::ios::binary) << mlp_model();
  TerraceSession* s = nullptr;
  ASSERT_OK(api()->CreateSession(path.c_str(), nullptr, &s));
  EXPECT_NE(s, nullptr);
  api()->ReleaseSession(s);
  s = reinterpret_cast<TerraceSession*>(&s);  // a failed create sets *out to NULL
  EXPECT_ERROR(api()->CreateSession((dir + "/absent.onnx").c_str(), nullptr, &s), TERRACE_IO_ERROR, "IoError: CreateSession: cannot open '" + dir + "/absent.onnx'");
  EXPECT_EQ(s, nullptr);
}

// Version 2: mode, strict and the profile file through the options.
TEST(CApi, version_2_sets_mode_strict_and_a_profile_file) {
  ASSERT_NE(TerraceGetApi(2), nullptr);
  TerraceOptions* options = nullptr;
  ASSERT_OK(api()->CreateOptions(&options));
  ASSERT_OK(api()->SetMaxTier(options, TERRACE_TIER_INTERP));
  EXPECT_ERROR(api()->SetMode(options, TerraceMode(7)), TERRACE_INVALID_ARGUMENT, "mode 7");
  EXPECT_ERROR(api()->SetMode(nullptr, TERRACE_MODE_DEFAULT), TERRACE_INVALID_ARGUMENT, "options");
  ASSERT_OK(api()->SetMode(options, TERRACE_MODE_REDUCE_OVERHEAD));
  // Strict with the interpreter only: every node is a graph break, so loading fails naming them.
  ASSERT_OK(api()->SetStrict(options, 1));
  const std::string model = mlp_model();
  TerraceSession* s = nullptr;
  EXPECT_ERROR(api()->CreateSessionFromBytes(model.data(), model.size(), options, &s), TERRACE_NOT_IMPLEMENTED,
               "graph break");
  EXPECT_EQ(s, nullptr);
  ASSERT_OK(api()->SetStrict(options, 0));
  const std::filesystem::path trace =
      std::filesystem::temp_directory_path() / ("terrace_capi_trace_" + std::to_string(::getpid()) + ".json");
  std::filesystem::remove(trace);
  ASSERT_OK(api()->SetProfileFile(options, trace.c_str()));
  ASSERT_OK(api()->CreateSessionFromBytes(model.data(), model.size(), options, &s));
  api()->ReleaseOptions(options);
  ASSERT_OK(run_once(s));
  api()->ReleaseSession(s);  // writes the trace
  std::ifstream f(trace);
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"traceEvents\""), std::string::npos) << text.substr(0, 200);
  EXPECT_NE(text.find("\"call\""), std::string::npos) << text.substr(0, 400);
  std::filesystem::remove(trace);
}

TEST(CApi, narrow_type_tensors_are_one_byte_per_element) {
  for (TerraceDType d : {TERRACE_FLOAT8E4M3FN, TERRACE_FLOAT8E5M2FNUZ, TERRACE_INT4, TERRACE_UINT4, TERRACE_FLOAT4E2M1}) {
    const int64_t shape[1] = {5};
    TerraceValue* v = nullptr;
    ASSERT_OK(api()->CreateTensor(d, shape, 1, &v));
    TerraceDType got;
    size_t rank = 0;
    const int64_t* dims = nullptr;
    ASSERT_OK(api()->GetTensorType(v, &got, &rank, &dims));
    EXPECT_EQ(got, d);
    size_t bytes = 0;
    ASSERT_OK(api()->GetTensorSize(v, &bytes));
    EXPECT_EQ(bytes, 5u) << int(d);
    api()->ReleaseValue(v);
  }
}

TEST(CApi, bad_model_bytes_are_invalid_model) {
  const char junk[] = "definitely not a protobuf \x01\x02\xff";
  TerraceSession* s = nullptr;
  EXPECT_ERROR(api()->CreateSessionFromBytes(junk, sizeof junk, nullptr, &s), TERRACE_INVALID_MODEL, "not an ONNX model");
  EXPECT_EQ(s, nullptr);
  EXPECT_ERROR(api()->CreateSessionFromBytes(junk, 0, nullptr, &s), TERRACE_INVALID_MODEL, "empty");
  std::string truncated = mlp_model().substr(0, 40);
  EXPECT_ERROR(api()->CreateSessionFromBytes(truncated.data(), truncated.size(), nullptr, &s), TERRACE_INVALID_MODEL, "");
}

TEST_F(Fixture, wrong_input_name_shape_or_dtype_is_invalid_argument_naming_the_input) {
  std::vector<float> x = {1, 2, 3, 4, 5, 6};
  TerraceValue* out[2] = {nullptr, nullptr};
  EXPECT_ERROR(run(x, 2, out, "nope"), TERRACE_INVALID_ARGUMENT, "'nope'");
  EXPECT_EQ(out[0], nullptr) << "a failed run sets no output";
  // [3, 2] where x is [batch, 3].
  const int64_t shape[2] = {3, 2};
  TerraceValue* bad = nullptr;
  ASSERT_OK(api()->CreateTensorOverData(TERRACE_FLOAT32, shape, 2, x.data(), 24, &bad));
  const char* name = "x";
  const TerraceValue* inputs[1] = {bad};
  EXPECT_ERROR(api()->Run(session, nullptr, &name, inputs, 1, out, 2), TERRACE_INVALID_ARGUMENT, "input 'x' dim 1 must be 3");
  api()->ReleaseValue(bad);
  std::vector<int32_t> ints(6, 1);
  const int64_t good_shape[2] = {2, 3};
  ASSERT_OK(api()->CreateTensorOverData(TERRACE_INT32, good_shape, 2, ints.data(), 24, &bad));
  inputs[0] = bad;
  EXPECT_ERROR(api()->Run(session, nullptr, &name, inputs, 1, out, 2), TERRACE_INVALID_ARGUMENT, "Run: input 'x' must be float32");
  EXPECT_ERROR(api()->Run(session, nullptr, &name, inputs, 0, out, 2), TERRACE_INVALID_ARGUMENT, "input 'x' is missing");
  EXPECT_ERROR(api()->Run(session, nullptr, &name, inputs, 1, out, 1), TERRACE_INVALID_ARGUMENT, "Run: 1 outputs asked; the model has 2");
  api()->ReleaseValue(bad);
}

TEST_F(Fixture, null_arguments_are_invalid_argument_naming_the_argument) {
  size_t n = 0;
  EXPECT_ERROR(api()->SessionGetInputCount(nullptr, &n), TERRACE_INVALID_ARGUMENT,
               "InvalidArgument: SessionGetInputCount: argument 'session' is NULL");
  EXPECT_ERROR(api()->SessionGetInputCount(session, nullptr), TERRACE_INVALID_ARGUMENT, "'out' is NULL");
  EXPECT_ERROR(api()->CreateSession(nullptr, nullptr, nullptr), TERRACE_INVALID_ARGUMENT, "'out' is NULL");
  TerraceSession* s = nullptr;
  EXPECT_ERROR(api()->CreateSession(nullptr, nullptr, &s), TERRACE_INVALID_ARGUMENT, "'model_path' is NULL");
  EXPECT_ERROR(api()->CreateSessionFromBytes(nullptr, 10, nullptr, &s), TERRACE_INVALID_ARGUMENT, "'model_bytes' is NULL");
  EXPECT_ERROR(api()->SetCacheDir(options, nullptr), TERRACE_INVALID_ARGUMENT, "'dir' is NULL");
  EXPECT_ERROR(api()->CreateOptions(nullptr), TERRACE_INVALID_ARGUMENT, "'out' is NULL");
  TerraceValue* out[2] = {nullptr, nullptr};
  EXPECT_ERROR(api()->Run(nullptr, nullptr, nullptr, nullptr, 0, out, 2), TERRACE_INVALID_ARGUMENT, "'session' is NULL");
  EXPECT_ERROR(api()->Run(session, nullptr, nullptr, nullptr, 1, out, 2), TERRACE_INVALID_ARGUMENT,
               "input_names and inputs must be given");
  const char* name = "x";
  const TerraceValue* inputs[1] = {nullptr};
  EXPECT_ERROR(api()->Run(session, nullptr, &name, inputs, 1, out, 2), TERRACE_INVALID_ARGUMENT, "input 'x' is NULL");
  EXPECT_ERROR(api()->Run(session, nullptr, &name, inputs, 1, nullptr, 2), TERRACE_INVALID_ARGUMENT, "'outputs' is NULL");
  void* p = nullptr;
  EXPECT_ERROR(api()->GetTensorData(nullptr, &p), TERRACE_INVALID_ARGUMENT, "'value' is NULL");
  char* text = nullptr;
  EXPECT_ERROR(api()->SessionGetReport(nullptr, 0, &text), TERRACE_INVALID_ARGUMENT, "'session' is NULL");
  // Release functions take NULL; a NULL status is success.
  api()->ReleaseSession(nullptr);
  api()->ReleaseValue(nullptr);
  api()->ReleaseOptions(nullptr);
  api()->ReleaseRunOptions(nullptr);
  api()->ReleaseStatus(nullptr);
  api()->ReleaseString(nullptr);
  EXPECT_EQ(api()->GetErrorCode(nullptr), TERRACE_OK);
  EXPECT_STREQ(api()->GetErrorMessage(nullptr), "");
}

TEST(CApi, bad_tensors_and_options_are_invalid_argument) {
  const int64_t shape[2] = {2, 3};
  std::vector<float> data(6);
  TerraceValue* v = nullptr;
  EXPECT_ERROR(api()->CreateTensorOverData(TERRACE_FLOAT32, shape, 2, data.data(), 20, &v), TERRACE_INVALID_ARGUMENT,
               "20 given");
  EXPECT_ERROR(api()->CreateTensorOverData(TERRACE_FLOAT32, shape, 2, nullptr, 24, &v), TERRACE_INVALID_ARGUMENT, "NULL");
  EXPECT_ERROR(api()->CreateTensor(TerraceDType(8), shape, 2, &v), TERRACE_INVALID_ARGUMENT, "dtype 8");
  EXPECT_ERROR(api()->CreateTensor(TerraceDType(99), shape, 2, &v), TERRACE_INVALID_ARGUMENT, "CreateTensor: tensor: dtype 99");
  EXPECT_ERROR(api()->CreateTensor(TERRACE_FLOAT32, nullptr, 2, &v), TERRACE_INVALID_ARGUMENT, "needs its shape");
  const int64_t negative[1] = {-2};
  EXPECT_ERROR(api()->CreateTensor(TERRACE_FLOAT32, negative, 1, &v), TERRACE_INVALID_ARGUMENT, "dim 0 is -2");
  const int64_t huge[2] = {int64_t(1) << 40, int64_t(1) << 40};
  EXPECT_ERROR(api()->CreateTensor(TERRACE_FLOAT32, huge, 2, &v), TERRACE_INVALID_ARGUMENT, "overflows int64");
  EXPECT_EQ(v, nullptr);
  TerraceOptions* o = nullptr;
  ASSERT_OK(api()->CreateOptions(&o));
  EXPECT_ERROR(api()->SetMaxTier(o, TerraceTier(7)), TERRACE_INVALID_ARGUMENT, "tier 7");
  EXPECT_ERROR(api()->SetThreads(o, -1, 1), TERRACE_INVALID_ARGUMENT, "SetThreads: -1 interpreter");
  EXPECT_ERROR(api()->SetThreads(o, 2, 0), TERRACE_INVALID_ARGUMENT, "SetThreads: 2 interpreter and 0 compile");
  ASSERT_OK(api()->SetThreads(o, 2, 1));
  EXPECT_ERROR(api()->SetOptimizeLevel(o, TerraceOptimizeLevel(3)), TERRACE_INVALID_ARGUMENT, "level 3");
  ASSERT_OK(api()->SetOptimizeLevel(o, TERRACE_OPTIMIZE_NONE));
  api()->ReleaseOptions(o);
}

TEST_F(Fixture, terminated_or_past_deadline_runs_are_cancelled_and_the_session_stays_usable) {
  std::vector<float> x = {1, 2, 3, 4, 5, 6};
  TerraceValue* out[2] = {nullptr, nullptr};
  TerraceRunOptions* ro = nullptr;
  ASSERT_OK(api()->CreateRunOptions(&ro));
  ASSERT_OK(api()->RunOptionsTerminate(ro));
  EXPECT_ERROR(run(x, 2, out, "x", ro), TERRACE_CANCELLED, "");
  api()->ReleaseRunOptions(ro);
  ASSERT_OK(api()->CreateRunOptions(&ro));
  ASSERT_OK(api()->RunOptionsSetDeadline(ro, 0));
  EXPECT_ERROR(run(x, 2, out, "x", ro), TERRACE_CANCELLED, "");
  EXPECT_ERROR(api()->RunOptionsSetDeadline(ro, -5), TERRACE_INVALID_ARGUMENT, "-5 ms");
  api()->ReleaseRunOptions(ro);
  ASSERT_OK(api()->CreateRunOptions(&ro));
  ASSERT_OK(api()->RunOptionsSetDeadline(ro, 60000));
  ASSERT_OK(run(x, 2, out, "x", ro));
  api()->ReleaseValue(out[0]);
  api()->ReleaseValue(out[1]);
  api()->ReleaseRunOptions(ro);
}

// A deadline past the clock's range (INT64_MAX as "no deadline") is none: it overflowed into the
// past, and every run was cancelled at once.
TEST_F(Fixture, a_deadline_past_the_clocks_range_is_no_deadline) {
  std::vector<float> x = {1, 2, 3, 4, 5, 6};
  for (int64_t ms : {int64_t(9'300'000'000'000), INT64_MAX}) {
    TerraceValue* out[2] = {nullptr, nullptr};
    TerraceRunOptions* ro = nullptr;
    ASSERT_OK(api()->CreateRunOptions(&ro));
    ASSERT_OK(api()->RunOptionsSetDeadline(ro, ms));
    ASSERT_OK(run(x, 2, out, "x", ro));
    api()->ReleaseValue(out[0]);
    api()->ReleaseValue(out[1]);
    api()->ReleaseRunOptions(ro);
  }
}

// Thread counts past the machine's (100,000 interpreter threads crashed inside libgomp, as many
// compile threads aborted the session's creation) are cut down to its hardware threads.
TEST(CApi, thread_counts_past_the_machine_are_cut_down_and_the_session_runs) {
  const std::string bytes = mlp_model();
  for (auto [interp, compile] : {std::pair{100000, 1}, std::pair{1, 100000}}) {
    TerraceOptions* o = nullptr;
    ASSERT_OK(api()->CreateOptions(&o));
    ASSERT_OK(api()->SetCacheDir(o, ""));
    ASSERT_OK(api()->SetThreads(o, interp, compile));
    TerraceSession* s = nullptr;
    ASSERT_OK(api()->CreateSessionFromBytes(bytes.data(), bytes.size(), o, &s));
    for (int i = 0; i < 4; ++i) ASSERT_OK(run_once(s));
    api()->ReleaseSession(s);
    api()->ReleaseOptions(o);
  }
}

// The report lists the regions (tier 1's candidates, so the session may use tier 1) and the calls.
TEST(CApi, report_as_text_and_json_lists_regions_and_calls) {
  TerraceOptions* o = nullptr;
  ASSERT_OK(api()->CreateOptions(&o));
  ASSERT_OK(api()->SetMaxTier(o, TERRACE_TIER_CPU));
  ASSERT_OK(api()->SetCacheDir(o, ""));
  const std::string bytes = mlp_model();
  TerraceSession* session = nullptr;
  ASSERT_OK(api()->CreateSessionFromBytes(bytes.data(), bytes.size(), o, &session));
  api()->ReleaseOptions(o);
  ASSERT_OK(run_once(session));
  char* text = nullptr;
  ASSERT_OK(api()->SessionGetReport(session, 0, &text));
  ASSERT_NE(text, nullptr);
  EXPECT_NE(std::string(text).find("region 0 ["), std::string::npos) << text;
  api()->ReleaseString(text);
  ASSERT_OK(api()->SessionGetReport(session, 1, &text));
  ASSERT_NE(text, nullptr);
  EXPECT_EQ(text[0], '{') << text;
  EXPECT_NE(std::string(text).find("\"calls\""), std::string::npos) << text;
  EXPECT_NE(std::string(text).find("\"regions\""), std::string::npos) << text;
  api()->ReleaseString(text);
  api()->ReleaseSession(session);
}

TEST(CApi, the_header_compiles_as_c_and_a_c_program_runs_a_model) {
  const std::string bytes = mlp_model();
  char out[512] = {0};
  EXPECT_EQ(capi_from_c(bytes.data(), bytes.size(), out, sizeof out), 1) << out;
  EXPECT_STREQ(out, "rank 2 dims 2 2 sum 3");  // [0, 1.5, 0, 1.5]
}

}  // namespace
