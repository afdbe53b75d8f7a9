// Conformance engine: test discovery, running one test on a tier, classifying, and forked isolation.
#include "tools/conformance.h"

#include "interp/tensor_proto.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <tuple>

#include <onnx/defs/schema.h>

#include "interp/interpreter.h"
#include "interp/onnx_import.h"
#include "tiers/input_check.h"
#include "tiers/session.h"

namespace terrace::conformance {
namespace fs = std::filesystem;

const char* status_name(Status s) {
  switch (s) {
    case Status::Passed: return "passed";
    case Status::NotImplemented: return "not_implemented";
    case Status::InvalidModel: return "invalid_model";
    case Status::LoadError: return "load_error";
    case Status::RunError: return "run_error";
    case Status::ResultDiffers: return "result_differs";
  }
  return "?";
}

const char* status_title(Status s) {
  switch (s) {
    case Status::Passed: return "Passed";
    case Status::NotImplemented: return "Not implemented";
    case Status::InvalidModel: return "Invalid model";
    case Status::LoadError: return "Load error";
    case Status::RunError: return "Run error";
    case Status::ResultDiffers: return "Result differs";
  }
  return "?";
}

std::optional<Status> status_from_name(const std::string& name) {
  for (Status s : kAllStatuses)
    if (name == status_name(s)) return s;
  return std::nullopt;
}

// ---- discovery ----

std::string downloaded_suite_dir(const std::string& name) {
  if (name != kOnnx118Suite) return "";
  const char* home = std::getenv("HOME");
  return (fs::path(home ? home : "") / ".cache/terrace/onnx-tests/onnx-1.18.0/node").string();
}

std::string resolve_suite_dir(const std::string& arg) {
  if (fs::is_directory(arg)) return arg;
  if (std::string dl = downloaded_suite_dir(arg); !dl.empty()) {
    TERRACE_CHECK(fs::is_directory(dl), InvalidArgument, "suite '", arg, "' is not downloaded (",
                  dl, " is absent): bash tools/fetch_onnx_tests.sh fetches it");
    return dl;
  }
  fs::path shipped = fs::path(kDataRoot) / arg;
  TERRACE_CHECK(arg.find('/') == std::string::npos && fs::is_directory(shipped), InvalidArgument,
                "'", arg, "' is neither a folder nor a suite under ", kDataRoot);
  return shipped.string();
}

namespace {

bool is_test_dir(const fs::path& p) { return fs::is_regular_file(p / "model.onnx"); }

// The N of "<prefix>N<suffix>", or -1 when `name` has another form.
int64_t numbered(const std::string& name, const std::string& prefix, const std::string& suffix) {
  if (name.size() <= prefix.size() + suffix.size() || name.rfind(prefix, 0) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return -1;
  std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (!std::all_of(digits.begin(), digits.end(), ::isdigit) || digits.size() > 9) return -1;
  return std::stoll(digits);
}

// Entries of `dir` named <prefix>N<suffix>, in N order (not lexicographic: 10 comes after 9).
std::vector<fs::path> numbered_entries(const fs::path& dir, const std::string& prefix,
                                       const std::string& suffix) {
  std::vector<std::pair<int64_t, fs::path>> found;
  for (const auto& e : fs::directory_iterator(dir)) {
    int64_t n = numbered(e.path().filename().string(), prefix, suffix);
    if (n >= 0) found.emplace_back(n, e.path());
  }
  std::sort(found.begin(), found.end());
  std::vector<fs::path> paths;
  for (auto& [n, p] : found) paths.push_back(p);
  return paths;
}

}  // namespace

std::vector<TestCase> discover_tests(const std::vector<std::string>& dirs,
                                     const std::optional<std::regex>& filter) {
  std::vector<TestCase> tests;
  auto add = [&](const fs::path& p) {
    std::string name = p.filename().string();
    if (!filter || std::regex_search(name, *filter)) tests.push_back({name, p.string()});
  };
  for (const std::string& d : dirs) {
    fs::path root = fs::path(resolve_suite_dir(d)).lexically_normal();
    if (root.filename().empty()) root = root.parent_path();  // "node/" names the folder "node"
    if (is_test_dir(root)) {
      add(root);
      continue;
    }
    for (const auto& e : fs::directory_iterator(root))
      if (e.is_directory() && is_test_dir(e.path())) add(e.path());
  }
  std::sort(tests.begin(), tests.end(), [](const TestCase& a, const TestCase& b) {
    return std::tie(a.name, a.dir) < std::tie(b.name, b.dir);
  });
  // A folder named twice runs once; equal names from different suites become "suite/name".
  tests.erase(std::unique(tests.begin(), tests.end(),
                          [](const TestCase& a, const TestCase& b) {
                            return fs::weakly_canonical(a.dir) == fs::weakly_canonical(b.dir);
                          }),
              tests.end());
  std::vector<bool> clash(tests.size());
  for (size_t i = 1; i < tests.size(); ++i)
    if (tests[i - 1].name == tests[i].name) clash[i - 1] = clash[i] = true;
  for (size_t i = 0; i < tests.size(); ++i)
    if (clash[i]) tests[i].name = fs::path(tests[i].dir).parent_path().filename().string() + "/" + tests[i].name;
  return tests;
}

// ---- running one test ----

namespace {

// Where an error happened decides its category (see Status).
enum class Phase { LoadModel, LoadData, Run };

Status classify(Phase phase, std::optional<ErrorCode> code) {
  if (code == ErrorCode::NotImplemented) return Status::NotImplemented;
  if (phase == Phase::LoadModel && code == ErrorCode::InvalidModel) return Status::InvalidModel;
  return phase == Phase::Run ? Status::RunError : Status::LoadError;
}

// Runs f; on any exception records its category and message in `r` and returns false.
template <typename F>
bool guarded(Phase phase, const std::string& context, TestResult& r, F&& f) {
  try {
    f();
    return true;
  } catch (const Error& e) {
    r.status = classify(phase, e.code());
    r.message = context + e.what();
  } catch (const std::exception& e) {
    r.status = classify(phase, std::nullopt);
    r.message = context + e.what();
  } catch (...) {
    r.status = classify(phase, std::nullopt);
    r.message = context + "unknown exception";
  }
  return false;
}

ValueKind declared_kind(const Graph& g, int id) {
  ValueKind k = g.value(id).info.kind;
  return k == ValueKind::Unknown ? ValueKind::Tensor : k;
}

bool all_tensors(const Graph& g) {
  auto tensor = [&](int id) { return declared_kind(g, id) == ValueKind::Tensor; };
  return std::all_of(g.inputs.begin(), g.inputs.end(), tensor) &&
         std::all_of(g.outputs.begin(), g.outputs.end(), tensor);
}

// ONNX 1.12 wrote bfloat16 test data as uint16 tensors holding the bit patterns; a uint16
// tensor given for a value declared bfloat16 is therefore reinterpreted, bits unchanged.
Tensor as_bfloat16(const Tensor& t) {
  if (!t.defined() || t.dtype() != DType::UInt16) return t;
  Tensor b = Tensor::empty(DType::BFloat16, t.shape());
  std::memcpy(b.raw(), t.raw(), t.nbytes());
  return b;
}

// Reads <prefix>_N.pb of a data set as the kinds of the graph values `ids`, in order. A graph
// input without a file stays undefined (an omitted optional input).
std::vector<RValue> load_values(const Graph& g, const std::vector<int>& ids, const fs::path& set,
                                const std::string& prefix) {
  std::vector<fs::path> files = numbered_entries(set, prefix + "_", ".pb");
  TERRACE_CHECK(files.size() <= ids.size(), InvalidArgument, set.string(), " has ", files.size(), " ",
                prefix, " files but the graph has ", ids.size(), " ", prefix, "s");
  std::vector<RValue> values(ids.size());
  for (size_t i = 0; i < files.size(); ++i) {
    values[i] = load_value_pb(files[i].string(), declared_kind(g, ids[i]));
    if (g.value(ids[i]).info.dtype == DType::BFloat16) values[i].tensor = as_bfloat16(values[i].tensor);
  }
  return values;
}

// Runs a graph on one tier. The interpreter is called directly for --tier interp (after
// Session::run's input checks) and for graphs with sequence or optional inputs/outputs
// (Session::run carries tensors only). Otherwise a
// Session promotes after one call per tier and is called once more per tier, waiting for its
// background compiles between calls, so each tier up to `tier` produces results that are judged.
// Shadow validation is off: the harness must judge the tier's own results, not the fallback's.
class TierRunner {
 public:
  TierRunner(std::shared_ptr<const Graph> graph, Tier tier)
      : graph_(std::move(graph)), tensors_only_(all_tensors(*graph_)) {
    if (tier == Tier::Interp || !tensors_only_) return;
    Options o = Options::from_env();
    o.max_tier = tier;
    o.validate = ValidateMode::Off;
    o.hot_threshold = 1;
    o.climb_threshold = 1;
    calls_ = int(tier) + 2;  // interp, then one call per compiled tier, then one more at the top
    session_ = Session::from_graph(graph_, o);
  }
  int calls() const { return calls_; }

  std::vector<RValue> run(const std::vector<RValue>& inputs) {
    if (!tensors_only_) return interpret(*graph_, inputs);
    NamedTensors named;
    for (size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i].defined()) named.emplace_back(graph_->value(graph_->inputs[i]).name, inputs[i].tensor);
    // The interpreter gets its inputs through Session::run's own checks, so that every tier
    // accepts and rejects the same test data.
    if (!session_) return interpret(*graph_, bind_inputs(*graph_, named));
    std::vector<RValue> out;
    for (auto& [name, t] : session_->run(named)) out.emplace_back(t);
    session_->wait_for_compiles();
    return out;
  }

  // The tiers the last call ran on ("interp" alone for the interpreter path).
  std::vector<std::string> last_tiers() const {
    if (!session_) return {"interp"};
    return session_->last_call().tiers;
  }

 private:
  std::shared_ptr<const Graph> graph_;
  bool tensors_only_;  // no sequence or optional inputs or outputs: Session::run can carry it
  std::unique_ptr<Session> session_;
  int calls_ = 1;
};

std::string join(const std::vector<std::string>& parts, const char* sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? sep : "") + parts[i];
  return out;
}

// How a test's outputs are judged: the run's tolerance, or, for a repro folder Terrace dumped
// (tiers/repro.h), the tolerance each output was judged by (tolerance.txt: "N rtol atol" lines)
// and the per-element rounding allowance it was given (test_data_set_K/allowance_N.pb).
struct Judge {
  std::vector<std::optional<Tolerance>> per_output;  // from tolerance.txt, where present
  std::vector<Tensor> allowance;                     // from allowance_N.pb, where present
};

Judge read_judge(const fs::path& test_dir, const fs::path& set, size_t outputs) {
  Judge j;
  j.per_output.resize(outputs);
  j.allowance.resize(outputs);
  if (fs::is_regular_file(test_dir / "tolerance.txt")) {
    std::istringstream in(read_file_bytes((test_dir / "tolerance.txt").string(), uint64_t(1) << 20));
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      std::istringstream fields(line);
      size_t i;
      Tolerance t;
      if (fields >> i >> t.rtol >> t.atol && i < outputs) j.per_output[i] = t;
    }
  }
  for (size_t i = 0; i < outputs; ++i)
    if (fs::path a = set / ("allowance_" + std::to_string(i) + ".pb"); fs::is_regular_file(a))
      j.allowance[i] = load_tensor_pb(a.string());
  return j;
}

// The first output of `got` that differs from `want`, or nullopt.
std::optional<std::string> first_mismatch(const Graph& g, const std::vector<RValue>& want,
                                          const std::vector<RValue>& got, const Tolerance& tol, const Judge& judge) {
  if (got.size() != want.size())
    return detail::concat("expected ", want.size(), " outputs, got ", got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const Tolerance t = judge.per_output[i].value_or(tol);
    std::optional<std::string> m;
    if (judge.allowance[i].defined() && want[i].kind == ValueKind::Tensor && got[i].kind == ValueKind::Tensor) {
      Comparison c = compare_tensors(want[i].tensor, got[i].tensor, t, judge.allowance[i]);
      if (!c.equal) m = c.message;
    } else {
      m = compare_values(want[i], got[i], t);
    }
    if (m) return detail::concat("output ", i, " '", g.value(g.outputs[i]).name, "' ", *m);
  }
  return std::nullopt;
}

}  // namespace

std::vector<DataSet> load_data_sets(const Graph& g, const std::string& dir) {
  TERRACE_CHECK(fs::is_directory(dir), InvalidArgument, "'", dir, "' is not a folder of test_data_set_N folders");
  std::vector<DataSet> sets;
  for (const fs::path& set : numbered_entries(dir, "test_data_set_", "")) {
    if (!fs::is_directory(set)) continue;
    sets.push_back({set.filename().string(), load_values(g, g.inputs, set, "input"), {}});
    if (!numbered_entries(set, "output_", ".pb").empty()) sets.back().outputs = load_values(g, g.outputs, set, "output");
  }
  TERRACE_CHECK(!sets.empty(), InvalidArgument, "'", dir, "' holds no test_data_set_N folder");
  return sets;
}

TestResult run_test(const TestCase& test, Tier tier, const Tolerance& tol) {
  auto t0 = std::chrono::steady_clock::now();
  TestResult r;
  r.name = test.name;
  auto done = [&] {
    r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return r;
  };
  Model model;
  if (!guarded(Phase::LoadModel, "", r, [&] { model = load_onnx_file(test.dir + "/model.onnx"); }))
    return done();
  const Graph& g = *model.graph;
  std::unique_ptr<TierRunner> runner;
  if (!guarded(Phase::LoadModel, "session: ", r,
               [&] { runner = std::make_unique<TierRunner>(model.graph, tier); }))
    return done();
  std::vector<fs::path> sets = numbered_entries(test.dir, "test_data_set_", "");
  if (sets.empty()) {
    r.status = Status::LoadError;
    r.message = "no test_data_set_N folder";
    return done();
  }
  for (const fs::path& set : sets) {
    std::string where = sets.size() > 1 ? set.filename().string() + ": " : "";
    std::vector<RValue> inputs, want;
    Judge judge;
    if (!guarded(Phase::LoadData, where, r, [&] {
          inputs = load_values(g, g.inputs, set, "input");
          want = load_values(g, g.outputs, set, "output");
          judge = read_judge(test.dir, set, g.outputs.size());
        }))
      return done();
    for (int call = 0; call < runner->calls(); ++call) {
      std::string at = where + (runner->calls() > 1 ? detail::concat("call ", call + 1, ": ") : "");
      std::vector<RValue> got;
      if (!guarded(Phase::Run, at, r, [&] { got = runner->run(inputs); })) return done();
      r.tiers = runner->last_tiers();
      if (auto m = first_mismatch(g, want, got, tol, judge)) {
        r.status = Status::ResultDiffers;
        r.message = at + "ran on " + join(r.tiers, "+") + ": " + *m;
        return done();
      }
    }
  }
  return done();
}

// ---- in-process runs ----

namespace {

// The test running now, for the crash handler (a fixed buffer: handlers may not allocate).
char g_current_test[256];

void say_which_test_crashed(int sig) {
  auto put = [](const char* s) { [[maybe_unused]] ssize_t n = ::write(2, s, std::strlen(s)); };
  put("\nterrace conformance: crashed (");
  put(strsignal(sig));
  put(") while running ");
  put(g_current_test);
  put("; --isolate runs each test in its own process\n");
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

}  // namespace

std::vector<TestResult> run_tests_in_process(const std::vector<TestCase>& tests, Tier tier,
                                             const Tolerance& tol, const ProgressFn& progress) {
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(sig, say_which_test_crashed);
  std::vector<TestResult> results;
  for (const TestCase& t : tests) {
    std::snprintf(g_current_test, sizeof g_current_test, "%s", t.name.c_str());
    results.push_back(run_test(t, tier, tol));
    if (progress) progress(results.size(), results.back());
  }
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(sig, SIG_DFL);
  return results;
}

// ---- isolation ----

namespace {

// A message travels through a pipe that the parent drains only after the child exits, so it
// must fit the pipe's buffer (64 KiB on Linux).
constexpr size_t kMaxMessage = 16 * 1024;

struct Child {
  pid_t pid;
  int fd;  // read end of the child's result pipe
  size_t index;
};

void write_all(int fd, const std::string& s) {
  for (size_t off = 0; off < s.size();) {
    ssize_t n = ::write(fd, s.data() + off, s.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += size_t(n);
  }
}

std::string read_all(int fd) {
  std::string s;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return s;
    s.append(buf, size_t(n));
  }
}

// The child: runs the test with an alarm as its deadline and sends "status\nms\ntiers\nmessage".
[[noreturn]] void child_main(const TestCase& test, Tier tier, int timeout_s, const Tolerance& tol, int fd) {
  if (timeout_s > 0) alarm(unsigned(timeout_s));
  TestResult r = run_test(test, tier, tol);
  if (r.message.size() > kMaxMessage) r.message.resize(kMaxMessage);
  std::ostringstream os;
  os << status_name(r.status) << '\n' << r.ms << '\n' << join(r.tiers, ",") << '\n' << r.message;
  write_all(fd, os.str());
  _exit(0);  // no static destructors or atexit handlers: they belong to the parent
}

Child spawn(const TestCase& test, size_t index, Tier tier, int timeout_s, const Tolerance& tol) {
  int fds[2];
  TERRACE_CHECK(::pipe(fds) == 0, IoError, "pipe: ", std::strerror(errno));
  std::fflush(nullptr);  // or the child would inherit and flush the parent's buffered output
  pid_t pid = ::fork();
  TERRACE_CHECK(pid >= 0, IoError, "fork: ", std::strerror(errno));
  if (pid == 0) {
    ::close(fds[0]);
    child_main(test, tier, timeout_s, tol, fds[1]);
  }
  ::close(fds[1]);
  return {pid, fds[0], index};
}

TestResult collect(const Child& c, int wstatus, const TestCase& test, int timeout_s) {
  std::string data = read_all(c.fd);
  ::close(c.fd);
  TestResult r;
  r.name = test.name;
  r.status = Status::RunError;
  if (WIFSIGNALED(wstatus)) {
    int sig = WTERMSIG(wstatus);
    r.message = sig == SIGALRM ? detail::concat("timed out after ", timeout_s, " s")
                               : detail::concat("crashed: signal ", sig, " (", strsignal(sig), ")");
    return r;
  }
  std::istringstream is(data);
  std::string status, ms, tiers, tier;
  std::getline(is, status);
  std::getline(is, ms);
  std::getline(is, tiers);
  std::optional<Status> s = status_from_name(status);
  if (!s || ms.empty()) {
    r.message = detail::concat("test process exited with code ", WEXITSTATUS(wstatus), " and no result");
    return r;
  }
  r.status = *s;
  r.ms = std::stod(ms);
  r.message = data.substr(std::min(data.size(), status.size() + ms.size() + tiers.size() + 3));
  for (std::istringstream ts(tiers); std::getline(ts, tier, ',');) r.tiers.push_back(tier);
  return r;
}

}  // namespace

std::vector<TestResult> run_tests_isolated(const std::vector<TestCase>& tests, Tier tier, int jobs,
                                           int timeout_s, const Tolerance& tol, const ProgressFn& progress) {
  // Build ONNX's operator schema registry (about 100 ms) once here rather than in every child.
  // It is plain data, so the parent still runs no kernel and starts no OpenMP thread.
  onnx::OpSchemaRegistry::get_all_schemas_with_history();
  std::vector<TestResult> results(tests.size());
  std::vector<Child> running;
  size_t next = 0, done = 0;
  while (next < tests.size() || !running.empty()) {
    while (running.size() < size_t(std::max(jobs, 1)) && next < tests.size()) {
      running.push_back(spawn(tests[next], next, tier, timeout_s, tol));
      ++next;
    }
    int wstatus = 0;
    pid_t pid = ::waitpid(-1, &wstatus, 0);
    if (pid < 0) {
      TERRACE_CHECK(errno == EINTR, Internal, "waitpid: ", std::strerror(errno));
      continue;
    }
    auto it = std::find_if(running.begin(), running.end(), [&](const Child& c) { return c.pid == pid; });
    if (it == running.end()) continue;  // not one of ours
    results[it->index] = collect(*it, wstatus, tests[it->index], timeout_s);
    if (progress) progress(++done, results[it->index]);
    running.erase(it);
  }
  return results;
}

}  // namespace terrace::conformance
