// Errors a user sees, sampled across the public API: each carries its code as a prefix, names
// what was wrong (the input, node, attribute or file), is one line, and is never a bare library
// message (std::, oneDNN's or protobuf's own words).
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>

#include "interp/onnx_import.h"
#include "tests/support/graph_builder.h"
#include "tiers/session.h"

namespace terrace {
namespace {

using testing::GraphBuilder;
using testing::random_tensor;

struct Case {
  std::string what;
  std::function<void()> run;
  ErrorCode code;
  std::string names;  // the part of the message that says what was wrong
};

Options on_cpu() {
  Options o;
  o.max_tier = Tier::Cpu;
  o.cache_dir = "";
  return o;
}

// x [2,3] -> Relu -> y, with a Gather reading an index input.
std::shared_ptr<Graph> gather_model() {
  GraphBuilder g;
  int x = g.input("x", DType::Float32, {3, 2});
  int i = g.input("idx", DType::Int64, {1});
  g.output(g.node(Op::Gather, {g.node(Op::Relu, {x}), i}));
  auto graph = g.build();
  graph->nodes[1].name = "pick_row";
  return graph;
}

std::vector<Case> cases() {
  auto model = gather_model();
  auto run = [model](NamedTensors in) { Session::from_graph(model, on_cpu())->run(in); };
  Tensor x = random_tensor({3, 2}, 1);
  Tensor idx = Tensor::from_vector<int64_t>({1}, {1});
  const std::string dir = ::testing::TempDir() + "/terrace_error_messages";
  std::filesystem::create_directories(dir);
  return {
      {"unknown input", [=] { run({{"x", x}, {"idx", idx}, {"z", x}}); }, ErrorCode::InvalidArgument, "'z'"},
      {"missing input", [=] { run({{"x", x}}); }, ErrorCode::InvalidArgument, "input 'idx' is missing"},
      {"wrong dtype", [=] { run({{"x", idx}, {"idx", idx}}); }, ErrorCode::InvalidArgument, "input 'x' must be float32"},
      {"wrong rank", [=] { run({{"x", random_tensor({6}, 1)}, {"idx", idx}}); }, ErrorCode::InvalidArgument,
       "input 'x' must have rank 2"},
      {"wrong dim", [=] { run({{"x", random_tensor({4, 2}, 1)}, {"idx", idx}}); }, ErrorCode::InvalidArgument,
       "input 'x' dim 0 must be 3"},
      {"index out of range", [=] { run({{"x", x}, {"idx", Tensor::from_vector<int64_t>({1}, {7})}}); },
       ErrorCode::InvalidArgument, "Gather 'pick_row'"},
      {"empty model", [] { Session::load_bytes(""); }, ErrorCode::InvalidModel, "empty"},
      {"garbage model", [] { Session::load_bytes("not a model at all"); }, ErrorCode::InvalidModel, "ONNX model"},
      {"missing file", [] { Session::load("/nonexistent/model.onnx"); }, ErrorCode::IoError, "/nonexistent/model.onnx"},
      {"directory as model", [=] { Session::load(dir); }, ErrorCode::IoError, dir},
      {"directory as tensor", [=] { load_tensor_pb(dir); }, ErrorCode::IoError, dir},
      {"cancelled", [=] {
         RunOptions o;
         o.terminate();
         Session::from_graph(model, on_cpu())->run({{"x", x}, {"idx", idx}}, o);
       }, ErrorCode::Cancelled, "terminated"},
  };
}

TEST(ErrorMessages, every_sampled_error_has_its_code_names_the_culprit_and_is_one_clean_line) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.what);
    try {
      c.run();
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(e.code(), c.code) << msg;
      EXPECT_EQ(msg.rfind(std::string(error_code_name(e.code())) + ": ", 0), 0u) << msg;
      EXPECT_NE(msg.find(c.names), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
      for (const char* raw : {"std::", "basic_string", "could not execute", "could not create", "_M_", "vector::"})
        EXPECT_EQ(msg.find(raw), std::string::npos) << "a library's own words: " << msg;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not a terrace::Error: " << e.what();
    }
  }
}

}  // namespace
}  // namespace terrace
