// The disk code cache under the faults that need other processes: a file system that runs out of
// space in the middle of a write, and two processes writing one entry at once.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "jit/code_cache.h"

namespace terrace::jit {
namespace {

std::filesystem::path fresh_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("terrace_cache_process_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir;
}

size_t files_in(const std::filesystem::path& dir) {
  size_t n = 0;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) ++n;
  return n;
}

// Runs f in a child process; its exit status (128 + signal when killed).
template <class F>
int in_child(F f) {
  const pid_t child = ::fork();
  if (child == 0) _exit(f());
  if (child < 0) return -1;
  int status = 0;
  ::waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// A full disk: the child may write at most 4 KiB per file (RLIMIT_FSIZE; the kernel then fails the
// write with EFBIG, as a full file system fails it with ENOSPC), so a 64 KiB entry fails midway.
// The store is skipped quietly (no exception, no crash), the lookup misses, and neither the torn
// entry nor its temporary file is left behind; a later store with room works.
TEST(CodeCache, a_disk_that_fills_up_during_a_write_leaves_no_entry_and_no_error) {
  const auto dir = fresh_dir("full");
  const std::string object(64 * 1024, 'x');
  const int status = in_child([&] {
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit small{4096, 4096};
    if (::setrlimit(RLIMIT_FSIZE, &small) != 0) return 3;
    try {
      CodeCache cache(dir);
      cache.store("k", object);
      return cache.load("k") ? 1 : 0;
    } catch (...) {
      return 2;
    }
  });
  EXPECT_EQ(status, 0) << "1: a torn entry was a hit, 2: the store threw, 3: no rlimit, else crashed";
  CodeCache cache(dir);
  EXPECT_FALSE(cache.load("k"));
  EXPECT_EQ(files_in(dir / "cpu"), 0u) << "the torn entry or its temporary file was left behind";
  cache.store("k", object);
  EXPECT_EQ(cache.load("k"), object);
  std::filesystem::remove_all(dir);
}

// Two processes storing different objects under one key at once (two programs compiling the same
// kernel), while this one reads it: every read is a miss or one writer's whole object, and one
// whole entry is left, no temporary file.
TEST(CodeCache, two_processes_writing_one_entry_at_once_leave_one_whole_entry) {
  const auto dir = fresh_dir("processes");
  const std::vector<std::string> objects = {std::string(300 * 1024, 'a'), std::string(200 * 1024, 'b')};
  std::vector<pid_t> writers;
  for (const std::string& object : objects) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      CodeCache cache(dir);
      for (int i = 0; i < 200; ++i) cache.store("shared key", object);
      _exit(0);
    }
    writers.push_back(child);
  }
  CodeCache cache(dir);
  int reads = 0, hits = 0, bad = 0;
  for (bool running = true; running; ++reads) {
    std::optional<std::string> got = cache.load("shared key");
    if (got) {
      ++hits;
      if (std::find(objects.begin(), objects.end(), *got) == objects.end()) ++bad;
    }
    running = false;
    for (pid_t w : writers) running = running || ::waitpid(w, nullptr, WNOHANG) == 0;
  }
  for (pid_t w : writers) ::waitpid(w, nullptr, 0);
  EXPECT_EQ(bad, 0) << "of " << reads << " reads (" << hits << " hits), some saw a torn entry";
  std::optional<std::string> last = cache.load("shared key");
  ASSERT_TRUE(last);
  EXPECT_NE(std::find(objects.begin(), objects.end(), *last), objects.end());
  EXPECT_EQ(files_in(cache.path_of("shared key").parent_path()), 1u) << "temporary files were left behind";
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace terrace::jit
