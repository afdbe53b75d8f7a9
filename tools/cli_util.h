// Helpers shared by the terrace subcommands: the option definitions every command's parser, --help
// and the top-level usage are generated from; value parsing; input generation; file output.
#pragma once
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "tiers/session.h"
#include "tools/commands.h"

namespace terrace::cli {

// ---- option definitions ----

// One option of a command. `value` names its argument ("NAME=FILE.pb"); nullptr for a flag.
struct OptionDef {
  const char* name;             // "--input"
  const char* value;            // "NAME=FILE.pb", or nullptr: a flag
  const char* help;             // one line
  bool repeatable = false;      // may be given more than once (otherwise twice is a usage error)
  const char* alias = nullptr;  // another spelling ("-j" for "--jobs", "-v" for "--verbose")
};

// A command: its name, operands, one-line summary and options. `--help`/`-h` is implied.
struct CommandDef {
  const char* name;      // "run"
  const char* operands;  // how its operands read in the synopsis ("MODEL", "[DIR...]")
  const char* summary;   // one sentence
  std::vector<OptionDef> options;
  size_t min_operands = 0, max_operands = SIZE_MAX;
  const char* operand_name = "operand";  // in "no MODEL given", "more than one MODEL given"
  const char* details = nullptr;         // more text for --help (may be nullptr)
};

// The command line of one command, parsed against its definition: operands in order, options in
// the order given (each value already split from `--opt=value` or taken from the next argument).
struct ParsedArgs {
  const CommandDef* def = nullptr;
  std::vector<std::string> operands;
  std::vector<std::pair<std::string, std::string>> options;  // {canonical name, value}
  bool help = false;
  bool has(const std::string& name) const;
  // The value of a non-repeatable option, if given.
  std::optional<std::string> get(const std::string& name) const;
  // Every value of a repeatable option, in order.
  std::vector<std::string> all(const std::string& name) const;
};

// Accepts `--opt value`, `--opt=value`, `-jN` (a one-letter alias with its value attached), and
// `--` (everything after is an operand). UsageError for an unknown option, a missing value, a value
// given to a flag, a non-repeatable option given twice, or an operand count outside the definition.
ParsedArgs parse_args(const CommandDef& def, const Args& args);

// "terrace run MODEL [--input NAME=FILE.pb]... [--repeat N] ..." wrapped under `width` columns.
std::string synopsis(const CommandDef& def, size_t width = 100);
// `text` broken into lines of at most `width` columns (a word longer than that has its own line),
// each starting with `indent`, each ending with a newline.
std::string wrap(const std::string& text, size_t width, const std::string& indent);
// The full --help text: synopsis, summary, one line per option, details.
std::string help_text(const CommandDef& def);

// ---- values ----

// Parses a non-negative integer option value; UsageError naming the option otherwise.
int64_t parse_count(const std::string& option, const std::string& text);
// Parses a positive integer option value (at least 1); UsageError naming the option otherwise.
int64_t parse_positive(const std::string& option, const std::string& text);
// "NAME=VALUE" -> {NAME, VALUE}, both non-empty; UsageError otherwise.
std::pair<std::string, std::string> split_assignment(const std::string& option, const std::string& text);
// Every NAME=VALUE of a repeatable option; UsageError if a NAME is given twice.
std::vector<std::pair<std::string, std::string>> assignments(const ParsedArgs& p, const std::string& option);
// Parses --tier's value.
Tier parse_tier(const std::string& text);
// Parses --mode's value (default, reduce-overhead, max-autotune).
Mode parse_mode(const std::string& text);

// The session options of run and bench over `options` (from the environment): --profile FILE
// (a Chrome trace, Options::profile_file), --strict (Options::strict) and --mode (Options::mode).
void apply_session_options(const ParsedArgs& p, Options& options);
// Their definitions, for the commands' option lists.
extern const OptionDef kProfileOption, kStrictOption, kModeOption, kThreadsOption, kShapesOption;

// ---- tiers ----

// The highest tier this build can run here: gpu where tier 2 was built and a GPU, its driver and
// NVRTC are found, cpu where tier 1 was built, else interp.
Tier highest_available_tier();
// Whether tier `t` can run here, probing no more than it needs: interp always, cpu where tier 1
// was built, gpu as highest_available_tier() finds (a CUDA context, opened only for this question).
bool tier_available(Tier t);
// Why tier `t` is not available here ("" when it is): no tier-1 JIT in this build, or no GPU
// (the driver's or NVRTC's reason).
std::string tier_unavailable_reason(Tier t);
// The tier a command will run at most: `options.max_tier` lowered to what is available. When the
// user asked for more (--tier, or TERRACE_MAX_TIER) than is available, says so once on stderr,
// naming what runs instead. Without a request the default (the highest tier) is silently the
// highest available.
Tier effective_tier(const char* command, Tier requested, bool explicitly_requested);
// CUDA does not survive fork(): a process that initialised the driver and then forks hands its
// children a driver that answers CUDA_ERROR_NOT_INITIALIZED. A command that forks workers calls this
// before anything asks for the tiers: the GPU is probed in a child process, and the answers above
// come from it, so this process never initialises CUDA.
void probe_tiers_in_a_child();
// Whether TERRACE_MAX_TIER is set (an explicit request).
bool tier_from_env();

// ---- inputs ----

// Whole shapes of inputs (--shapes NAME:DxDxD, trtexec's), for dims that have no names.
using InputShapes = std::vector<std::pair<std::string, Shape>>;
// The --shapes of `p` (repeatable, each a comma-separated list): UsageError for a malformed entry,
// an input given twice, a name that is no graph input, or a rank or fixed dim unlike the model's.
InputShapes parse_shapes(const ParsedArgs& p, const Graph& graph);
// The same for --shapes' values (each a comma-separated list), from the CLI or elsewhere.
InputShapes parse_shapes(const std::vector<std::string>& lists, const Graph& graph);

// Deterministic random inputs for every graph input: unknown dims become 1 unless given in
// `dims` ("name=value" per symbolic dim name), or the whole shape in `shapes`; floats uniform in
// [-1, 1], integers in [0, 10).
NamedTensors random_inputs(const Graph& graph, uint64_t seed,
                           const std::vector<std::pair<std::string, int64_t>>& dims = {},
                           const InputShapes& shapes = {});
// UsageError unless every name in `dims` is a symbolic dim of some graph input.
void check_dim_names(const Graph& graph, const std::vector<std::pair<std::string, int64_t>>& dims,
                     const std::string& option = "--dim");
// UsageError unless `name` is a graph input.
void check_input_name(const Graph& graph, const std::string& name, const std::string& option = "--input");

// ---- output ----

// Writes the bytes to `path`, flushed and closed: IoError naming the path and the reason (a full
// disk, /dev/full, a missing folder) on any failure.
void write_text_file(const std::string& path, const std::string& text);
// The final status line of run, bench and conformance (as trtexec's): "&&&& PASSED terrace run".
void print_status_line(const std::string& command, bool passed);

// A progress line on stderr for long work (bench's calls, conformance's tests), shown only when
// stderr is a terminal and the work has taken more than a second, at most 4 times a second; the
// line is erased when the object goes.
class Progress {
 public:
  Progress(std::string label, int64_t total);  // total 0: not known (work bounded by time)
  ~Progress();
  // `done` of the total; `what` says what was done last ("last 3.2 ms", a test's name).
  void update(int64_t done, const std::string& what);

 private:
  std::string label_;
  int64_t total_;
  std::chrono::steady_clock::time_point start_;
  double shown_ms_ = 0;
  size_t width_ = 0;
  bool tty_;
};

// This process's peak resident memory in MB since it started (/proc/self/status VmHWM), or -1
// where that is not available.
double peak_rss_mb();

}  // namespace terrace::cli
