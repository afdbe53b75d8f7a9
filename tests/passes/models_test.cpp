// The graph optimizer on real models: the small zoo (the ctest zoo_small_export writes it to
// <build>/models-small) and every ONNX node test (libonnx-testdata). The optimized graph must give
// the original graph's answers on the interpreter: bitwise at Basic, within ARCHITECTURE.md's
// tolerances at Extended; and on the zoo it must have fewer graph breaks on tier 1.
#include <filesystem>
#include <map>

#include "interp/onnx_import.h"
#include "tests/passes/helpers.h"
#include "tiers/session.h"

namespace terrace {
namespace {

namespace fs = std::filesystem;

std::vector<RValue> test_inputs(const Graph& g, const fs::path& dir) {
  std::vector<RValue> in;
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    fs::path p = dir / ("input_" + std::to_string(i) + ".pb");
    if (!fs::exists(p)) return {};
    in.push_back(load_value_pb(p.string(), g.value(g.inputs[i]).info.kind));
  }
  return in;
}

size_t graph_breaks(std::shared_ptr<const Graph> g, OptimizeLevel level) {
  Options o;
  o.max_tier = Tier::Cpu;
  o.optimize = level;
  auto session = Session::from_graph(std::move(g), o);
  return session->plan().steps.size() - session->plan().regions.size();
}

// Compares two runs' outputs; returns "" or the first difference.
std::string differs(const Graph& g, const std::vector<RValue>& want, const std::vector<RValue>& got, bool exact) {
  if (want.size() != got.size()) return "output count";
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i].kind != got[i].kind) return "output kind";
    std::vector<Tensor> a, b;
    if (want[i].kind == ValueKind::Tensor) a = {want[i].tensor}, b = {got[i].tensor};
    else if (want[i].kind == ValueKind::Sequence) a = want[i].seq, b = got[i].seq;
    else if (want[i].has_element != got[i].has_element) return "optional presence";
    else if (want[i].has_element) a = {want[i].tensor}, b = {got[i].tensor}, a.insert(a.end(), want[i].seq.begin(), want[i].seq.end()),
                                  b.insert(b.end(), got[i].seq.begin(), got[i].seq.end());
    if (a.size() != b.size()) return "sequence length";
    for (size_t k = 0; k < a.size(); ++k) {
      if (a[k].defined() != b[k].defined()) return "defined";
      if (!a[k].defined()) continue;
      Tolerance tol = Tolerance::for_dtype(a[k].dtype());
      if (exact) tol.rtol = tol.atol = 0;
      Comparison c = compare_tensors(a[k], b[k], tol);
      if (!c.equal) return "output '" + g.value(g.outputs[i]).name + "': " + c.message;
    }
  }
  return "";
}

TEST(ZooModels, optimized_graphs_answer_as_the_original_with_fewer_graph_breaks) {
  const fs::path zoo = fs::path(TERRACE_BINARY_DIR) / "models-small";
  if (!fs::exists(zoo / "mlp_small")) GTEST_SKIP() << zoo << " is missing: run ctest -R zoo_small_export";
  // Graph breaks on tier 1 never go up, and what is left is at most what tier 1 cannot compile at
  // all (ResNet's MaxPool). (Whether the passes are what removes them depends on what tier 1
  // compiles: the transformers' Shape arithmetic on the symbolic batch, once a break, now compiles.)
  const std::map<std::string, size_t> expected = {
      {"mlp_small", 0}, {"resnet50_small", 1}, {"mobilenetv2_small", 0}, {"bert_small", 0}, {"gpt2_small", 0}};
  for (auto& [name, most_after] : expected) {
    SCOPED_TRACE(name);
    const fs::path dir = zoo / name;
    ASSERT_TRUE(fs::exists(dir / "model.onnx"));
    std::shared_ptr<const Graph> g = load_onnx_file((dir / "model.onnx").string()).graph;
    std::vector<RValue> in = test_inputs(*g, dir / "test_data_set_0");
    ASSERT_FALSE(in.empty());
    std::vector<RValue> want = interpret(*g, in);
    for (OptimizeLevel level : {OptimizeLevel::Basic, OptimizeLevel::Extended}) {
      auto opt = optimize_graph(g, level);
      EXPECT_LE(opt->nodes.size(), g->nodes.size());
      EXPECT_EQ(testing::input_names(*opt), testing::input_names(*g));
      EXPECT_EQ(testing::output_names(*opt), testing::output_names(*g));
      EXPECT_EQ(differs(*g, want, interpret(*opt, in), level == OptimizeLevel::Basic), "")
          << optimize_level_name(level);
    }
    const size_t before = graph_breaks(g, OptimizeLevel::None), after = graph_breaks(g, OptimizeLevel::Extended);
    std::printf("%s: graph breaks on tier 1 %zu -> %zu\n", name.c_str(), before, after);
    EXPECT_LE(after, before);
    EXPECT_LE(after, most_after);
  }
}

// The small BERT and GPT-2 with the attention rewrite on (PassConfig::fuse_attention): each of
// their 2 layers' blocks becomes one Attention, and the answers stay within tolerance.
TEST(ZooModels, the_transformers_attention_blocks_fuse_with_the_original_answers) {
  const fs::path zoo = fs::path(TERRACE_BINARY_DIR) / "models-small";
  if (!fs::exists(zoo / "bert_small")) GTEST_SKIP() << zoo << " is missing: run ctest -R zoo_small_export";
  passes::PassConfig config;
  config.fuse_attention = true;
  for (const char* name : {"bert_small", "gpt2_small"}) {
    SCOPED_TRACE(name);
    std::shared_ptr<const Graph> g = load_onnx_file((zoo / name / "model.onnx").string()).graph;
    std::vector<RValue> in = test_inputs(*g, zoo / name / "test_data_set_0");
    ASSERT_FALSE(in.empty());
    auto opt = optimize_graph(g, OptimizeLevel::Extended, config);
    EXPECT_EQ(testing::count_ops(*opt, Op::Attention), 2) << passes::graph_text(*opt);
    EXPECT_EQ(testing::count_ops(*opt, Op::Softmax), 0);
    EXPECT_EQ(differs(*g, interpret(*g, in), interpret(*opt, in), /*exact=*/false), "");
  }
}

// Every ONNX node test whose model loads and runs on the interpreter: the optimized graph gives
// the same answers (bitwise at Basic). Node tests feed their data through graph inputs, so this
// mostly exercises Constant nodes, shape folding on declared shapes and the no-op rules.
TEST(NodeTests, optimized_graphs_answer_as_the_original) {
  const fs::path root = "/usr/share/libonnx-testdata/data/node";
  if (!fs::exists(root)) GTEST_SKIP() << root << " is missing";
  int compared = 0, changed = 0;
  for (auto& entry : fs::directory_iterator(root)) {
    const fs::path dir = entry.path();
    std::shared_ptr<const Graph> g;
    std::vector<RValue> in, want;
    try {
      g = load_onnx_file((dir / "model.onnx").string()).graph;
      in = test_inputs(*g, dir / "test_data_set_0");
      if (in.size() != g->inputs.size()) continue;
      want = interpret(*g, in);
    } catch (const Error&) {
      continue;  // not supported, or fails on the interpreter: nothing to compare
    }
    for (OptimizeLevel level : {OptimizeLevel::Basic, OptimizeLevel::Extended}) {
      std::shared_ptr<const Graph> opt;
      std::vector<RValue> got;
      try {
        opt = optimize_graph(g, level);
        got = interpret(*opt, in);
      } catch (const Error& e) {
        ADD_FAILURE() << dir.filename() << " (" << optimize_level_name(level) << "): " << e.what();
        continue;
      }
      changed += level == OptimizeLevel::Basic && opt->nodes.size() != g->nodes.size();
      EXPECT_EQ(differs(*g, want, got, level == OptimizeLevel::Basic), "")
          << dir.filename() << " (" << optimize_level_name(level) << ")";
    }
    ++compared;
  }
  std::printf("%d node tests compared, %d changed by the passes\n", compared, changed);
  EXPECT_GT(compared, 700);
}

}  // namespace
}  // namespace terrace
