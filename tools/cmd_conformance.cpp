// terrace conformance: runs ONNX backend tests, checks them against the expected-failures file, reports.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "interp/tensor_proto.h"
#include "tools/cli_util.h"
#include "tools/data_files.h"
#include "tools/commands.h"
#include "tools/conformance.h"
#include "tools/json_out.h"

namespace terrace::cli {
namespace {
namespace fs = std::filesystem;
using conformance::Status;
using conformance::TestResult;

// The kinds of failure that are not "not implemented", in report order.
constexpr Status kFailureKinds[] = {Status::InvalidModel, Status::LoadError, Status::RunError,
                                    Status::ResultDiffers};

struct Config {
  std::vector<std::string> dirs;
  Tier tier = Tier::Interp;
  std::optional<std::regex> filter;
  std::string json_path, expected_path, write_expected_path;
  std::optional<int64_t> min_pass;
  bool isolate = false, verbose = false;
  int jobs = 1, timeout_s = 60;
  Tolerance tol = conformance::kOnnxTolerance;
};

// The expected-failures file for `tier` (tools/data_files.h: installed under share/terrace/
// conformance, or the source tree's tests/): conformance_expected_<tier>.txt where a compiled tier
// has its own list, else conformance_expected.txt (the interpreter's); empty if neither is there.
std::string default_expected_file(Tier tier, const std::vector<std::string>& dirs) {
  auto list = [](const std::string& name) {
    return cli::data_file("conformance/" + name, "tests/" + name).string();
  };
  // ONNX 1.18's suite has its own list (for every tier), named by the suite or its folder.
  for (const std::string& d : dirs)
    if (d == conformance::kOnnx118Suite || d.find("onnx-1.18.0") != std::string::npos)
      return list("conformance_expected_onnx118.txt");
  if (tier != Tier::Interp)
    if (std::string own = list(std::string("conformance_expected_") + tier_name(tier) + ".txt"); !own.empty())
      return own;
  return list("conformance_expected.txt");
}

// Parses --rtol/--atol's value.
double parse_real(const std::string& option, const std::string& text) {
  size_t used = 0;
  double v = -1;
  try { v = std::stod(text, &used); } catch (...) {}
  if (!(v >= 0) || used != text.size())
    throw UsageError{option + " expects a non-negative number, got '" + text + "'"};
  return v;
}

int parse_jobs(const std::string& text) { return int(std::clamp<int64_t>(parse_count("-j", text), 1, 1024)); }

Config parse_config(const ParsedArgs& args) {
  Config c;
  std::optional<std::string> expected_path;
  for (auto& [a, v] : args.options) {
    if (a == "--tier") c.tier = parse_tier(v);
    else if (a == "--filter") {
      try {
        c.filter.emplace(v);
      } catch (const std::regex_error& e) {
        throw UsageError{"--filter: bad regular expression: " + std::string(e.what())};
      }
    } else if (a == "--json") c.json_path = v;
    else if (a == "--expected") expected_path = v;
    else if (a == "--write-expected") c.write_expected_path = v;
    else if (a == "--min-pass") c.min_pass = parse_count(a, v);
    else if (a == "--isolate") c.isolate = true;
    else if (a == "--jobs") c.jobs = parse_jobs(v);
    else if (a == "--timeout") c.timeout_s = int(parse_count(a, v));
    else if (a == "--rtol") c.tol.rtol = parse_real(a, v);
    else if (a == "--atol") c.tol.atol = parse_real(a, v);
    else if (a == "--verbose") c.verbose = true;
  }
  c.dirs = args.operands;
  if (c.jobs > 1) c.isolate = true;  // parallel runs happen in forked children only
  if (c.isolate) probe_tiers_in_a_child();  // the children use CUDA: this process must not
  c.tier = effective_tier("conformance", c.tier, args.has("--tier"));
  if (c.dirs.empty()) c.dirs.push_back("node");
  c.expected_path = expected_path ? *expected_path : default_expected_file(c.tier, c.dirs);
  return c;
}

// ---- the expected-failures file: "test_name  reason" per line, '#' starts a comment ----

using Expectations = std::map<std::string, std::string>;  // test name -> reason

Expectations read_expectations(const std::string& path) {
  Expectations e;
  if (path.empty()) return e;
  std::string text;
  try {
    text = read_file_bytes(path, uint64_t(16) << 20);  // a list of test names: 16 MiB is plenty
  } catch (const Error& e) {
    throw UsageError{"cannot read the expected-failures file: " + e.message()};
  }
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    size_t start = line.find_first_not_of(" \t");
    if (start == std::string::npos || line[start] == '#') continue;
    size_t end = line.find_first_of(" \t", start);
    std::string name = line.substr(start, end - start);
    size_t reason = end == std::string::npos ? end : line.find_first_not_of(" \t", end);
    e[name] = reason == std::string::npos ? "" : line.substr(reason);
  }
  return e;
}

// A message on one line, at most `max` characters.
std::string one_line(const std::string& s, size_t max) {
  std::string out;
  for (char ch : s) {
    if (ch == '\n') out += " | ";
    else if (ch != '\r') out += ch;
  }
  if (out.size() > max) out = out.substr(0, max - 3) + "...";
  return out;
}

// A generated reason: the status, then the message without its code prefix and model path.
std::string reason_of(const TestResult& r) {
  std::string m = r.message;
  if (size_t p = m.find("model.onnx: "); p != std::string::npos) m = m.substr(p + 12);
  if (size_t colon = m.find(": "); colon != std::string::npos && colon < 16 && m.find(' ') > colon)
    m = m.substr(colon + 2);  // "NotImplemented: ..." -> "..."
  return std::string(conformance::status_name(r.status)) + ": " + one_line(m, 200);
}

// A reason someone wrote by hand does not start with a status name; regeneration keeps it.
bool is_generated(const std::string& reason) {
  size_t colon = reason.find(':');
  return colon != std::string::npos && conformance::status_from_name(reason.substr(0, colon));
}

// Writes the current failures as the new expected list. Entries for tests this run did not
// include (filtered out, other suites) are kept as they were, and so are hand-written reasons
// of tests that still fail; generated reasons are refreshed from the current messages.
void write_expectations(const std::string& path, Tier tier, const Expectations& old,
                        const std::vector<TestResult>& results) {
  Expectations merged = old;
  for (const TestResult& r : results) {
    auto it = merged.find(r.name);
    if (r.status == Status::Passed) {
      if (it != merged.end()) merged.erase(it);
    } else if (it == merged.end() || is_generated(it->second)) {
      merged[r.name] = reason_of(r);
    }
  }
  std::ostringstream out;
  out << "# ONNX backend tests Terrace is known to fail on --tier " << tier_name(tier)
      << ", for every suite (node, simple,\n# pytorch-converted, pytorch-operator): `test_name  reason`, one a line.\n"
         "# `terrace conformance --expected FILE` treats these failures as expected and reports\n"
         "# listed tests that pass. `--write-expected FILE` regenerates the list from a run: reasons\n"
         "# that start with a status (`not_implemented: ...`) are refreshed, hand-written ones kept.\n";
  size_t width = 0;
  for (auto& [name, reason] : merged) width = std::max(width, name.size());
  for (auto& [name, reason] : merged)
    out << name << std::string(width + 2 - name.size(), ' ') << reason << "\n";
  write_text_file(path, out.str());
}

// ---- evaluation against expectations ----

struct Outcome {
  std::vector<TestResult> results;
  double seconds = 0;
  std::map<Status, std::vector<std::string>> by_status;
  std::vector<std::string> expected_failures, unexpected_failures, unexpectedly_passing;
  int64_t count(Status s) const { return by_status.count(s) ? int64_t(by_status.at(s).size()) : 0; }
  int64_t ran_on(const std::string& tier) const {
    return std::count_if(results.begin(), results.end(), [&](const TestResult& r) {
      return std::find(r.tiers.begin(), r.tiers.end(), tier) != r.tiers.end();
    });
  }
  int64_t failed() const { return int64_t(results.size()) - count(Status::Passed) - count(Status::NotImplemented); }
};

Outcome evaluate(std::vector<TestResult> results, const Expectations& expected, double seconds) {
  Outcome o;
  for (const TestResult& r : results) {
    o.by_status[r.status].push_back(r.name);
    bool listed = expected.count(r.name) != 0;
    if (r.status == Status::Passed) {
      if (listed) o.unexpectedly_passing.push_back(r.name);
    } else {
      (listed ? o.expected_failures : o.unexpected_failures).push_back(r.name);
    }
  }
  o.results = std::move(results);
  o.seconds = seconds;
  return o;
}

// ---- text report, in the manner of ONNX Runtime's onnx_test_runner ----

std::string join_tiers(const std::vector<std::string>& tiers) {
  std::string out;
  for (const std::string& t : tiers) out += (out.empty() ? "" : "+") + t;
  return out;
}

void print_test_lines(const Outcome& o, const Expectations& expected, bool verbose) {
  for (const TestResult& r : o.results) {
    bool listed = expected.count(r.name) != 0;
    if (r.status == Status::Passed) {
      if (listed) std::printf("[ XPASS ] %s: passes but is listed as an expected failure\n", r.name.c_str());
      else if (verbose) std::printf("[  PASS ] %s (%.1f ms, last call on %s)\n", r.name.c_str(), r.ms,
                                    join_tiers(r.tiers).c_str());
      continue;
    }
    std::printf("[%s] %s: %s: %s\n", listed ? " XFAIL " : " FAIL  ", r.name.c_str(),
                conformance::status_name(r.status), one_line(r.message, 300).c_str());
  }
}

void print_names(const char* title, const std::vector<std::string>& names) {
  if (names.empty()) return;
  std::printf("%s (%zu):\n", title, names.size());
  size_t col = 0;
  for (const std::string& n : names) {
    if (col > 0 && col + n.size() > 100) {
      std::printf("\n");
      col = 0;
    }
    std::printf("%s%s", col ? " " : "  ", n.c_str());
    col += n.size() + (col ? 1 : 2);
  }
  std::printf("\n");
}

void print_summary(const Outcome& o, const Config& c) {
  std::printf("\nresult (tier %s, %.1f s):\n", tier_name(c.tier), o.seconds);
  std::printf("  Total: %zu\n  Passed: %lld\n  Not implemented: %lld\n  Failed: %lld\n",
              o.results.size(), (long long)o.count(Status::Passed),
              (long long)o.count(Status::NotImplemented), (long long)o.failed());
  for (Status s : kFailureKinds)
    std::printf("    %s: %lld\n", conformance::status_title(s), (long long)o.count(s));
  std::printf("  Expected failures: %zu%s%s\n", o.expected_failures.size(),
              c.expected_path.empty() ? "" : " (listed in ", c.expected_path.empty() ? "" : (c.expected_path + ")").c_str());
  std::printf("  Unexpected failures: %zu\n  Unexpectedly passing: %zu\n",
              o.unexpected_failures.size(), o.unexpectedly_passing.size());
  if (c.tier != Tier::Interp)
    std::printf("  Ran on %s (last call): %lld; the rest stayed in the interpreter\n", tier_name(c.tier),
                (long long)o.ran_on(tier_name(c.tier)));
  if (c.min_pass) std::printf("  Pass floor: %lld\n", (long long)*c.min_pass);
  for (Status s : conformance::kAllStatuses)
    if (s != Status::Passed && o.by_status.count(s))
      print_names((std::string(conformance::status_title(s)) + " tests").c_str(), o.by_status.at(s));
  print_names("Unexpected failures", o.unexpected_failures);
  print_names("Unexpectedly passing (remove them from the expected-failures file)", o.unexpectedly_passing);
}

// ---- JSON report ----

void write_json(const std::string& path, const Outcome& o, const Config& c, const Expectations& expected) {
  Json js;
  js["tier"] = tier_name(c.tier);
  js["seconds"] = o.seconds;
  js["rtol"] = c.tol.rtol;
  js["atol"] = c.tol.atol;
  js["total"] = o.results.size();
  js["passed"] = o.count(Status::Passed);
  js["not_implemented"] = o.count(Status::NotImplemented);
  js["failed"] = o.failed();
  js["failed_breakdown"] = Json::object();
  for (Status s : kFailureKinds) js["failed_breakdown"][conformance::status_name(s)] = o.count(s);
  js["expected_failures"] = o.expected_failures.size();
  js["unexpected_failures"] = o.unexpected_failures;
  js["unexpectedly_passing"] = o.unexpectedly_passing;
  if (c.min_pass) js["min_pass"] = *c.min_pass;
  js["ran_on_tier"] = o.ran_on(tier_name(c.tier));
  js["categories"] = Json::object();
  for (auto& [s, names] : o.by_status) js["categories"][conformance::status_name(s)] = names;
  js["tests"] = Json::object();
  for (const TestResult& r : o.results) js["tests"][r.name] = conformance::status_name(r.status);
  js["details"] = Json::object();
  for (const TestResult& r : o.results) {
    Json d = {{"status", conformance::status_name(r.status)}, {"ms", r.ms}, {"message", r.message}, {"tiers", r.tiers}};
    if (auto it = expected.find(r.name); it != expected.end()) d["expected_reason"] = it->second;
    js["details"][r.name] = std::move(d);
  }
  write_json_file(path, js);
}

}  // namespace

const CommandDef kConformanceCommand{
    "conformance",
    "[DIR...]",
    "Runs ONNX backend tests (model.onnx and test_data_set_N/ folders) on a tier and judges them "
    "against their saved outputs and the expected-failures file.",
    {
        {"--tier", "interp|cpu|gpu", "the tier to test (default interp)"},
        {"--filter", "REGEX", "only tests whose names match (searched, as ctest -R)"},
        {"--json", "FILE", "write the full result as JSON"},
        {"--expected", "FILE", "the expected-failures list (default tests/conformance_expected.txt, or _onnx118.txt)"},
        {"--write-expected", "FILE", "write this run's failures as an expected-failures list"},
        {"--min-pass", "N", "fail when fewer than N tests pass"},
        {"--isolate", nullptr, "run each test in its own process (a crash or hang fails that test only)"},
        {"--jobs", "N", "run N tests at once (implies --isolate)", false, "-j"},
        {"--timeout", "S", "with --isolate: seconds per test (default 60)"},
        {"--rtol", "X", "relative tolerance for floats (default 1e-3, ONNX's)"},
        {"--atol", "X", "absolute tolerance for floats (default 1e-7, ONNX's)"},
        {"--verbose", nullptr, "a line for every test, passed ones too", false, "-v"},
    },
    0,
    SIZE_MAX,
    "DIR",
    "DIR is a test folder, a folder of test folders, or a suite shipped by libonnx-testdata under\n"
    "/usr/share/libonnx-testdata/data: node (the default), simple, pytorch-converted,\n"
    "pytorch-operator, real (its models are not shipped: it runs no test, which is a failure);\n"
    "or onnx-1.18: ONNX 1.18's node tests (opsets to 23) as tools/fetch_onnx_tests.sh downloads\n"
    "them, judged by tests/conformance_expected_onnx118.txt.\n"
    "Every failure must be listed in the expected-failures file (`test_name  reason` a line; one\n"
    "file for every Debian suite); a run that executes no test fails. The last line is `&&&& PASSED ...`\n"
    "or `&&&& FAILED ...`.\n",
};

int cmd_conformance(const ParsedArgs& args) {
  Config c = parse_config(args);
  Expectations expected = read_expectations(c.expected_path);
  std::vector<conformance::TestCase> tests;
  try {
    tests = conformance::discover_tests(c.dirs, c.filter);
  } catch (const Error& e) {
    throw UsageError{e.message()};
  }
  auto t0 = std::chrono::steady_clock::now();
  std::vector<TestResult> results;
  {
    Progress progress(std::string("conformance ") + tier_name(c.tier) + ", tests", int64_t(tests.size()));
    int64_t failed = 0;
    auto show = [&](size_t done, const TestResult& last) {
      failed += last.status != Status::Passed && !expected.count(last.name);
      progress.update(int64_t(done), std::to_string(failed) + " unexpected failures, last " + last.name);
    };
    results = c.isolate ? conformance::run_tests_isolated(tests, c.tier, c.jobs, c.timeout_s, c.tol, show)
                        : conformance::run_tests_in_process(tests, c.tier, c.tol, show);
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Outcome o = evaluate(std::move(results), expected, seconds);
  if (o.results.empty()) {
    std::string where;
    for (auto& d : c.dirs) where += (where.empty() ? "" : ", ") + d;
    std::printf("FAILED: no test ran: %s holds no test folder (model.onnx and test_data_set_N/)%s\n",
                where.c_str(), c.filter ? " matching --filter" : "");
    return 1;
  }

  print_test_lines(o, expected, c.verbose);
  print_summary(o, c);
  if (!c.json_path.empty()) write_json(c.json_path, o, c, expected);
  if (!c.write_expected_path.empty()) write_expectations(c.write_expected_path, c.tier, expected, o.results);

  bool below_floor = c.min_pass && o.count(Status::Passed) < *c.min_pass;
  if (below_floor)
    std::printf("FAILED: %lld tests passed, below the floor of %lld\n", (long long)o.count(Status::Passed),
                (long long)*c.min_pass);
  if (!o.unexpected_failures.empty())
    std::printf("FAILED: %zu tests failed that are not in the expected-failures file\n",
                o.unexpected_failures.size());
  return below_floor || !o.unexpected_failures.empty() ? 1 : 0;
}

}  // namespace terrace::cli
