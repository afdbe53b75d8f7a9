// This process's resident memory, for tests that check what a change gives back to the OS.
#pragma once
#include <cstddef>
#include <fstream>
#include <string>

namespace terrace::testing {

// A size of /proc/self/status in bytes (`key` "VmRSS:", the resident set, or "VmHWM:", its peak);
// 0 where /proc cannot be read.
inline size_t status_bytes(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string k;
  size_t kb = 0;
  while (f >> k) {
    if (k == key) {
      f >> kb;
      return kb * 1024;
    }
    f.ignore(1 << 10, '\n');
  }
  return 0;
}
inline size_t resident_bytes() { return status_bytes("VmRSS:"); }

}  // namespace terrace::testing
