// terrace: the command-line tool. Dispatches to the subcommands in tools/cmd_*.cpp.
#include <cstdio>
#include <cstring>

#include "interp/error.h"
#include "tools/commands.h"

using namespace terrace::cli;

static const char* kUsage =
    "usage: terrace <command> [args]\n"
    "  run MODEL [--input NAME=FILE.pb]... [--random-inputs] [--repeat N] [--json FILE]\n"
    "  explain MODEL\n"
    "  conformance [DIR...] [--tier interp|cpu|gpu] [--filter REGEX] [--json FILE] [--expected FILE]\n"
    "              [--write-expected FILE] [--min-pass N] [--isolate] [-j N] [--timeout S]\n"
    "              [--rtol X] [--atol X] [-v]\n"
    "  bench MODEL [--calls N] [--tier interp|cpu|gpu] [--batch N] [--json FILE] [--plot FILE]\n";

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  std::string cmd = argv[1];
  Args args(argv + 2, argv + argc);
  try {
    if (cmd == "run") return cmd_run(args);
    if (cmd == "explain") return cmd_explain(args);
    if (cmd == "conformance") return cmd_conformance(args);
    if (cmd == "bench") return cmd_bench(args);
    std::fprintf(stderr, "terrace: unknown command '%s'\n%s", cmd.c_str(), kUsage);
    return 2;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "terrace %s: %s\n", cmd.c_str(), e.message.c_str());
    return 2;
  } catch (const terrace::Error& e) {
    std::fprintf(stderr, "terrace %s: error: %s\n", cmd.c_str(), e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "terrace %s: error: %s\n", cmd.c_str(), e.what());
    return 1;
  }
}
