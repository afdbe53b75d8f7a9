// The terrace subcommands. Each is a CommandDef (its options, from which its parser, its --help and
// the top-level usage are all generated; tools/cli_util.h) and a function that takes the parsed
// command line and returns the exit code (0 success, 1 failure, 2 usage error).
#pragma once
#include <string>
#include <vector>

namespace terrace::cli {

using Args = std::vector<std::string>;

struct CommandDef;
struct ParsedArgs;

extern const CommandDef kRunCommand;
extern const CommandDef kExplainCommand;
extern const CommandDef kConformanceCommand;
extern const CommandDef kBenchCommand;
extern const CommandDef kCacheCommand;
extern const CommandDef kValidateCommand;
extern const CommandDef kCompileCommand;

int cmd_run(const ParsedArgs& args);
int cmd_explain(const ParsedArgs& args);
int cmd_conformance(const ParsedArgs& args);
int cmd_bench(const ParsedArgs& args);
int cmd_cache(const ParsedArgs& args);
int cmd_validate(const ParsedArgs& args);
int cmd_compile(const ParsedArgs& args);

// Thrown for a usage error; main prints the message and exits 2.
struct UsageError {
  std::string message;
};

}  // namespace terrace::cli
