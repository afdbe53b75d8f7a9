// tools/data_files.h: the CLI's data files, installed or in the source tree.
#include "tools/data_files.h"

#include <cstdlib>
#include <system_error>

#ifndef TERRACE_SOURCE_DIR
#define TERRACE_SOURCE_DIR ""
#endif

namespace terrace::cli {

namespace fs = std::filesystem;

fs::path data_file(const std::string& installed, const std::string& in_source, std::vector<std::string>* looked) {
  std::vector<fs::path> candidates;
  if (const char* dir = std::getenv("TERRACE_DATA_DIR"); dir && *dir) candidates.push_back(fs::path(dir) / installed);
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) candidates.push_back(exe.parent_path().parent_path() / "share" / "terrace" / installed);
  if (*TERRACE_SOURCE_DIR) candidates.push_back(fs::path(TERRACE_SOURCE_DIR) / in_source);
  for (const fs::path& p : candidates) {
    if (looked) looked->push_back(p.string());
    if (fs::is_regular_file(p, ec)) return p;
  }
  return {};
}

}  // namespace terrace::cli
