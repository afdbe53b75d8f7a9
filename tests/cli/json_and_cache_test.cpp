// Pieces the CLI's reports and settings rest on: JSON numbers that read back exactly (issue 13,
// point 5) and the disk code cache's size cap and eviction (point 6).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <limits>
#include <random>
#include <thread>

#include "interp/json.h"
#include "jit/code_cache.h"

namespace {

std::string number(double v) {
  terrace::JsonWriter j;
  j.value(v);
  return j.str();
}

TEST(Json, doubles_round_trip_exactly_in_the_shortest_form) {
  EXPECT_EQ(number(0.1), "0.1");
  EXPECT_EQ(number(1.0), "1");
  EXPECT_EQ(number(9.5e-7), "9.5e-07");
  EXPECT_EQ(number(123456.789), "123456.789");  // 6 significant digits gave 123457
  EXPECT_EQ(number(1.0 / 3.0), "0.3333333333333333");
  EXPECT_EQ(number(std::numeric_limits<double>::quiet_NaN()), "null");
  EXPECT_EQ(number(-std::numeric_limits<double>::infinity()), "null");
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> mantissa(-1, 1);
  std::uniform_int_distribution<int> exponent(-300, 300);
  for (int i = 0; i < 10000; ++i) {
    double v = std::ldexp(mantissa(rng), exponent(rng));
    std::string s = number(v);
    EXPECT_EQ(std::strtod(s.c_str(), nullptr), v) << s;
    if (HasFailure()) break;
  }
  float f = 0.1f;  // a float reads back as the double it widens to
  EXPECT_EQ(float(std::strtod(number(f).c_str(), nullptr)), f);
}

std::filesystem::path fresh_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("terrace_cli_cache_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir;
}

TEST(CodeCacheCap, the_oldest_entries_go_once_the_cache_passes_its_limit) {
  const std::string object(300 << 10, 'o');  // 300 KiB an entry
  const auto dir = fresh_dir("cap");
  terrace::jit::CodeCache cache(dir, uint64_t(1) << 20);  // 1 MiB: three entries fit
  for (int i = 0; i < 3; ++i) {
    cache.store("key " + std::to_string(i), object);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // distinct modification times
  }
  EXPECT_EQ(cache.info().entries, 3u);
  ASSERT_TRUE(cache.load("key 0"));  // a hit makes key 0 the most recently used
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  cache.store("key 3", object);
  EXPECT_EQ(cache.info().entries, 3u);
  EXPECT_LE(cache.info().bytes, cache.max_bytes());
  EXPECT_TRUE(cache.load("key 0"));
  EXPECT_FALSE(cache.load("key 1")) << "the least recently used entry is evicted";
  EXPECT_TRUE(cache.load("key 2"));
  EXPECT_TRUE(cache.load("key 3"));
  terrace::jit::CodeCache::Info removed = cache.clear();
  EXPECT_EQ(removed.entries, 3u);
  EXPECT_EQ(cache.info().entries, 0u);
  std::filesystem::remove_all(dir);
}

TEST(CodeCacheCap, has_a_documented_default_and_an_environment_override) {
  ::unsetenv("TERRACE_CACHE_MAX_MB");
  EXPECT_EQ(terrace::jit::CodeCache::default_max_bytes(), terrace::jit::CodeCache::kDefaultMaxBytes);
  EXPECT_EQ(terrace::jit::CodeCache::kDefaultMaxBytes, uint64_t(512) << 20);
  ::setenv("TERRACE_CACHE_MAX_MB", "3", 1);
  EXPECT_EQ(terrace::jit::CodeCache::default_max_bytes(), uint64_t(3) << 20);
  EXPECT_EQ(terrace::jit::CodeCache(fresh_dir("env")).max_bytes(), uint64_t(3) << 20);
  ::setenv("TERRACE_CACHE_MAX_MB", "lots", 1);
  EXPECT_EQ(terrace::jit::CodeCache::default_max_bytes(), terrace::jit::CodeCache::kDefaultMaxBytes);
  ::unsetenv("TERRACE_CACHE_MAX_MB");
}

}  // namespace
