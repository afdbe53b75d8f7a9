// Files the CLI reads besides models: tools/plot_bench.py and the conformance expected-failures
// lists. An installed terrace finds them under its prefix (share/terrace, installed beside it), a
// terrace in a build tree in the source tree it was built from.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

namespace terrace::cli {

// The file `installed` (relative to share/terrace) or `in_source` (relative to the source tree),
// the first that exists of: $TERRACE_DATA_DIR/installed, <the executable's folder>/../share/terrace/
// installed, <the source tree>/in_source. Empty if none; `looked`, if given, gets the paths tried.
std::filesystem::path data_file(const std::string& installed, const std::string& in_source,
                                std::vector<std::string>* looked = nullptr);

}  // namespace terrace::cli
