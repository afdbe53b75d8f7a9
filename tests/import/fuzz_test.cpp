// Importer robustness: mutated valid models either load or fail with terrace::Error, never crash.
#include <random>

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

}  // namespace
}  // namespace terrace::test
