// terrace run: runs a model N times, printing each call's latency and tiers and the outputs.
#include <cstdio>

#include "interp/compare.h"
#include "interp/json.h"
#include "interp/onnx_import.h"
#include "tools/cli_util.h"

namespace terrace::cli {

namespace {
const char* kRunUsage =
    "terrace run MODEL [--input NAME=FILE.pb]... [--random-inputs] [--dim SYM=N]... [--repeat N]\n"
    "                  [--expect NAME=FILE.pb]... [--tier interp|cpu|gpu] [--json FILE] [--quiet]";
}

int cmd_run(const Args& args) {
  std::string model, json_path;
  std::vector<std::pair<std::string, std::string>> input_files, expect_files;
  std::vector<std::pair<std::string, int64_t>> dims;
  bool random = false, quiet = false;
  int64_t repeat = 1;
  Options options = Options::from_env();
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--input") input_files.push_back(split_assignment(a, next_value(args, i)));
    else if (a == "--expect") expect_files.push_back(split_assignment(a, next_value(args, i)));
    else if (a == "--random-inputs") random = true;
    else if (a == "--quiet") quiet = true;
    else if (a == "--dim") {
      auto [n, v] = split_assignment(a, next_value(args, i));
      dims.emplace_back(n, parse_count(a, v));
    } else if (a == "--repeat") repeat = parse_count(a, next_value(args, i));
    else if (a == "--json") json_path = next_value(args, i);
    else if (a == "--tier") options.max_tier = parse_tier(next_value(args, i));
    else if (!a.empty() && a[0] == '-') throw UsageError{"unknown option '" + a + "'\n" + kRunUsage};
    else if (model.empty()) model = a;
    else throw UsageError{"more than one model given\n" + std::string(kRunUsage)};
  }
  if (model.empty()) throw UsageError{std::string("no model given\n") + kRunUsage};
  if (repeat < 1) throw UsageError{"--repeat must be at least 1"};

  auto session = Session::load(model, options);
  NamedTensors inputs;
  if (random) inputs = random_inputs(session->graph(), 42, dims);
  for (auto& [name, file] : input_files) {
    Tensor t = load_tensor_pb(file);
    bool replaced = false;
    for (auto& [n, v] : inputs)
      if (n == name) v = t, replaced = true;
    if (!replaced) inputs.emplace_back(name, std::move(t));
  }

  NamedTensors outputs;
  for (int64_t c = 0; c < repeat; ++c) {
    outputs = session->run(inputs);
    if (!quiet) {
      CallRecord r = session->last_call();
      std::string tiers;
      for (auto& t : r.tiers) tiers += (tiers.empty() ? "" : "+") + t;
      std::printf("call %3lld  %10.3f ms  [%s]\n", (long long)r.index, r.ms, tiers.c_str());
    }
  }
  if (!quiet) std::fputs(session->report().c_str(), stdout);
  for (auto& [name, t] : outputs)
    std::printf("output %s: %s%s\n", name.c_str(), dtype_name(t.dtype()), shape_str(t.shape()).c_str());

  bool ok = true;
  JsonWriter checks;
  checks.begin_array();
  for (auto& [name, file] : expect_files) {
    const Tensor* got = nullptr;
    for (auto& [n, t] : outputs)
      if (n == name) got = &t;
    if (!got) throw UsageError{"--expect names '" + name + "', which is not an output"};
    Tensor want = load_tensor_pb(file);
    Comparison c = compare_tensors(want, *got, Tolerance::for_dtype(want.dtype()));
    std::printf("check %s: %s (max abs err %.3g, max rel err %.3g)%s%s\n", name.c_str(),
                c.equal ? "matches" : "DIFFERS", c.max_abs_err, c.max_rel_err,
                c.equal ? "" : ": ", c.message.c_str());
    ok = ok && c.equal;
    checks.begin_object().field("output", name).field("equal", c.equal)
        .field("max_abs_err", c.max_abs_err).field("max_rel_err", c.max_rel_err)
        .field("message", c.message).end_object();
  }
  checks.end_array();

  if (!json_path.empty()) {
    JsonWriter j;
    j.begin_object().field("model", model);
    j.key("outputs").begin_array();
    for (auto& [name, t] : outputs)
      j.begin_object().field("name", name).field("dtype", dtype_name(t.dtype()))
          .field("shape", t.shape()).end_object();
    j.end_array();
    j.key("checks").raw(checks.str());
    j.key("report").raw(session->report_json());
    j.end_object();
    write_text_file(json_path, j.str());
  }
  return ok ? 0 : 1;
}

}  // namespace terrace::cli
