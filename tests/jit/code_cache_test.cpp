// The disk code cache: round trips, misses on another key or a damaged file, and a second JIT
// that links the object without compiling it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "jit/code_cache.h"
#include "jit/cpu_jit.h"

namespace terrace::jit {
namespace {

std::filesystem::path fresh_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("terrace_cache_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir;
}

TEST(CodeCache, stores_and_loads_an_object_under_its_exact_key) {
  CodeCache cache(fresh_dir("roundtrip"));
  cache.store("key one", std::string("\0object\x7f", 8));
  EXPECT_EQ(cache.load("key one"), std::string("\0object\x7f", 8));
  EXPECT_FALSE(cache.load("key two"));
  EXPECT_FALSE(cache.load("key on"));
}

TEST(CodeCache, a_corrupt_or_truncated_entry_is_a_miss) {
  CodeCache cache(fresh_dir("corrupt"));
  cache.store("k", "0123456789abcdef");
  const auto path = cache.path_of("k");
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::string flipped = bytes;
  flipped.back() ^= 1;
  std::ofstream(path, std::ios::binary) << flipped;
  EXPECT_FALSE(cache.load("k")) << "a flipped object byte must fail the checksum";
  std::ofstream(path, std::ios::binary) << bytes.substr(0, bytes.size() - 3);
  EXPECT_FALSE(cache.load("k")) << "a truncated file is a miss";
  std::ofstream(path, std::ios::binary) << "";
  EXPECT_FALSE(cache.load("k"));
  cache.store("k", "fresh");
  EXPECT_EQ(cache.load("k"), "fresh");
}

TEST(CodeCache, an_empty_directory_disables_it) {
  CodeCache cache{std::filesystem::path()};
  EXPECT_FALSE(cache.enabled());
  cache.store("k", "v");
  EXPECT_FALSE(cache.load("k"));
}

TEST(CodeCache, a_second_jit_links_the_cached_object_without_compiling) {
  CodeCache cache(fresh_dir("jit"));
  const char* src = R"(extern "C" void add_two(void** b, long long begin, long long end) {
  float* x = (float*)b[0];
  for (long long i = begin; i < end; ++i) x[i] += 2.0f;
})";
  auto first = CpuJit::create()->compile("add_two", src, {"add_two"}, &cache);
  EXPECT_FALSE(first->timings().cached);
  std::unique_ptr<CpuJit> other = CpuJit::create();
  auto second = other->compile("add_two", src, {"add_two"}, &cache);
  EXPECT_TRUE(second->timings().cached);
  EXPECT_EQ(second->timings().frontend_ms, 0);
  float data[3] = {1, 2, 3};
  void* buffers[1] = {data};
  second->kernel("add_two")(buffers, 0, 3);
  EXPECT_EQ(data[0], 3);
  EXPECT_EQ(data[2], 5);
  // Another source is another key.
  auto third = other->compile("add_two", std::string(src) + "\n", {"add_two"}, &cache);
  EXPECT_FALSE(third->timings().cached);
}

}  // namespace
}  // namespace terrace::jit
