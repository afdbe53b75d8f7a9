// Helpers shared by the terrace subcommands.
#include "tools/cli_util.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>

#include <CLI/CLI.hpp>

#include "tiers/ladder.h"
#include "tools/json_out.h"

namespace terrace::cli {

// ---- option definitions ----

bool ParsedArgs::has(const std::string& name) const {
  for (auto& [n, v] : options)
    if (n == name) return true;
  return false;
}

std::optional<std::string> ParsedArgs::get(const std::string& name) const {
  for (auto& [n, v] : options)
    if (n == name) return v;
  return std::nullopt;
}

std::vector<std::string> ParsedArgs::all(const std::string& name) const {
  std::vector<std::string> out;
  for (auto& [n, v] : options)
    if (n == name) out.push_back(v);
  return out;
}

namespace {

std::string see_help(const CommandDef& def) {
  return synopsis(def) + "\n(terrace " + def.name + " --help lists the options)";
}

std::string option_usage(const OptionDef& o) {
  std::string s = std::string("[") + o.name + (o.value ? std::string(" ") + o.value : "") + "]";
  return o.repeatable ? s + "..." : s;
}

}  // namespace

// CLI11 (Debian: libcli11-dev) splits the command line: `--opt value`, `--opt=value`, `-jN`,
// `-j N`, flags, `--` and operands. Every option is taken as often as given (TakeAll) and checked
// here, so that the messages name the option in this tool's words.
ParsedArgs parse_args(const CommandDef& def, const Args& args) {
  ParsedArgs p;
  p.def = &def;
  CLI::App app;
  app.set_help_flag();  // --help is ours: help_text
  app.allow_extras();   // unknown options come back in remaining(), said below
  app.positionals_at_end(false);
  std::vector<std::string> operands;
  app.add_option("operands", operands)->expected(0, -1);
  std::vector<std::pair<const OptionDef*, CLI::Option*>> opts;
  CLI::Option* help = app.add_flag("-h,--help")->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  for (const OptionDef& o : def.options) {
    std::string names = std::string(o.alias ? std::string(o.alias) + "," : "") + o.name;
    CLI::Option* opt = o.value ? app.add_option(names)->expected(1) : app.add_flag(names)->disable_flag_override();
    opt->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    if (o.value) opt->allow_extra_args(false);
    opts.emplace_back(&o, opt);
  }
  // CLI11 wants argv order reversed (it pops from the back).
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    // A value missing after the last option, or a value given to a flag (--flag=x): name them.
    const std::string what = e.what();
    for (auto& [o, opt] : opts) {
      const std::string bare = std::string(o->name).substr(2);
      if (what.rfind(std::string(o->name) + ":", 0) != 0 && what.rfind(bare + " ", 0) != 0 &&
          (!o->alias || what.rfind(std::string(o->alias) + ":", 0) != 0))
        continue;
      if (o->value) throw UsageError{std::string(o->name) + " needs a value (" + o->name + " " + o->value + ")"};
      std::string given = o->name;
      for (const std::string& a : args)
        if (a.rfind(std::string(o->name) + "=", 0) == 0) given = a;
      throw UsageError{std::string(o->name) + " takes no value, got '" + given + "'"};
    }
    throw UsageError{what + "\n" + see_help(def)};
  }
  bool only_operands = false;  // after `--`
  for (const std::string& extra : app.remaining()) {
    if (extra == "--" && !only_operands) {
      only_operands = true;
      continue;
    }
    if (!only_operands && extra.size() >= 2 && extra[0] == '-') {
      const std::string name = extra.rfind("--", 0) == 0 ? extra.substr(0, extra.find('=')) : extra;
      throw UsageError{"unknown option '" + name + "'\n" + see_help(def)};
    }
    operands.push_back(extra);
  }
  p.help = help->count() > 0;
  // Options in the order given, each with its value ("" for a flag).
  std::map<const CLI::Option*, size_t> taken;
  for (const CLI::Option* opt : app.parse_order()) {
    auto it = std::find_if(opts.begin(), opts.end(), [&](auto& po) { return po.second == opt; });
    if (it == opts.end()) continue;  // operands, --help
    const OptionDef& o = *it->first;
    size_t k = taken[opt]++;
    if (!o.repeatable && k == 1) throw UsageError{std::string(o.name) + " given twice"};
    p.options.emplace_back(o.name, o.value && k < opt->results().size() ? opt->results()[k] : "");
  }
  p.operands = std::move(operands);
  if (p.help) return p;
  if (p.operands.size() < def.min_operands)
    throw UsageError{std::string("no ") + def.operand_name + " given\n" + see_help(def)};
  if (p.operands.size() > def.max_operands)
    throw UsageError{std::string(def.max_operands == 1 ? "more than one " : "too many ") + def.operand_name +
                     (def.max_operands == 1 ? "" : "s") + " given: '" + p.operands[def.max_operands] + "'\n" +
                     see_help(def)};
  return p;
}

std::string synopsis(const CommandDef& def, size_t width) {
  std::string head = std::string("terrace ") + def.name + (*def.operands ? " " : "") + def.operands;
  std::string indent(std::string("terrace ").size() + std::strlen(def.name) + 1, ' ');
  std::string out = head, line = head;
  for (const OptionDef& o : def.options) {
    std::string part = option_usage(o);
    if (line.size() + 1 + part.size() > width) {
      out += "\n" + indent + part;
      line = indent + part;
    } else {
      out += " " + part;
      line += " " + part;
    }
  }
  return out;
}

std::string wrap(const std::string& text, size_t width, const std::string& indent) {
  std::string out, line = indent;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(' ', start);
    if (end == std::string::npos) end = text.size();
    std::string word = text.substr(start, end - start);
    if (line.size() > indent.size() && line.size() + 1 + word.size() > width) {
      out += line + "\n";
      line = indent;
    }
    line += (line.size() > indent.size() ? " " : "") + word;
    start = end + 1;
  }
  return out + line + "\n";
}

std::string help_text(const CommandDef& def) {
  std::string s = "usage: " + synopsis(def) + "\n\n" + wrap(def.summary, 100, "") + "\noptions:\n";
  std::vector<std::pair<std::string, std::string>> rows;
  for (const OptionDef& o : def.options) {
    std::string left = std::string(o.alias ? std::string(o.alias) + ", " : "") + o.name +
                       (o.value ? std::string(" ") + o.value : "");
    rows.emplace_back(left, std::string(o.help) + (o.repeatable ? " (repeatable)" : ""));
  }
  rows.emplace_back("-h, --help", "this help");
  size_t w = 0;
  for (auto& [l, r] : rows) w = std::max(w, l.size());
  for (auto& [l, r] : rows) s += "  " + l + std::string(w + 2 - l.size(), ' ') + r + "\n";
  s += "\nOptions take their value as `--opt value` or `--opt=value`. Exit codes: 0 success, 1 failure,\n"
       "2 usage error.\n";
  if (def.details) s += std::string("\n") + def.details;
  return s;
}

// ---- values ----

int64_t parse_count(const std::string& option, const std::string& text) {
  size_t used = 0;
  long long v = -1;
  try { v = std::stoll(text, &used); } catch (...) {}
  if (v < 0 || used != text.size() || text.empty() || text[0] == '+' || std::isspace((unsigned char)text[0]))
    throw UsageError{option + " expects a non-negative integer, got '" + text + "'"};
  return v;
}

int64_t parse_positive(const std::string& option, const std::string& text) {
  int64_t v = parse_count(option, text);
  if (v < 1) throw UsageError{option + " must be at least 1, got '" + text + "'"};
  return v;
}

std::pair<std::string, std::string> split_assignment(const std::string& option, const std::string& text) {
  size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0)
    throw UsageError{option + " expects NAME=VALUE, got '" + text + "'"};
  if (eq + 1 == text.size())
    throw UsageError{option + " " + text + ": no value after '=' (" + option + " NAME=VALUE)"};
  return {text.substr(0, eq), text.substr(eq + 1)};
}

std::vector<std::pair<std::string, std::string>> assignments(const ParsedArgs& p, const std::string& option) {
  std::vector<std::pair<std::string, std::string>> out;
  std::set<std::string> names;
  for (const std::string& text : p.all(option)) {
    auto kv = split_assignment(option, text);
    if (!names.insert(kv.first).second)
      throw UsageError{option + " given twice for '" + kv.first + "'"};
    out.push_back(std::move(kv));
  }
  return out;
}

Mode parse_mode(const std::string& text) {
  if (text == "default") return Mode::Default;
  if (text == "reduce-overhead") return Mode::ReduceOverhead;
  if (text == "max-autotune") return Mode::MaxAutotune;
  throw UsageError{"--mode expects default, reduce-overhead or max-autotune, got '" + text + "'"};
}

const OptionDef kProfileOption{"--profile", "FILE.json",
                               "write a Chrome trace (Perfetto, chrome://tracing) of the session: calls, regions, "
                               "compiles, validations, deopts"};
const OptionDef kStrictOption{"--strict", nullptr,
                              "fail at load, listing every graph break, instead of running those nodes in the "
                              "interpreter (torch's fullgraph)"};
const OptionDef kModeOption{"--mode", "default|reduce-overhead|max-autotune",
                            "the session's preset (README: reduce-overhead compiles after the first call)"};

const OptionDef kThreadsOption{"--threads", "N",
                               "threads for a call: the interpreter's and tier 1's (default: OMP_NUM_THREADS, else every "
                               "core; more than the machine has are cut down)"};

void apply_session_options(const ParsedArgs& p, Options& options) {
  if (auto t = p.get("--threads"))  // past the machine's count, Options::resolved cuts it down and says so
    options.interp_threads = int(std::min<int64_t>(parse_positive("--threads", *t), INT_MAX));
  if (auto f = p.get("--profile")) {
    if (f->empty()) throw UsageError{"--profile needs a file name"};
    options.profile_file = *f;
  }
  if (p.has("--strict")) options.strict = true;
  if (auto m = p.get("--mode")) options.mode = parse_mode(*m);
}

Tier parse_tier(const std::string& text) {
  if (text == "interp") return Tier::Interp;
  if (text == "cpu") return Tier::Cpu;
  if (text == "gpu") return Tier::Gpu;
  throw UsageError{"--tier expects interp, cpu or gpu, got '" + text + "'"};
}

// ---- tiers ----

namespace {
struct Availability {
  Tier highest = Tier::Interp;
  std::string why;  // why the tier above `highest` is absent
};
Availability probe_here() {
  Availability r;
  for (const TierEntry& entry : builtin_tiers()) {
    if (!entry.make(Options(), &r.why)) return r;
    r.highest = entry.tier;
    r.why.clear();
  }
  return r;
}
std::optional<Availability>& probed_in_a_child() {
  static std::optional<Availability> a;
  return a;
}
const Availability& availability() {
  static const Availability a = probed_in_a_child() ? *probed_in_a_child() : probe_here();
  return a;
}
}  // namespace

void probe_tiers_in_a_child() {
  if (probed_in_a_child()) return;
  Availability r{Tier::Cpu, "the process that probed for a GPU failed"};
  int fds[2];
  if (::pipe(fds) != 0) {
    r.why = std::string("pipe: ") + std::strerror(errno);
    probed_in_a_child() = r;
    return;
  }
  std::fflush(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    Availability a = probe_here();
    std::string msg = std::to_string(int(a.highest)) + "\n" + a.why;
    for (size_t at = 0; at < msg.size();) {
      ssize_t n = ::write(fds[1], msg.data() + at, msg.size() - at);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      at += size_t(n);
    }
    _exit(0);  // no static destructors: they belong to the parent
  }
  ::close(fds[1]);
  if (pid < 0) {
    r.why = std::string("fork: ") + std::strerror(errno);
  } else {
    std::string msg;
    char buf[1024];
    for (;;) {
      ssize_t n = ::read(fds[0], buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      msg.append(buf, size_t(n));
    }
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (size_t nl = msg.find('\n'); nl != std::string::npos && nl > 0 && msg[0] >= '0' && msg[0] <= '2') {
      r.highest = Tier(msg[0] - '0');
      r.why = msg.substr(nl + 1);
    }
  }
  ::close(fds[0]);
  probed_in_a_child() = r;
}

Tier highest_available_tier() { return availability().highest; }

bool tier_available(Tier t) {
  if (t == Tier::Interp) return true;
  if (t == Tier::Cpu) {
    if (probed_in_a_child()) return probed_in_a_child()->highest >= Tier::Cpu;
    // Loads nothing: Clang comes with the first compile.
    static const bool cpu = builtin_tiers().front().make(Options(), nullptr) != nullptr;
    return cpu;
  }
  return availability().highest >= t;
}

std::string tier_unavailable_reason(Tier t) {
  const Availability& a = availability();
  if (t <= a.highest) return "";
  return int(t) == int(a.highest) + 1 ? a.why : std::string(tier_name(Tier(int(t) - 1))) + " tier is unavailable";
}

bool tier_from_env() { return std::getenv("TERRACE_MAX_TIER") != nullptr; }

Tier effective_tier(const char* command, Tier requested, bool explicitly_requested) {
  // The GPU is probed only for a command that may use it: the probe opens a CUDA context and loads
  // NVRTC, about 115 MB resident on the GPU host, which `--tier cpu` kept to the end.
  if (tier_available(requested)) return requested;
  Tier available = highest_available_tier();
  if (requested <= available) return requested;
  if (explicitly_requested) {
    std::fprintf(stderr, "terrace %s: tier %s is not available (%s); running on tier %s instead\n", command,
                 tier_name(requested), tier_unavailable_reason(requested).c_str(), tier_name(available));
  }
  return available;
}

// ---- inputs ----

const OptionDef kShapesOption{"--shapes", "NAME:DxD[,NAME:DxD]",
                               "whole shapes of random inputs, for dims that have no names (trtexec's --shapes)", true};

InputShapes parse_shapes(const ParsedArgs& p, const Graph& g) { return parse_shapes(p.all("--shapes"), g); }

InputShapes parse_shapes(const std::vector<std::string>& lists, const Graph& g) {
  InputShapes shapes;
  for (const std::string& list : lists) {
    std::stringstream entries(list);
    for (std::string entry; std::getline(entries, entry, ',');) {
      const size_t colon = entry.rfind(':');
      if (colon == std::string::npos || colon == 0 || colon + 1 == entry.size())
        throw UsageError{"--shapes " + entry + ": expected NAME:DxD (e.g. x:1x3x224x224)"};
      const std::string name = entry.substr(0, colon);
      check_input_name(g, name, "--shapes");
      for (const auto& [n, s] : shapes)
        if (n == name) throw UsageError{"--shapes gives input '" + name + "' twice"};
      Shape shape;
      std::stringstream dims(entry.substr(colon + 1));
      for (std::string d; std::getline(dims, d, 'x');) shape.push_back(parse_count("--shapes " + name, d));
      for (int id : g.inputs) {
        const ValueInfo& info = g.values[size_t(id)].info;
        if (g.values[size_t(id)].name != name || !info.shape) continue;
        bool fits = info.shape->size() == shape.size();
        for (size_t d = 0; fits && d < shape.size(); ++d) fits = (*info.shape)[d] < 0 || (*info.shape)[d] == shape[d];
        if (fits) continue;
        std::string declared;  // symbolic dims by name, unnamed ones as '?'
        for (size_t d = 0; d < info.shape->size(); ++d) {
          const int64_t n = (*info.shape)[d];
          const std::string sym = d < info.dim_names.size() && !info.dim_names[d].empty() ? info.dim_names[d] : "?";
          declared += (d ? "," : "") + (n >= 0 ? std::to_string(n) : sym);
        }
        throw UsageError{"--shapes " + entry + ": input '" + name + "' is [" + declared + "] in the model"};
      }
      shapes.emplace_back(name, std::move(shape));
    }
  }
  return shapes;
}

NamedTensors random_inputs(const Graph& g, uint64_t seed, const std::vector<std::pair<std::string, int64_t>>& dims,
                           const InputShapes& shapes) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> real(-1.0, 1.0);
  std::uniform_int_distribution<int> small(0, 9);
  NamedTensors out;
  for (int id : g.inputs) {
    const Value& v = g.values[size_t(id)];
    TERRACE_CHECK(v.info.dtype && v.info.shape, InvalidArgument, "input '", v.name,
                  "' has no declared dtype and shape; give it with --input");
    Shape shape = *v.info.shape;
    for (const auto& [name, given] : shapes)
      if (name == v.name) shape = given;
    for (size_t d = 0; d < shape.size(); ++d) {
      if (shape[d] >= 0) continue;
      shape[d] = 1;
      const std::string& sym = d < v.info.dim_names.size() ? v.info.dim_names[d] : std::string();
      for (auto& [n, val] : dims)
        if (n == sym) shape[d] = val;
    }
    Tensor t;
    try {
      t = Tensor::empty(*v.info.dtype, shape);
    } catch (const Error& e) {  // say which input it was: the shape came from the model and --dim
      fail(e.code(), "random input '", v.name, "': ", e.message());
    }
    if (is_narrow(t.dtype())) {  // float8, int4, float4: random values in [-1, 1] cast to the type
      Tensor wide = Tensor::empty(DType::Float32, shape);
      for (int64_t i = 0; i < wide.numel(); ++i) wide.data<float>()[i] = float(real(rng)) * 4;
      out.emplace_back(v.name, wide.cast(t.dtype()));
      continue;
    }
    dispatch_dtype(t.dtype(), [&](auto tag) {
      using T = decltype(tag);
      T* p = t.data<T>();
      for (int64_t i = 0; i < t.numel(); ++i) {
        if constexpr (std::is_same_v<T, bool>) p[i] = small(rng) & 1;
        else if constexpr (std::is_integral_v<T>) p[i] = T(small(rng));
        else p[i] = T(float(real(rng)));
      }
    });
    out.emplace_back(v.name, std::move(t));
  }
  return out;
}

void check_dim_names(const Graph& g, const std::vector<std::pair<std::string, int64_t>>& dims,
                     const std::string& option) {
  std::set<std::string> symbolic;
  for (int id : g.inputs) {
    const Value& v = g.values[size_t(id)];
    if (!v.info.shape) continue;
    for (size_t d = 0; d < v.info.shape->size(); ++d)
      if ((*v.info.shape)[d] < 0 && d < v.info.dim_names.size() && !v.info.dim_names[d].empty())
        symbolic.insert(v.info.dim_names[d]);
  }
  for (auto& [name, value] : dims) {
    if (symbolic.count(name)) continue;
    std::string known;
    for (const std::string& s : symbolic) known += (known.empty() ? "" : ", ") + s;
    throw UsageError{option + " " + name + "=" + std::to_string(value) + ": no graph input has a symbolic dim named '" +
                     name + "' (" + (known.empty() ? "the model has none" : "the model's: " + known) + ")"};
  }
}

void check_input_name(const Graph& g, const std::string& name, const std::string& option) {
  std::string known;
  for (int id : g.inputs) {
    if (g.values[size_t(id)].name == name) return;
    known += (known.empty() ? "" : ", ") + g.values[size_t(id)].name;
  }
  throw UsageError{option + " names '" + name + "', which is not a graph input (inputs: " + known + ")"};
}

// ---- output ----

void write_text_file(const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  TERRACE_CHECK(f, IoError, "cannot write '", path, "': ", std::strerror(errno));
  size_t written = std::fwrite(text.data(), 1, text.size(), f);
  int err = written == text.size() ? 0 : errno;
  if (std::fflush(f) != 0 && !err) err = errno;
  if (std::fclose(f) != 0 && !err) err = errno;
  if (written != text.size() && !err) err = EIO;
  TERRACE_CHECK(!err, IoError, "cannot write '", path, "': ", std::strerror(err));
}

void print_status_line(const std::string& command, bool passed) {
  std::printf("&&&& %s %s\n", passed ? "PASSED" : "FAILED", command.c_str());
}

std::string json_text(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

void write_json_file(const std::string& path, const Json& j) { write_text_file(path, json_text(j) + "\n"); }

Progress::Progress(std::string label, int64_t total)
    : label_(std::move(label)), total_(total), start_(std::chrono::steady_clock::now()), tty_(isatty(STDERR_FILENO)) {}

void Progress::update(int64_t done, const std::string& what) {
  if (!tty_) return;
  const double now = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
  if (now < 1000 || now - shown_ms_ < 250) return;
  shown_ms_ = now;
  char head[160];
  if (total_ > 0)
    std::snprintf(head, sizeof head, "%s: %lld/%lld, %.1f s elapsed", label_.c_str(), (long long)done,
                  (long long)total_, now / 1000);
  else  // work bounded by time, not count (bench --duration)
    std::snprintf(head, sizeof head, "%s: %lld, %.1f s elapsed", label_.c_str(), (long long)done, now / 1000);
  std::string line = std::string(head) + (what.empty() ? "" : ", " + what);
  if (line.size() > 110) line = line.substr(0, 107) + "...";
  const size_t pad = width_ > line.size() ? width_ - line.size() : 0;
  width_ = std::max(width_, line.size());
  std::fprintf(stderr, "\r%s%*s", line.c_str(), int(pad), "");
  std::fflush(stderr);
}

Progress::~Progress() {
  if (shown_ms_ > 0) std::fprintf(stderr, "\r%*s\r", int(width_), "");
}

// This process's peak resident memory in MB since it started (/proc/self/status VmHWM), or -1
// where that is not available. Not getrusage's ru_maxrss: across fork and exec it keeps the
// parent's peak, so a process started by a large one (compare.py holding a PyTorch model) reports
// at least the parent's size.
double peak_rss_mb() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  double mb = -1;
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, "VmHWM:", 6) == 0) mb = std::strtod(line + 6, nullptr) / 1024;  // kB
  std::fclose(f);
  return mb;
}

}  // namespace terrace::cli
