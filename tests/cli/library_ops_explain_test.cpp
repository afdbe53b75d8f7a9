// `terrace explain` on models holding tier 1's newer library ops (ConvTranspose through oneDNN,
// with the Relu and Clip after it; LSTM): each a region of tier 1, no graph break. Runs the built
// binary, as cli_test.cpp does.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "interp/graph_builder.h"

namespace {
namespace fs = std::filesystem;

const std::string kTerraceBinary = std::getenv("TERRACE_CLI_UNDER_TEST") ? std::getenv("TERRACE_CLI_UNDER_TEST")
                                                                        : std::string(TERRACE_BINARY_DIR) + "/tools/terrace";

struct Output {
  int code = -1;
  std::string out;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// `terrace ARGS`, its exit code and stdout (stderr joined), in a scratch folder removed after.
Output terrace(const fs::path& dir, const std::string& args) {
  const fs::path out = dir / "out.txt";
  const std::string cmd = "TERRACE_CACHE_DIR= " + kTerraceBinary + " " + args + " >" + out.string() + " 2>&1";
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), slurp(out)};
}

// x [1, 8, 6, 7] -> ConvTranspose (k 3, stride 2, pads 1, output_padding 1, bias) -> Relu ->
// ConvTranspose (groups 2, output_shape) -> Clip(0, 6).
std::string upsampling_onnx() {
  terrace::GraphBuilder b("upsampling");
  auto x = b.input("x", terrace::DType::Float32, {1, 8, 6, 7});
  auto w1 = b.constant("w1", terrace::Tensor::zeros(terrace::DType::Float32, {8, 4, 3, 3}));
  auto b1 = b.constant("b1", terrace::Tensor::zeros(terrace::DType::Float32, {4}));
  auto w2 = b.constant("w2", terrace::Tensor::zeros(terrace::DType::Float32, {4, 3, 2, 2}));
  auto up = b.op("ConvTranspose", {x, w1, b1},
                 {{"strides", std::vector<int64_t>{2, 2}}, {"pads", std::vector<int64_t>{1, 1, 1, 1}},
                  {"output_padding", std::vector<int64_t>{1, 1}}});
  auto up2 = b.op("ConvTranspose", {b.op("Relu", {up}), w2},
                  {{"strides", std::vector<int64_t>{2, 2}}, {"group", 2}, {"output_shape", std::vector<int64_t>{27, 30}}});
  auto lo = b.constant("lo", terrace::Tensor::scalar(0.0f)), hi = b.constant("hi", terrace::Tensor::scalar(6.0f));
  b.output(b.op("Clip", {up2, lo, hi}));
  return b.to_onnx();
}

TEST(CliExplain, conv_transpose_model_has_no_graph_break_on_tier1) {
  const fs::path dir = fs::temp_directory_path() / ("terrace_library_ops_explain_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream f(dir / "model.onnx", std::ios::binary);
    f << upsampling_onnx();
  }
  const Output r = terrace(dir, "explain " + (dir / "model.onnx").string() + " --tier cpu");
  fs::remove_all(dir);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("[ConvTranspose,Relu]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[ConvTranspose,Clip]"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("break "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("0 graph breaks"), std::string::npos) << r.out;
}

// x [5, 2, 3] -> LSTM (bidirectional, hidden 4) -> Y, Y_h: one tier-1 region, no graph break.
TEST(CliExplain, lstm_model_has_no_graph_break_on_tier1) {
  terrace::GraphBuilder b("tagger");
  auto x = b.input("x", terrace::DType::Float32, {5, 2, 3});
  auto w = b.constant("w", terrace::Tensor::zeros(terrace::DType::Float32, {2, 16, 3}));
  auto r = b.constant("r", terrace::Tensor::zeros(terrace::DType::Float32, {2, 16, 4}));
  std::vector<std::string> y = b.op("LSTM", {x, w, r}, {{"hidden_size", 4}, {"direction", "bidirectional"}}, 2);
  b.output(y[0]);
  b.output(y[1]);
  const fs::path dir = fs::temp_directory_path() / ("terrace_library_ops_explain_lstm_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream f(dir / "model.onnx", std::ios::binary);
    f << b.to_onnx();
  }
  const Output out = terrace(dir, "explain " + (dir / "model.onnx").string() + " --tier cpu");
  fs::remove_all(dir);
  ASSERT_EQ(out.code, 0) << out.out;
  EXPECT_NE(out.out.find("[LSTM]"), std::string::npos) << out.out;
  EXPECT_EQ(out.out.find("break "), std::string::npos) << out.out;
  EXPECT_NE(out.out.find("0 graph breaks"), std::string::npos) << out.out;
}

}  // namespace
