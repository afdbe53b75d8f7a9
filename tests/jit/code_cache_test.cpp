// The disk code cache: round trips, misses on another key or a damaged file, and a second JIT
// that links the object without compiling it.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "jit/code_cache.h"
#include "jit/cpu/cpu_jit.h"

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

// An entry written under another key (another compiler version, flags or source: all are in the
// key) at this key's path is a miss: the key inside the file decides, not the file name.
TEST(CodeCache, an_entry_from_another_compiler_version_is_a_miss) {
  CodeCache cache(fresh_dir("version"));
  cache.store("source|clang 18.1|-O2", "old object");
  std::filesystem::rename(cache.path_of("source|clang 18.1|-O2"), cache.path_of("source|clang 19.1|-O2"));
  EXPECT_FALSE(cache.load("source|clang 19.1|-O2"));
}

// A directory that cannot be written (read-only) stores nothing and loads nothing: every
// lookup is a miss and nothing throws, so the compile goes on without the cache.
// (Root writes anywhere: as root, the check runs in a child process that becomes 'nobody'.)
TEST(CodeCache, a_read_only_directory_is_a_miss_and_no_error) {
  const auto dir = fresh_dir("readonly");
  std::filesystem::create_directories(dir / "cpu");
  using std::filesystem::perms;
  std::filesystem::permissions(dir, perms::owner_all | perms::others_read | perms::others_exec);
  std::filesystem::permissions(dir / "cpu", perms::owner_read | perms::owner_exec | perms::others_read | perms::others_exec);
  auto check = [&] {  // 0: the store was skipped quietly and the load missed
    try {
      CodeCache cache(dir);
      cache.store("k", "object");
      return cache.load("k") ? 1 : 0;
    } catch (...) {
      return 2;
    }
  };
  int result;
  if (::geteuid() != 0) {
    result = check();
  } else {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) _exit(::setgid(65534) == 0 && ::setuid(65534) == 0 ? check() : 3);
    int status = 0;
    ::waitpid(child, &status, 0);
    result = WIFEXITED(status) ? WEXITSTATUS(status) : 4;
  }
  EXPECT_EQ(result, 0) << "1: an entry was stored, 2: it threw, 3: could not drop root, 4: crashed";
  std::filesystem::permissions(dir / "cpu", perms::owner_all);
}

// A file system that is full (a cache whose folder is a file under /dev/full cannot be made
// portably; the same failure, a write that fails midway, comes from a cache folder that is a
// regular file) stores nothing, throws nothing, and leaves no temporary file behind.
TEST(CodeCache, a_directory_that_cannot_take_the_entry_is_a_miss_and_no_error) {
  const auto dir = fresh_dir("blocked");
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "cpu") << "a file where the entries' folder should be";
  CodeCache cache(dir);
  EXPECT_NO_THROW(cache.store("k", "object"));
  EXPECT_FALSE(cache.load("k"));
}

// Writers racing on one key (as two processes compiling the same kernel do) leave one whole
// entry: every load meanwhile is a miss or one writer's exact object, never a mix.
TEST(CodeCache, concurrent_writers_of_one_key_leave_one_whole_entry) {
  CodeCache cache(fresh_dir("race"));
  std::vector<std::string> objects;
  for (int w = 0; w < 8; ++w) objects.push_back(std::string(size_t(20000 + w * 1000), char('a' + w)));
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < 8; ++w)
    threads.emplace_back([&, w] {
      for (int i = 0; i < 50; ++i) {
        cache.store("shared key", objects[size_t(w)]);
        std::optional<std::string> got = cache.load("shared key");
        if (got && std::find(objects.begin(), objects.end(), *got) == objects.end()) ++bad;
      }
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
  std::optional<std::string> last = cache.load("shared key");
  ASSERT_TRUE(last);
  EXPECT_NE(std::find(objects.begin(), objects.end(), *last), objects.end());
  size_t files = 0;
  for (auto& e : std::filesystem::directory_iterator(cache.path_of("shared key").parent_path())) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1u) << "temporary files were left behind";
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

// Cached code is executed, so only entries this user wrote count: not one others may write, not
// one another user owns, not one in a folder anyone may write without the sticky bit.
TEST(CodeCache, only_this_users_entries_that_others_cannot_write_are_loaded) {
  using std::filesystem::perms;
  const auto dir = fresh_dir("owner");
  CodeCache cache(dir);
  cache.store("k", "object");
  ASSERT_TRUE(cache.load("k"));
  const auto entry = cache.path_of("k"), folder = dir / "cpu";
  std::filesystem::permissions(entry, perms::owner_read | perms::owner_write | perms::group_write);
  EXPECT_FALSE(cache.load("k")) << "an entry its group may write was loaded";
  std::filesystem::permissions(entry, perms::owner_read | perms::owner_write);
  EXPECT_TRUE(cache.load("k"));
  std::filesystem::permissions(folder, perms::all);
  EXPECT_FALSE(cache.load("k")) << "an entry in a folder anyone may write was loaded";
  cache.store("k2", "other");
  EXPECT_FALSE(std::filesystem::exists(cache.path_of("k2"))) << "stored into a folder anyone may write";
  std::filesystem::permissions(folder, perms::all | perms::sticky_bit);  // as /tmp: entries cannot be swapped
  EXPECT_TRUE(cache.load("k"));
  std::filesystem::permissions(folder, perms::owner_all);
  if (::geteuid() == 0) {
    ASSERT_EQ(::chown(entry.c_str(), 65534, 65534), 0);
    EXPECT_FALSE(cache.load("k")) << "an entry another user owns was loaded";
  }
}

TEST(CodeCache, entries_are_stored_for_their_owner_alone_whatever_the_umask) {
  const mode_t old = ::umask(0);
  CodeCache cache(fresh_dir("umask"));
  cache.store("k", "object");
  ::umask(old);
  EXPECT_EQ(std::filesystem::status(cache.path_of("k")).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  EXPECT_TRUE(cache.load("k"));
}

TEST(CodeCache, writable_says_why_a_folder_cannot_take_entries) {
  const auto dir = fresh_dir("writable");
  EXPECT_EQ(CodeCache(dir).writable(), "");
  std::filesystem::remove_all(dir);
  std::ofstream(dir) << "a file, not a folder";
  EXPECT_NE(CodeCache(dir).writable(), "");
  std::filesystem::remove(dir);
  EXPECT_NE(CodeCache(std::filesystem::path()).writable(), "");
}

// Validation found the code wrong: the entry goes, and the next compile is a real one.
TEST(CodeCache, forgetting_compiled_code_removes_its_entry) {
  CodeCache cache(fresh_dir("forget"));
  const char* src = R"(extern "C" void one(void** b, long long begin, long long end) {
  for (long long i = begin; i < end; ++i) ((float*)b[0])[i] = 1.0f;
})";
  auto first = CpuJit::create()->compile("one", src, {"one"}, &cache);
  auto second = CpuJit::create()->compile("one", src, {"one"}, &cache);
  ASSERT_TRUE(second->timings().cached);
  second->forget_cached();
  EXPECT_FALSE(CpuJit::create()->compile("one", src, {"one"}, &cache)->timings().cached);
}

}  // namespace
}  // namespace terrace::jit
