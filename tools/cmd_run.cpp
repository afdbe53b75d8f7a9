// terrace run: runs a model N times, printing each call's latency and tiers and the outputs.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>

#include "interp/compare.h"
#include "interp/log.h"
#include "interp/onnx_import.h"
#include "interp/tensor_proto.h"
#include "tiers/tier_manager.h"
#include "tools/cli_util.h"
#include "tools/conformance.h"
#include "tools/json_out.h"
#include "tools/tensor_files.h"
#include "tools/value_summary.h"

namespace terrace::cli {

const CommandDef kRunCommand{
    "run",
    "MODEL",
    "Runs a model (a .onnx file, or a folder holding model.onnx) N times, printing each call's "
    "latency and the tiers it ran on, the session's report and the outputs; checks outputs with --expect.",
    {
        {"--input", "NAME=FILE|FILE.npz", "the input NAME from a .npy or TensorProto .pb file; or every input an .npz (numpy.savez) holds", true},
        {"--random-inputs", nullptr, "deterministic random values for every input not given with --input"},
        {"--dim", "SYM=N", "the symbolic dim SYM of the random inputs (default 1)", true},
        {"--repeat", "N", "run N times (default 1)"},
        {"--warm", nullptr, "first, unreported calls until every region has settled on its tier (compiles and validation done; at most 5 minutes)"},
        {"--expect", "NAME=FILE", "check output NAME against a .npy or TensorProto .pb file", true},
        {"--tier", "interp|cpu|gpu", "the highest tier regions may be promoted to (default: the highest built)"},
        {"--json", "FILE", "write the outputs' shapes, the checks and the session's report as JSON"},
        {"--output-dir", "DIR", "write the last call's outputs as DIR/output_N.pb (or as --output-format says)"},
        {"--output-format", "pb|npy", "--output-dir's files: output_N.pb (default: TensorProto, ONNX test-data layout), or NAME.npy"},
        {"--quiet", nullptr, "no per-call lines and no report"},
        {"--serve", nullptr, "instead of --repeat: read counts of calls from stdin, one a line; run each count and print its calls' times as one JSON line (bench/compare.py --interleave)"},
        {"--input-sets", "DIR", "instead of --input: call once with each test_data_set_N folder of DIR (ONNX's test-data layout, as conformance reads it), checking the outputs where the folder has them"},
        {"--rounds", "N", "with --input-sets: go through the sets N times (default 1); each round's calls, compiles, median and checks are printed and in the JSON"},
        kProfileOption,
        kStrictOption,
        kModeOption,
        kThreadsOption,
        kShapesOption,
    },
    1,
    1,
    "MODEL",
    "Every graph input needs a value: --input, or --random-inputs for the rest, or --input-sets. The\n"
    "last line is `&&&& PASSED ...` or `&&&& FAILED ...` (an --expect check or an input set's output\n"
    "that differs, or an error).\n",
};

namespace {

std::string model_path(std::string model) {
  // A zoo folder stands for its model.onnx.
  if (std::filesystem::is_directory(model)) model += "/model.onnx";
  return model;
}

// Calls the session until every region has settled: no compile in flight, and no region's tier,
// state, version count or validation changed for as many calls as a climb takes (a region goes to
// tier 2 after Options::climb_threshold calls on tier 1, then is shadow-validated), waiting for the
// compiles after each call; at most 5 minutes. Returns the calls made.
int64_t warm_up(Session& session, const NamedTensors& inputs, const Options& options) {
  const int64_t settle =
      (options.max_tier == Tier::Gpu ? options.climb_threshold : 0) + options.validate_calls + 2;
  const auto start = std::chrono::steady_clock::now();
  std::string last;
  int64_t calls = 0;
  for (int64_t same = 0; same < settle && std::chrono::steady_clock::now() - start < std::chrono::minutes(5);) {
    session.run(inputs);
    session.wait_for_compiles();
    ++calls;
    std::string now;
    for (const RegionReport& r : session.region_reports())
      now += std::string(tier_name(r.tier)) + " " + r.state + " " + std::to_string(r.versions) + " " + r.validation + ";";
    same = now == last ? same + 1 : 0;
    last = std::move(now);
  }
  return calls;
}

// --serve: a line `{"ready": true}`, then for each line of stdin holding a count N, N calls and
// one line `{"times_ms": [...]}` (each call's wall time, as the caller would see it); at the end
// of stdin a line `{"peak_rss_mb": ...}`. A line that is not a positive count ends it with a
// UsageError. bench/compare.py --interleave alternates blocks of calls between this process and
// ONNX Runtime's, so that a machine whose speed drifts slows both alike.
void serve_calls(const std::function<void()>& call) {
  std::printf("{\"ready\": true}\n");
  std::fflush(stdout);
  char line[64];
  while (std::fgets(line, sizeof line, stdin)) {
    std::string text(line);
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
    if (text.empty()) continue;
    const int64_t n = parse_positive("--serve: a count of calls", text);
    std::string times;
    for (int64_t i = 0; i < n; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      call();
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      char buf[32];
      std::snprintf(buf, sizeof buf, "%s%.6g", i ? ", " : "", ms);
      times += buf;
    }
    std::printf("{\"times_ms\": [%s]}\n", times.c_str());
    std::fflush(stdout);
  }
  std::printf("{\"peak_rss_mb\": %.1f}\n", peak_rss_mb());
  std::fflush(stdout);
}

using Assignments = std::vector<std::pair<std::string, std::string>>;

void check_expect_names(const Graph& graph, const Assignments& expect_files) {
  for (auto& [name, file] : expect_files) {
    bool found = false;
    for (int id : graph.outputs) found = found || graph.values[size_t(id)].name == name;
    if (!found) throw UsageError{"--expect names '" + name + "', which is not a graph output"};
  }
}

// The inputs: --random-inputs' values, each replaced (or added) by an --input file's.
NamedTensors run_inputs(const Graph& graph, bool random, const std::vector<std::pair<std::string, int64_t>>& dims,
                        const InputShapes& shapes, const NamedTensors& files) {
  return with_files(random ? random_inputs(graph, 42, dims, shapes) : NamedTensors(), files);
}

// The line naming the tiers allowed and those the calls ran on (`ran` sorted lowest first).
void print_tiers(Tier allowed, std::vector<std::string>& ran) {
  std::sort(ran.begin(), ran.end(), [](const std::string& a, const std::string& b) {
    auto rank = [](const std::string& t) { return t == "interp" ? 0 : t == "cpu" ? 1 : t == "gpu" ? 2 : 3; };
    return rank(a) < rank(b);
  });
  std::string ran_text;
  for (auto& t : ran) ran_text += (ran_text.empty() ? "" : ", ") + t;
  std::printf("tiers: up to %s allowed; ran on %s\n", tier_name(allowed),
              ran.empty() ? "none (no call was made)" : ran_text.c_str());
}

Json outputs_json(const NamedTensors& outputs) {
  Json list = Json::array();
  for (auto& [name, t] : outputs)
    list.push_back({{"name", name}, {"dtype", dtype_name(t.dtype())}, {"shape", t.shape()},
                    {"values", summary_json(summarize_values(t))}});
  return list;
}

// The --expect checks, each printed and added to `checks`; whether all passed.
bool check_outputs(const Assignments& expect_files, const NamedTensors& outputs, Json& checks) {
  bool ok = true;
  for (auto& [name, file] : expect_files) {
    const Tensor* got = nullptr;
    for (auto& [n, t] : outputs)
      if (n == name) got = &t;
    if (!got) {  // --serve with no count on stdin: no call, so nothing to compare
      std::printf("check %s: FAILED: no call was made, so there is no output to check\n", name.c_str());
      ok = false;
      checks.push_back({{"output", name}, {"equal", false}, {"message", "no call was made"}});
      continue;
    }
    Tensor want = load_tensor_file(file);
    Comparison c = compare_tensors(want, *got, Tolerance::for_dtype(want.dtype()));
    std::printf("check %s: %s (max abs err %.3g, max rel err %.3g)%s%s\n", name.c_str(),
                c.equal ? "matches" : "DIFFERS", c.max_abs_err, c.max_rel_err,
                c.equal ? "" : ": ", c.message.c_str());
    ok = ok && c.equal;
    checks.push_back({{"output", name}, {"equal", c.equal}, {"max_abs_err", c.max_abs_err},
                      {"max_rel_err", c.max_rel_err}, {"message", c.message}});
  }
  return ok;
}

// --input-sets: the sets' inputs as named tensors (a set with a sequence or optional input cannot
// go through Session::run).
std::vector<NamedTensors> set_inputs(const Graph& graph, const std::vector<conformance::DataSet>& sets) {
  std::vector<NamedTensors> out;
  for (const conformance::DataSet& set : sets) {
    NamedTensors in;
    for (size_t i = 0; i < set.inputs.size(); ++i) {
      const std::string& name = graph.values[size_t(graph.inputs[i])].name;
      if (set.inputs[i].kind != ValueKind::Tensor)
        throw UsageError{"--input-sets: " + set.name + "'s input '" + name + "' is a sequence or optional; run takes tensors"};
      if (set.inputs[i].tensor.defined()) in.emplace_back(name, set.inputs[i].tensor);
    }
    out.push_back(std::move(in));
  }
  return out;
}

int published_versions(const Session& session) {
  int n = 0;
  for (const RegionReport& r : session.region_reports()) n += r.versions;
  return n;
}

// One round through the sets: a call each, its outputs checked where the set has them; then the
// compiles the round started are waited for, so that each round counts the versions it caused.
Json run_round(Session& session, const std::vector<conformance::DataSet>& sets, const std::vector<NamedTensors>& inputs,
               int64_t round, const std::function<void(const NamedTensors&)>& call, NamedTensors& outputs) {
  const int before = published_versions(session);
  std::vector<double> ms;
  Json mismatches = Json::array();
  for (size_t k = 0; k < sets.size(); ++k) {
    call(inputs[k]);
    ms.push_back(session.last_call().ms);
    for (size_t i = 0; i < sets[k].outputs.size() && i < outputs.size(); ++i) {
      const RValue& want = sets[k].outputs[i];
      if (want.kind != ValueKind::Tensor || !want.tensor.defined()) continue;
      Comparison c = compare_tensors(want.tensor, outputs[i].second, Tolerance::for_dtype(want.tensor.dtype()));
      if (!c.equal) mismatches.push_back(sets[k].name + " output '" + outputs[i].first + "': " + c.message);
    }
  }
  session.wait_for_compiles();
  std::sort(ms.begin(), ms.end());
  const double median = ms.empty() ? 0 : ms[ms.size() / 2];
  const int compiles = published_versions(session) - before;
  std::printf("round %lld: %zu calls, median %.3f ms, %d versions published, %s\n", (long long)round, ms.size(), median,
              compiles, mismatches.empty() ? "outputs match" : "OUTPUTS DIFFER");
  for (const Json& m : mismatches) std::printf("  %s\n", m.get<std::string>().c_str());
  return {{"round", round}, {"calls", int64_t(ms.size())}, {"compiles", compiles}, {"median_ms", median},
          {"all_match", mismatches.empty()}, {"mismatches", mismatches}};
}

void check_input_sets_args(const ParsedArgs& args) {
  if (!args.get("--input-sets")) {
    if (args.get("--rounds")) throw UsageError{"--rounds goes through --input-sets: give the folder"};
    return;
  }
  for (const char* other : {"--input", "--random-inputs", "--dim", "--shapes", "--repeat", "--serve", "--expect", "--warm"})
    if (args.has(other))
      throw UsageError{std::string("--input-sets gives every call's inputs and expected outputs: no ") + other};
}

// The session's options: the environment's, then the command line's.
Options session_options(const ParsedArgs& args) {
  Options options = Options::from_env();
  bool asked = tier_from_env();
  if (auto t = args.get("--tier")) options.max_tier = parse_tier(*t), asked = true;
  options.max_tier = effective_tier("run", options.max_tier, asked);
  apply_session_options(args, options);
  return options;
}

// --profile: the Chrome trace, once the compiles in flight have ended (their spans end in it).
void write_profile(Session& session, const Options& options) {
  if (options.profile_file.empty()) return;
  session.wait_for_compiles();
  session.write_profile();
  std::printf("profile: %s (Chrome trace: Perfetto, chrome://tracing)\n", options.profile_file.c_str());
}

}  // namespace

int cmd_run(const ParsedArgs& args) {
  const std::string model = model_path(args.operands[0]);
  auto expect_files = assignments(args, "--expect");
  std::vector<std::pair<std::string, int64_t>> dims;
  for (auto& [n, v] : assignments(args, "--dim")) dims.emplace_back(n, parse_count("--dim " + n, v));
  const bool random = args.has("--random-inputs"), quiet = args.has("--quiet");
  const int64_t repeat = args.get("--repeat") ? parse_positive("--repeat", *args.get("--repeat")) : 1;
  const std::string json_path = args.get("--json").value_or("");
  const std::string output_dir = args.get("--output-dir").value_or("");
  if (args.get("--json") && json_path.empty()) throw UsageError{"--json needs a file name"};
  if (args.get("--output-dir") && output_dir.empty()) throw UsageError{"--output-dir needs a folder name"};
  const OutputFormat output_format = parse_output_format(args.get("--output-format").value_or("pb"));
  if (args.get("--output-format") && output_dir.empty()) throw UsageError{"--output-format needs --output-dir"};
  if (!dims.empty() && !random) throw UsageError{"--dim sets the random inputs' dims: it needs --random-inputs"};
  if (args.has("--serve") && args.get("--repeat")) throw UsageError{"--serve reads its counts of calls from stdin: no --repeat"};
  check_input_sets_args(args);
  const std::string sets_dir = args.get("--input-sets").value_or("");
  const int64_t rounds = args.get("--rounds") ? parse_positive("--rounds", *args.get("--rounds")) : 1;
  const Options options = session_options(args);
  auto session = Session::load(model, options);
  const Graph& graph = session->graph();
  check_dim_names(graph, dims);
  const InputShapes shapes = parse_shapes(args, graph);
  if (!shapes.empty() && !random) throw UsageError{"--shapes sets the random inputs' shapes: it needs --random-inputs"};
  check_expect_names(graph, expect_files);
  const std::vector<conformance::DataSet> sets =
      sets_dir.empty() ? std::vector<conformance::DataSet>() : conformance::load_data_sets(graph, sets_dir);
  const std::vector<NamedTensors> each_set = set_inputs(graph, sets);
  const NamedTensors inputs = sets.empty() ? run_inputs(graph, random, dims, shapes, input_files(args, graph)) : each_set[0];
  for (auto& [name, t] : inputs)
    log(LogLevel::Trace, "run: input ", name, ": ", dtype_name(t.dtype()), shape_str(t.shape()));

  NamedTensors outputs;
  int64_t warm = 0;
  if (args.has("--warm")) {
    warm = warm_up(*session, inputs, options);
    if (!quiet) std::printf("warm-up: %lld calls\n", (long long)warm);
  }
  std::vector<std::string> ran;  // every tier any call ran on, lowest first
  const bool serve = args.has("--serve");
  auto call_with = [&](const NamedTensors& in) {
    outputs = session->run(in);
    CallRecord r = session->last_call();
    for (auto& t : r.tiers)
      if (std::find(ran.begin(), ran.end(), t) == ran.end()) ran.push_back(t);
    std::string tiers;
    for (auto& t : r.tiers) tiers += (tiers.empty() ? "" : "+") + t;
    log(LogLevel::Trace, "run: call ", r.index, " took ", r.ms, " ms on ", tiers);
    if (!quiet && !serve) std::printf("call %3lld  %10.3f ms  [%s]\n", (long long)r.index, r.ms, tiers.c_str());
  };
  auto call = [&] { call_with(inputs); };
  if (serve) serve_calls(call);
  Json round_results = Json::array();
  bool sets_match = true;
  for (int64_t r = 1; r <= (sets.empty() ? 0 : rounds); ++r) {
    round_results.push_back(run_round(*session, sets, each_set, r, call_with, outputs));
    sets_match = sets_match && round_results.back()["all_match"].get<bool>();
  }
  for (int64_t c = 0; c < (serve || !sets.empty() ? 0 : repeat); ++c) call();
  if (!quiet) std::fputs(session->report().c_str(), stdout);
  write_profile(*session, options);
  for (auto& [name, t] : outputs)
    std::printf("output %s: %s%s  %s\n", name.c_str(), dtype_name(t.dtype()), shape_str(t.shape()).c_str(),
                summary_text(summarize_values(t)).c_str());
  print_tiers(options.max_tier, ran);

  Json checks = Json::array();
  const bool ok = check_outputs(expect_files, outputs, checks) && sets_match;

  if (!output_dir.empty()) write_output_files(output_dir, outputs, output_format);
  if (!json_path.empty()) {
    Json j{{"model", model}, {"tier", tier_name(options.max_tier)}, {"tiers_ran", ran}, {"warm_calls", warm},
           {"outputs", outputs_json(outputs)}, {"checks", checks}};
    if (!sets.empty()) j["rounds"] = round_results;
    j["report"] = Json::parse(session->report_json());
    j["passed"] = ok;
    write_json_file(json_path, j);
  }
  return ok ? 0 : 1;
}

}  // namespace terrace::cli
