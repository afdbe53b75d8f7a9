// Importer robustness: mutated valid models either load or fail with terrace::Error, never crash.
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "tests/import/import_util.h"

namespace terrace::test {
namespace {

// Control flow, constants, initializers and symbolic shapes: many fields for mutations to hit.
constexpr const char* kRichModel = R"(
<ir_version: 8, opset_import: ["" : 17]>
rich (float[N, 4] X, bool C) => (float[N, 4] Y, int64[2] S)
<float[4] W = {1.0, 2.0, 3.0, 4.0}, int64[2] shape = {-1, 4}>
{
  m = Mul(X, W)
  r = Reshape(m, shape)
  S = Shape(r)
  n = Constant<value = int64 {3}>()
  Y = Loop(n, C, r) <body = body (int64 i, bool c, float[N, 4] x) => (bool co, float[N, 4] xo) {
    co = Identity(c)
    xo = If(c) <then_branch = t () => (float[N, 4] o) { o = Add(x, W) },
                else_branch = e () => (float[N, 4] o) { o = Sigmoid(x) }>
  }>
}
)";

// Overwrites, inserts or deletes a few bytes, or truncates.
std::string mutate(std::string bytes, std::mt19937& rng) {
  int edits = int(rng() % 4) + 1;
  for (int k = 0; k < edits && !bytes.empty(); ++k) {
    size_t at = rng() % bytes.size();
    switch (rng() % 5) {
      case 0: bytes[at] = char(rng()); break;
      case 1: bytes[at] = char(bytes[at] ^ (1 << (rng() % 8))); break;
      case 2: bytes.insert(bytes.begin() + long(at), char(rng())); break;
      case 3: bytes.erase(at, 1); break;
      default: bytes.resize(at); break;
    }
  }
  return bytes;
}

void fuzz(const std::string& seed, uint32_t rng_seed, int iterations) {
  std::mt19937 rng(rng_seed);
  int loaded = 0;
  for (int i = 0; i < iterations; ++i) {
    std::string bytes = mutate(seed, rng);
    try {
      load_onnx_bytes(bytes);
      ++loaded;
    } catch (const Error&) {
      // the expected outcome for most mutations
    } catch (const std::exception& e) {
      ADD_FAILURE() << "mutation " << i << " escaped as a non-terrace exception: " << e.what();
    }
  }
  std::printf("[ summary  ] %d of %d mutated models loaded\n", loaded, iterations);
}

TEST(Fuzz, unmutated_rich_model_loads) {
  Model m = load_onnx_bytes(bytes_of(parse_model(kRichModel)));
  EXPECT_EQ(m.graph->nodes.size(), 5u);
}

TEST(Fuzz, mutated_small_models_load_or_throw_terrace_errors) {
  fuzz(bytes_of(parse_model(kSmallModel)), 1, 500);
}

TEST(Fuzz, mutated_control_flow_models_load_or_throw_terrace_errors) {
  fuzz(bytes_of(parse_model(kRichModel)), 2, 500);
}

// Values that break naive index arithmetic: negative, zero, past any rank, overflowing.
int64_t hostile_int(std::mt19937& rng) {
  static const int64_t kValues[] = {INT64_MIN, -(int64_t(1) << 40), -100, -5, -3, -2, -1, 0, 1,
                                    2, 3, 5, 7, 100, int64_t(1) << 40, INT64_MAX};
  return kValues[rng() % (sizeof kValues / sizeof kValues[0])];
}

// Replaces one int attribute value, or one dim of one graph input (sometimes its whole rank).
void mutate_semantics(onnx::GraphProto& g, std::mt19937& rng) {
  if (rng() % 2 == 0 && g.node_size() > 0) {
    onnx::NodeProto& n = *g.mutable_node(int(rng() % g.node_size()));
    if (n.attribute_size() == 0) return;
    onnx::AttributeProto& a = *n.mutable_attribute(int(rng() % n.attribute_size()));
    if (a.has_i()) a.set_i(hostile_int(rng));
    if (a.ints_size() > 0) a.set_ints(int(rng() % a.ints_size()), hostile_int(rng));
    if (a.has_g()) mutate_semantics(*a.mutable_g(), rng);
  } else if (g.input_size() > 0) {
    auto* shape = g.mutable_input(int(rng() % g.input_size()))
                      ->mutable_type()->mutable_tensor_type()->mutable_shape();
    if (shape->dim_size() > 0 && rng() % 2)
      shape->mutable_dim(int(rng() % shape->dim_size()))->set_dim_value(int64_t(rng() % 6));
    else {
      shape->clear_dim();
      for (int r = int(rng() % 6); r > 0; --r) shape->add_dim()->set_dim_value(int64_t(rng() % 5));
    }
  }
}

// Shape inference is where hostile attribute values and ranks used to crash ONNX 1.12.
TEST(Fuzz, hostile_attributes_and_ranks_in_node_test_models_never_crash) {
  namespace fs = std::filesystem;
  fs::path node = "/usr/share/libonnx-testdata/data/node";
  if (!fs::is_directory(node)) GTEST_SKIP() << node << " is not installed";
  std::mt19937 rng(3);
  int models = 0;
  for (const auto& test : fs::directory_iterator(node)) {
    std::ifstream in(test.path() / "model.onnx", std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    onnx::ModelProto base;
    if (!base.ParseFromString(bytes.str())) continue;
    for (int i = 0; i < 3; ++i, ++models) {
      onnx::ModelProto m = base;
      mutate_semantics(*m.mutable_graph(), rng);
      try {
        load_onnx_bytes(bytes_of(m));
      } catch (const Error&) {
      }
    }
  }
  EXPECT_GT(models, 1000);
}

}  // namespace
}  // namespace terrace::test
