// Replays every input the fuzzer ever crashed on (tests/fuzz/regressions/) and a few seed models
// through the fuzz target's body in the normal build; tools/fuzz.sh replays them again under ASan
// and UBSan.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace terrace::fuzz
