// Replays every input the fuzzer ever crashed on (tests/fuzz/regressions/) and a few seed models
// through the fuzz target's body in the normal build; tools/fuzz.sh replays them again under ASan
// and UBSan.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/fuzz/session_fuzzer.h"

namespace terrace::fuzz {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

Outcome replay(const fs::path& p) {
  std::string bytes = read_file(p);
  return fuzz_one(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

TEST(FuzzRegressions, EveryKeptCrashInputLoadsOrFailsCleanly) {
  fs::path dir = fs::path(TERRACE_SOURCE_DIR) / "tests/fuzz/regressions";
  int replayed = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (!e.is_regular_file() || e.path().filename() == "README.md") continue;
    SCOPED_TRACE(e.path().string());
    EXPECT_NO_THROW(replay(e.path()));
    ++replayed;
  }
  std::printf("[ summary  ] %d regression inputs replayed\n", replayed);
}

// The target itself works: a seed model loads and its calls reach tier 1's compiles.
TEST(FuzzRegressions, SeedModelLoadsAndRuns) {
  fs::path m = "/usr/share/libonnx-testdata/data/node/test_add/model.onnx";
  if (!fs::exists(m)) GTEST_SKIP() << m << " is not installed";
  Outcome o = replay(m);
  EXPECT_TRUE(o.loaded);
  EXPECT_EQ(o.calls, 4);
}

// The float8/int4/float4 models of ONNX 1.18's node suite (where tools/fetch_onnx_tests.sh has
// fetched it) run with random codes in their narrow inputs (NaN and Inf codes included), tier 1 on.
TEST(FuzzRegressions, NarrowTypeModelsRunOnRandomCodes) {
  const char* home = std::getenv("HOME");
  fs::path dir = fs::path(home ? home : "") / ".cache/terrace/onnx-tests/onnx-1.18.0/node";
  if (!fs::exists(dir / ".complete")) GTEST_SKIP() << dir << " is absent (bash tools/fetch_onnx_tests.sh)";
  int ran = 0;
  for (const char* t : {"test_cast_FLOAT8E4M3FN_to_FLOAT", "test_cast_FLOAT8E5M2_to_FLOAT16", "test_cast_INT4_to_INT8",
                        "test_cast_UINT4_to_FLOAT", "test_cast_FLOAT4E2M1_to_FLOAT", "test_cast_FLOAT_to_FLOAT8E4M3FNUZ",
                        "test_dequantizelinear_e4m3fn", "test_dequantizelinear_int4", "test_quantizelinear_e5m2"}) {
    SCOPED_TRACE(t);
    Outcome o = replay(dir / t / "model.onnx");
    EXPECT_TRUE(o.loaded);
    EXPECT_EQ(o.calls, 4);
    ++ran;
  }
  EXPECT_EQ(ran, 9);
}

}  // namespace
}  // namespace terrace::fuzz
