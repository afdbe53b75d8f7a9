// terrace: the command-line tool. Parses each command's options against its definition
// (tools/cli_util.h; the usage and every --help are generated from the same definitions) and
// dispatches to the subcommands in tools/cmd_*.cpp.
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "interp/error.h"
#include "interp/log.h"
#include "tools/cli_util.h"
#include "tools/commands.h"

#ifndef TERRACE_VERSION
#define TERRACE_VERSION "0.1.0"
#endif
#ifndef TERRACE_GIT_COMMIT
#define TERRACE_GIT_COMMIT ""
#endif

using namespace terrace;
using namespace terrace::cli;

namespace {

struct Command {
  const CommandDef* def;
  int (*run)(const ParsedArgs&);
  bool status_line;  // ends with "&&&& PASSED|FAILED terrace ..." (as trtexec does)
};

const Command kCommands[] = {
    {&kRunCommand, cmd_run, true},
    {&kExplainCommand, cmd_explain, false},
    {&kValidateCommand, cmd_validate, true},
    {&kCompileCommand, cmd_compile, true},
    {&kConformanceCommand, cmd_conformance, true},
    {&kBenchCommand, cmd_bench, true},
    {&kCacheCommand, cmd_cache, false},
};

std::string usage() {
  std::string s =
      "usage: terrace <command> [args]          (terrace <command> --help: its options in full)\n"
      "       terrace --version | --help\n\ncommands:\n";
  for (const Command& c : kCommands) {
    s += wrap(std::string(c.def->name) + ": " + c.def->summary, 100, "  ");
    std::string syn = synopsis(*c.def, 96);
    s += "    ";
    for (char ch : syn) s += ch == '\n' ? std::string("\n    ") : std::string(1, ch);
    s += "\n";
  }
  s += "\nOptions take their value as `--opt value` or `--opt=value`. Exit codes: 0 success, 1 failure,\n"
       "2 usage error. Environment: TERRACE_LOG (error|warn|info|debug|trace, and the topics\n"
       "graph_breaks,recompiles,deopts,promotions,validation), TERRACE_MAX_TIER (interp|cpu|gpu),\n"
       "TERRACE_MODE (default|reduce-overhead|max-autotune), TERRACE_STRICT=1, TERRACE_PROFILE=FILE.json,\n"
       "TERRACE_CACHE_DIR, TERRACE_CACHE_MAX_MB, TERRACE_DUMP_DIR, TERRACE_RENDER_DUMP_DIR,\n"
       "TERRACE_GPU_PASS_DUMP_DIR, TERRACE_RECHECK, TERRACE_SPILL_DIR, TERRACE_FAULT; see README.md.\n";
  return s;
}

std::string version() {
  std::string s = std::string("terrace ") + TERRACE_VERSION;
  if (*TERRACE_GIT_COMMIT) s += std::string(" (commit ") + TERRACE_GIT_COMMIT + ")";
  s += "\ntiers: interp";
  if (highest_available_tier() >= Tier::Cpu) {
    s += ", cpu (Clang and LLVM ORC";
#ifdef TERRACE_HAVE_DNNL
    s += ", oneDNN";
#endif
    s += ")";
  } else {
    s += "; cpu: not built";
  }
  if (highest_available_tier() >= Tier::Gpu) s += ", gpu (NVRTC, the CUDA driver, cuBLASLt)\n";
  else s += "; gpu: not available here: " + tier_unavailable_reason(Tier::Gpu) + "\n";
  return s;
}

// The command line as typed, for the status line.
std::string command_line(int argc, char** argv) {
  std::string s = "terrace";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    bool plain = !a.empty() && a.find_first_of(" \t\n'\"$`\\*?;&|<>()") == std::string::npos;
    if (plain) {
      s += " " + a;
    } else {
      s += " '";
      for (char c : a) s += c == '\'' ? std::string("'\\''") : std::string(1, c);
      s += "'";
    }
  }
  return s;
}

// stdout must reach its destination: a full disk (or `> /dev/full`) is a failure, not a success.
int check_stdout(int rc) {
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fprintf(stderr, "terrace: error: cannot write standard output: %s\n", std::strerror(errno));
    return rc == 0 ? 1 : rc;
  }
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  log_level();  // an unknown TERRACE_LOG is said once, before anything else
  if (argc < 2) {
    std::fputs(usage().c_str(), stderr);
    return 2;
  }
  std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    if (name == "help" && argc > 2) {
      for (const Command& c : kCommands)
        if (std::string(argv[2]) == c.def->name) {
          std::fputs(help_text(*c.def).c_str(), stdout);
          return check_stdout(0);
        }
    }
    std::fputs(usage().c_str(), stdout);
    return check_stdout(0);
  }
  if (name == "--version" || name == "version") {
    std::fputs(version().c_str(), stdout);
    return check_stdout(0);
  }
  const Command* cmd = nullptr;
  for (const Command& c : kCommands)
    if (name == c.def->name) cmd = &c;
  if (!cmd) {
    std::fprintf(stderr, "terrace: unknown command '%s'\n%s", name.c_str(), usage().c_str());
    return 2;
  }
  ParsedArgs args;
  try {
    args = parse_args(*cmd->def, Args(argv + 2, argv + argc));
  } catch (const UsageError& e) {
    std::fprintf(stderr, "terrace %s: %s\n", name.c_str(), e.message.c_str());
    return 2;
  }
  if (args.help) {
    std::fputs(help_text(*cmd->def).c_str(), stdout);
    return check_stdout(0);
  }
  int rc = 1;
  try {
    rc = cmd->run(args);
  } catch (const UsageError& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "terrace %s: %s\n", name.c_str(), e.message.c_str());
    return check_stdout(2);
  } catch (const terrace::Error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "terrace %s: error: %s\n", name.c_str(), e.what());
    rc = 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "terrace %s: error: %s\n", name.c_str(), e.what());
    rc = 1;
  }
  if (cmd->status_line) print_status_line(command_line(argc, argv), rc == 0);
  return check_stdout(rc);
}
