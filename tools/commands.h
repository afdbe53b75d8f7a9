// The terrace subcommands; each takes the arguments after its name and returns the exit code
// (0 success, 1 failure, 2 usage error).
#pragma once
#include <string>
#include <vector>

namespace terrace::cli {

using Args = std::vector<std::string>;

int cmd_run(const Args& args);
int cmd_explain(const Args& args);
int cmd_conformance(const Args& args);
int cmd_bench(const Args& args);

// Thrown for a usage error; main prints the message and exits 2.
struct UsageError {
  std::string message;
};

}  // namespace terrace::cli
