// Large initializers in a file's pages (Tensor::file_backed): their values survive the OS taking
// the pages back (drop_resident_pages), the loader puts the large ones there, and a model whose
// weights tier 1 packs gives the interpreter's answer on every tier before and after a deopt.
#include <cstring>
#include <fstream>
#include <random>
#include <string>

#include "interp/compare.h"
#include "tests/import/import_util.h"
#include "tests/support/process_memory.h"
#include "tiers/session.h"

namespace terrace::test {
namespace {

using testing::resident_bytes;
using testing::status_bytes;

Tensor counting(Shape shape) {
  Tensor t = Tensor::empty(DType::Float32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = float(i % 1000003) * 0.5f;
  return t;
}

TEST(FileBacked, values_survive_dropping_the_pages_which_leave_the_resident_set) {
  Tensor heap = counting({16, 1 << 20});  // 64 MiB
  Tensor t = Tensor::file_backed(heap);
  if (!t.is_file_backed()) GTEST_SKIP() << "no disk-backed temporary folder here (TERRACE_SPILL_DIR, /var/tmp, $TMPDIR)";
  EXPECT_NE(t.raw(), heap.raw());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % 64, 0u);  // Tensor's alignment
  heap = Tensor();  // freed: only the file's pages hold the values now
  const size_t before = resident_bytes();
  t.drop_resident_pages();
  const size_t after = resident_bytes();
  if (before && after) EXPECT_LT(after + (48u << 20), before) << "VmRSS " << before << " -> " << after;
  bool same = true;
  for (int64_t i = 0; i < t.numel() && same; ++i) same = t.data<float>()[i] == float(i % 1000003) * 0.5f;
  EXPECT_TRUE(same) << "a value changed after its page was dropped";
  if (before) EXPECT_GT(resident_bytes(), after + (48u << 20));  // read back in
  // Views share the file's pages; copies are plain heap tensors.
  EXPECT_TRUE(t.reshaped({1 << 24}).is_file_backed());
  EXPECT_FALSE(t.clone().is_file_backed());
  EXPECT_FALSE(Tensor::file_backed(Tensor::from_vector<std::string>({1}, {"s"})).is_file_backed());
}

// The loader's path: raw bytes straight into the file, no heap tensor first; the heap where no
// file can be had.
TEST(FileBacked, raw_bytes_go_into_the_file_and_keep_their_values) {
  const Tensor src = counting({3, 1 << 18});  // 3 MiB
  Tensor t = Tensor::file_backed(DType::Float32, {3, 1 << 18}, src.raw());
  if (!t.is_file_backed()) GTEST_SKIP() << "no disk-backed temporary folder here (TERRACE_SPILL_DIR, /var/tmp, $TMPDIR)";
  EXPECT_EQ(t.shape(), Shape({3, 1 << 18}));
  t.drop_resident_pages();
  EXPECT_EQ(std::memcmp(t.raw(), src.raw(), src.nbytes()), 0);
  const Tensor empty = Tensor::file_backed(DType::Int64, {0, 4}, nullptr);
  EXPECT_EQ(empty.shape(), Shape({0, 4}));
  EXPECT_FALSE(empty.is_file_backed());
}

// X[N,256] . W[256,1024] (1 MiB, file-backed) + B[1024] (4 KiB, kept on the heap).
std::string matmul_model(std::vector<float>& w, std::vector<float>& b) {
  onnx::ModelProto m = parse_model(R"(
<ir_version: 8, opset_import: ["" : 17]>
mm (float[N, 256] X) => (float[N, 1024] Y)
{
  P = MatMul(X, W)
  Y = Add(P, B)
}
)");
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  w.resize(256 * 1024);
  b.resize(1024);
  for (float& v : w) v = u(rng);
  for (float& v : b) v = u(rng);
  auto add = [&](const char* name, std::vector<int64_t> dims, const std::vector<float>& v) {
    add_raw_initializer(m, name, dims, onnx::TensorProto::FLOAT,
                        std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)));
  };
  add("W", {256, 1024}, w);
  add("B", {1024}, b);
  return bytes_of(m);
}

TEST(FileBacked, the_loader_keeps_large_initializers_in_a_files_pages) {
  std::vector<float> w, b;
  Model model = load_onnx_bytes(matmul_model(w, b));
  const Graph& g = *model.graph;
  const Tensor& tw = g.initializers.at(g.find_value("W"));
  const Tensor& tb = g.initializers.at(g.find_value("B"));
  EXPECT_FALSE(tb.is_file_backed());  // under 1 MiB
  if (!tw.is_file_backed()) GTEST_SKIP() << "no disk-backed temporary folder here";
  EXPECT_EQ(std::vector<float>(tw.data<float>(), tw.data<float>() + tw.numel()), w);
}

// Tier 1 packs W and lets its pages go; the interpreter reads them back for validation and for a
// call whose shape no compiled version covers: every answer is the interpreter's.
TEST(FileBacked, a_model_whose_weights_tier1_packs_answers_as_the_interpreter_before_and_after_a_deopt) {
  std::vector<float> w, b;
  const std::string bytes = matmul_model(w, b);
  Options interp;
  interp.max_tier = Tier::Interp;
  Options cpu;
  cpu.max_tier = Tier::Cpu;
  cpu.hot_threshold = 1;
  auto reference = Session::load_bytes(bytes, interp);
  auto session = Session::load_bytes(bytes, cpu);
  auto input = [](int64_t n) {
    Tensor x = Tensor::empty(DType::Float32, {n, 256});
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = float((i * 37) % 101) / 50.0f - 1.0f;
    return NamedTensors{{"X", x}};
  };
  bool on_tier1 = false;
  for (int64_t n : {8, 8, 8, 8, 8, 8, 3, 8}) {
    SCOPED_TRACE("N = " + std::to_string(n));
    NamedTensors want = reference->run(input(n));
    NamedTensors got = session->run(input(n));
    session->wait_for_compiles();
    Comparison c = compare_tensors(want.at(0).second, got.at(0).second, Tolerance::for_dtype(DType::Float32));
    EXPECT_TRUE(c.equal) << c.message;
    for (const std::string& t : session->last_call().tiers) on_tier1 = on_tier1 || t == "cpu";
  }
  EXPECT_TRUE(on_tier1) << session->report();
}

// The interpreter's product over a file-backed weight too large to pack whole (run by blocks of
// columns) lets the weight's pages go as it passes them: a validation call of a compiled
// vocabulary projection (GPT-2's 154 MB head) no longer brings the whole weight back at once.
// X[8, 256] . W[256, 131072] (128 MiB): the peak resident set of a call grows by a block of W
// (8,192 columns, 8 MiB) and the output (19 MiB here), not by W.
size_t peak_resident_bytes() { return status_bytes("VmHWM:"); }

TEST(FileBacked, the_interpreters_product_lets_a_large_file_backed_weight_go_as_it_passes) {
  constexpr int64_t K = 256, N = 131072;
  auto weight = [](int64_t i) { return float((i * 7919) % 2001 - 1000) / 1000.0f; };
  std::string bytes;
  {
    onnx::ModelProto m = parse_model(R"(
<ir_version: 8, opset_import: ["" : 17]>
wide (float[8, 256] X) => (float[8, 131072] Y)
{
  Y = MatMul(X, W)
}
)");
    onnx::TensorProto* t = m.mutable_graph()->add_initializer();
    t->set_name("W");
    t->set_data_type(onnx::TensorProto::FLOAT);
    t->add_dims(K);
    t->add_dims(N);
    std::string* raw = t->mutable_raw_data();
    raw->resize(size_t(K * N) * sizeof(float));
    for (int64_t i = 0; i < K * N; ++i) {
      const float v = weight(i);
      std::memcpy(raw->data() + size_t(i) * sizeof(float), &v, sizeof(float));
    }
    bytes = bytes_of(m);
  }
  Options interp;
  interp.max_tier = Tier::Interp;
  auto session = Session::load_bytes(bytes, interp);
  bytes = {};
  const Graph& g = session->graph();
  if (!g.initializers.at(g.find_value("W")).is_file_backed()) GTEST_SKIP() << "no disk-backed temporary folder here";
  Tensor x = Tensor::empty(DType::Float32, {8, K});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = float((i * 37) % 101) / 50.0f - 1.0f;
  const Tensor first = session->run({{"X", x}}).at(0).second;  // the interpreter's scratch, made once
  // Spot-check the product (double sums rounded once) on columns at and around block edges.
  for (int64_t j : {int64_t(0), int64_t(8191), int64_t(8192), N - 1}) {
    double want = 0;
    for (int64_t k = 0; k < K; ++k) want += double(x.data<float>()[3 * K + k]) * double(weight(k * N + j));
    EXPECT_FLOAT_EQ(first.data<float>()[3 * N + j], float(want)) << "column " << j;
  }
  {
    std::ofstream reset("/proc/self/clear_refs");
    reset << "5";  // the peak resident set starts again from the current one
    if (!reset.good()) GTEST_SKIP() << "cannot reset VmHWM here";
  }
  const size_t before = peak_resident_bytes();
  if (before == 0) GTEST_SKIP() << "no /proc/self/status";
  const Tensor again = session->run({{"X", x}}).at(0).second;
  const size_t grew = peak_resident_bytes() - before;
  EXPECT_LT(grew, size_t(64) << 20) << "the call's peak resident set grew by " << (grew >> 20)
                                    << " MiB; W alone is 128 MiB";
  EXPECT_EQ(std::memcmp(first.raw(), again.raw(), first.nbytes()), 0) << "the second call's answer differs";
}

}  // namespace
}  // namespace terrace::test
