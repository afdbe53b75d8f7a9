// The CLI tests' harness: the built terrace binary run through the shell in a scratch folder (its
// exit code, stdout and stderr), and small ONNX models written there (tests/cli).
#pragma once
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

namespace cli_harness {
namespace fs = std::filesystem;

// $TERRACE_CLI_UNDER_TEST runs the tests against another binary (an older build, to see them fail).
inline const std::string kTerrace = std::getenv("TERRACE_CLI_UNDER_TEST") ? std::getenv("TERRACE_CLI_UNDER_TEST")
                                                                  : std::string(TERRACE_BINARY_DIR) + "/tools/terrace";

inline fs::path scratch_path() { return fs::temp_directory_path() / ("terrace_cli_test_" + std::to_string(::getpid())); }

inline fs::path scratch() {
  static const fs::path dir = [] {
    fs::path d = scratch_path();
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

// The scratch folder goes when the test process ends.
class RemoveScratch : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(scratch_path(), ec);
  }
};
inline const auto* const kRemoveScratch = ::testing::AddGlobalTestEnvironment(new RemoveScratch);

inline std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

struct Result {
  int code = -1;
  std::string out, err;
  std::string last_line() const {
    std::string s = out;
    while (!s.empty() && s.back() == '\n') s.pop_back();
    size_t nl = s.rfind('\n');
    return nl == std::string::npos ? s : s.substr(nl + 1);
  }
};

// Runs `terrace ARGS` through the shell with `env` (VAR=value ...) before it; the code cache goes
// to a scratch folder unless `env` sets TERRACE_CACHE_DIR.
inline Result terrace(const std::string& args, const std::string& env = "") {
  static int n = 0;
  fs::path out = scratch() / ("out" + std::to_string(n) + ".txt"), err = scratch() / ("err" + std::to_string(n++) + ".txt");
  std::string cache = env.find("TERRACE_CACHE_DIR=") == std::string::npos
                          ? "TERRACE_CACHE_DIR=" + (scratch() / "cache").string() + " "
                          : "";
  // The settings a developer's shell may hold (TERRACE_LOG=error hid a warning a test looks for)
  // are cleared; a test's own `env` sets what it checks.
  const std::string clean =
      "env -u TERRACE_LOG -u TERRACE_MAX_TIER -u TERRACE_FAULT -u TERRACE_OPTIMIZE -u TERRACE_MODE -u TERRACE_STRICT "
      "-u TERRACE_PROFILE -u TERRACE_DUMP_DIR -u TERRACE_RECHECK -u TERRACE_CLANG_JIT_PLUGIN ";
  std::string cmd = clean + cache + env + " " + kTerrace + " " + args + " >" + out.string() + " 2>" + err.string();
  int status = std::system(cmd.c_str());
  Result r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

inline std::string show(const Result& r) { return "exit " + std::to_string(r.code) + "\nstdout:\n" + r.out + "\nstderr:\n" + r.err; }

inline size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

// ---- models ----

inline void add_value_info(onnx::ValueInfoProto* v, const std::string& name, std::vector<std::string> dims) {
  v->set_name(name);
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx::TensorProto::FLOAT);
  for (auto& d : dims) {
    auto* dim = t->mutable_shape()->add_dim();
    if (std::isdigit(static_cast<unsigned char>(d[0]))) dim->set_dim_value(std::stoll(d));
    else dim->set_dim_param(d);
  }
}

inline onnx::ModelProto new_model() {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  m.mutable_graph()->set_name("cli_test");
  return m;
}

inline std::string save(const onnx::ModelProto& m, const std::string& name) {
  fs::path p = scratch() / (name + ".onnx");
  std::ofstream(p, std::ios::binary) << m.SerializeAsString();
  return p.string();
}

// y = Relu(x) + x, x: float[batch, 8]; tier 1 fuses it.
inline std::string elementwise_model() {
  static const std::string path = [] {
    onnx::ModelProto m = new_model();
    auto* g = m.mutable_graph();
    add_value_info(g->add_input(), "x", {"batch", "8"});
    add_value_info(g->add_output(), "y", {"batch", "8"});
    auto* relu = g->add_node();
    relu->set_op_type("Relu");
    relu->add_input("x");
    relu->add_output("r");
    auto* add = g->add_node();
    add->set_op_type("Add");
    add->add_input("r");
    add->add_input("x");
    add->add_output("y");
    return save(m, "elementwise");
  }();
  return path;
}

}  // namespace cli_harness
