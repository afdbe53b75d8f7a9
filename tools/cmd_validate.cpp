// terrace validate: the optimized model on each tier against the unoptimized graph on the
// interpreter (DESIGN.md, principle 1: every graph rewrite is judged against the unrewritten graph).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>

#include "interp/compare.h"
#include "interp/onnx_import.h"
#include "interp/tensor_proto.h"
#include "tiers/passes/pipeline.h"
#include "tiers/tier_manager.h"
#include "tools/cli_util.h"
#include "tools/fp64_reference.h"
#include "tools/json_out.h"
#include "tools/tensor_files.h"

namespace terrace::cli {

const CommandDef kValidateCommand{
    "validate",
    "MODEL",
    "Runs the optimized model (TERRACE_OPTIMIZE, default extended) on each tier for enough calls that "
    "its regions are compiled and validated, and compares every call's outputs with the unoptimized "
    "graph's on the interpreter, within the compare module's tolerance for each output's dtype; an "
    "output beyond it passes if it is within 1e-5 of its scale (or twice the interpreter's error) of the "
    "model computed in float64.",
    {
        {"--tier", "interp|cpu|gpu|all", "the tiers to check (default all: every tier this build has)"},
        {"--calls", "N", "calls per tier (default: the promotion threshold plus the validated calls, plus one; as many again for tier 2 to climb to when it is checked)"},
        {"--input", "NAME=FILE|FILE.npz", "the input NAME from a .npy or TensorProto .pb file, or every input an .npz (numpy.savez) holds (the same for every call)", true},
        {"--random-inputs", nullptr, "random values for every input not given with --input (a new draw per call)"},
        {"--dim", "SYM=N", "the symbolic dim SYM of the random inputs (default 1)", true},
        kShapesOption,
        {"--json", "FILE", "write the per-tier, per-output results as JSON"},
    },
    1,
    1,
    "MODEL",
    "Without --input, every input is random (as with --random-inputs). Each call is followed by a wait\n"
    "for the background compiles, so that a region is compiled once it is hot and the calls after it\n"
    "run the compiled code (its first ones shadow-validated by the session itself). A tier fails when\n"
    "an output differs from the reference, a call raises, or a region's own validation demoted its\n"
    "compiled code. What could not be checked is noted, not failed: a region whose compile failed\n"
    "(it runs in the interpreter), a tier no call reached. The last line is `&&&& PASSED ...` or\n"
    "`&&&& FAILED ...`.\n",
};

namespace {

// One output of one tier, over every call.
struct OutputResult {
  std::string name;
  double max_abs_err = 0, max_rel_err = 0;
  bool passed = true;
  std::string message;  // the first failure: "call 3: element 17 ..."
  std::string note;     // the first call that passed only against the float64 model, and how
};

struct TierResult {
  Tier tier = Tier::Interp;
  bool available = true;
  std::string unavailable;                 // why, when not available
  std::vector<std::string> ran;            // tiers any call ran on, lowest first
  std::map<std::string, int> regions;      // regions by the tier they ended on
  std::map<std::string, int> validations;  // "passed", "failed", "pending", "off"
  std::vector<OutputResult> outputs;
  std::vector<std::string> failures;       // calls that raised, regions demoted by validation
  std::vector<std::string> notes;          // what was not checked: compiles that failed, a tier that never ran
  bool passed() const {
    if (!available) return true;
    bool ok = failures.empty();
    for (const OutputResult& o : outputs) ok = ok && o.passed;
    return ok;
  }
};

int tier_rank(const std::string& t) { return t == "interp" ? 0 : t == "cpu" ? 1 : t == "gpu" ? 2 : 3; }

// The tiers to check, in order; tiers this build lacks are listed as not available.
std::vector<TierResult> tiers_to_check(const ParsedArgs& args) {
  const std::string asked = args.get("--tier").value_or("all");
  std::vector<TierResult> tiers;
  auto add = [&](Tier t) {
    TierResult r;
    r.tier = t;
    if (!tier_available(t)) {
      r.available = false;
      r.unavailable = tier_unavailable_reason(t);
    }
    tiers.push_back(r);
  };
  if (asked == "all") {
    for (Tier t : {Tier::Interp, Tier::Cpu, Tier::Gpu}) add(t);
  } else if (asked == "interp" || asked == "cpu" || asked == "gpu") {
    add(parse_tier(asked));
  } else {
    throw UsageError{"--tier expects interp, cpu, gpu or all, got '" + asked + "'"};
  }
  return tiers;
}

// The inputs of call `c`: --input files, random values (seed 42 + c) for the rest.
NamedTensors call_inputs(const Graph& graph, const ParsedArgs& args, int64_t c,
                         const std::vector<std::pair<std::string, Tensor>>& files,
                         const std::vector<std::pair<std::string, int64_t>>& dims, const InputShapes& shapes) {
  const bool random = files.empty() || args.has("--random-inputs");
  return with_files(random ? random_inputs(graph, 42 + uint64_t(c), dims, shapes) : NamedTensors(), files);
}

// The float64 model's outputs per call, computed when a comparison first needs them.
struct Float64Reference {
  std::shared_ptr<Graph> widened;  // null: no second opinion (why says why)
  std::string why;
  std::map<int64_t, NamedTensors> outputs;
  const NamedTensors* at(int64_t c, const NamedTensors& inputs) {
    if (!widened) return nullptr;
    auto it = outputs.find(c);
    if (it == outputs.end()) {
      NamedTensors out = float64_outputs(*widened, inputs, &why);
      if (out.empty()) {
        widened.reset();
        return nullptr;
      }
      it = outputs.emplace(c, std::move(out)).first;
    }
    return &it->second;
  }
};

void check_tier(TierResult& r, std::shared_ptr<const Graph> graph, const Options& base, int64_t calls,
                const std::vector<NamedTensors>& inputs, const std::vector<NamedTensors>& reference,
                Float64Reference& exact) {
  Options options = base;
  options.max_tier = r.tier;
  std::unique_ptr<Session> session;
  try {
    session = Session::from_graph(graph, options);
  } catch (const Error& e) {
    r.failures.push_back(std::string("the optimized graph does not load: ") + e.what());
    return;
  }
  for (auto& [name, t] : reference[0]) {
    OutputResult o;
    o.name = name;
    r.outputs.push_back(o);
  }
  for (int64_t c = 0; c < calls; ++c) {
    NamedTensors got;
    try {
      got = session->run(inputs[size_t(c)]);
    } catch (const Error& e) {
      r.failures.push_back("call " + std::to_string(c) + " raised: " + e.what());
      continue;
    }
    session->wait_for_compiles();  // the next call runs what this one made hot
    for (auto& t : session->last_call().tiers)
      if (std::find(r.ran.begin(), r.ran.end(), t) == r.ran.end()) r.ran.push_back(t);
    const NamedTensors& want = reference[size_t(c)];
    if (got.size() != want.size()) {
      r.failures.push_back("call " + std::to_string(c) + " returned " + std::to_string(got.size()) +
                           " outputs, the reference " + std::to_string(want.size()));
      continue;
    }
    for (size_t i = 0; i < want.size(); ++i) {
      OutputResult& o = r.outputs[i];
      Comparison cmp;
      if (got[i].first != want[i].first) {
        cmp.equal = false;
        cmp.message = "named '" + got[i].first + "' in the optimized graph";
      } else {
        cmp = compare_tensors(want[i].second, got[i].second, Tolerance::for_dtype(want[i].second.dtype()));
        // Beyond the tolerance of the interpreter's answer: judged against the float64 model, as
        // close to it as the float32 interpreter is (fp32 rounding in another order, compounded).
        if (!cmp.equal && is_float(got[i].second.dtype())) {
          std::string detail;
          const NamedTensors* e = exact.at(c, inputs[size_t(c)]);
          if (e && i < e->size() && close_to_float64(want[i].second, got[i].second, (*e)[i].second, &detail)) {
            cmp.equal = true;
            if (o.note.empty()) o.note = "call " + std::to_string(c) + ": beyond the interpreter's tolerance (" + cmp.message +
                                         "), within the float64 model's: " + detail;
          } else if (!detail.empty()) {
            cmp.message += "; " + detail;
          } else if (!e) {
            cmp.message += "; no float64 reference: " + exact.why;
          }
        }
      }
      o.max_abs_err = std::max(o.max_abs_err, cmp.max_abs_err);
      o.max_rel_err = std::max(o.max_rel_err, cmp.max_rel_err);
      if (!cmp.equal && o.passed) o.message = "call " + std::to_string(c) + ": " + cmp.message;
      o.passed = o.passed && cmp.equal;
    }
  }
  std::sort(r.ran.begin(), r.ran.end(), [](auto& a, auto& b) { return tier_rank(a) < tier_rank(b); });
  for (const RegionReport& rep : session->region_reports()) {
    ++r.regions[tier_name(rep.tier)];
    const bool failed = rep.validation.rfind("failed", 0) == 0;
    ++r.validations[failed ? "failed" : rep.validation];
    if (failed)
      r.failures.push_back("region " + std::to_string(rep.id) + " (" + rep.ops + "): compiled code demoted, " +
                           rep.validation);
    else if (rep.state.rfind("stopped", 0) == 0)
      r.notes.push_back("region " + std::to_string(rep.id) + " (" + rep.ops + ") not checked on " +
                        tier_name(r.tier) + ": " + rep.state);
  }
  const std::string asked = tier_name(r.tier);
  if (r.tier != Tier::Interp && std::find(r.ran.begin(), r.ran.end(), asked) == r.ran.end())
    r.notes.push_back("no call ran on " + asked + " (a region is compiled after " +
                      std::to_string(options.hot_threshold) + " calls with one input signature; " +
                      std::to_string(calls) + " calls were made)");
}

std::string counts_text(const std::map<std::string, int>& m) {
  std::string s;
  for (auto& [k, n] : m) s += (s.empty() ? "" : ", ") + std::to_string(n) + " " + k;
  return s.empty() ? "none" : s;
}

void print_tier(const TierResult& r) {
  if (!r.available) {
    std::printf("tier %s: not available: %s\n", tier_name(r.tier), r.unavailable.c_str());
    return;
  }
  std::string ran;
  for (auto& t : r.ran) ran += (ran.empty() ? "" : ", ") + t;
  int regions = 0;
  for (auto& [k, n] : r.regions) regions += n;
  std::string plan = regions == 0 ? "no regions (every node interpreted)"
                                  : std::to_string(regions) + " regions, ended on " + counts_text(r.regions) +
                                        ", their own validation " + counts_text(r.validations);
  std::printf("tier %s: %s; ran on %s; %s\n", tier_name(r.tier), r.passed() ? "passed" : "FAILED",
              ran.empty() ? "nothing" : ran.c_str(), plan.c_str());
  for (const OutputResult& o : r.outputs) {
    std::printf("  output %-24s max abs err %-10.3g max rel err %-10.3g %s%s%s\n", o.name.c_str(), o.max_abs_err,
                o.max_rel_err, o.passed ? "passed" : "FAILED", o.passed ? "" : ": ", o.message.c_str());
    if (o.passed && !o.note.empty()) std::printf("    %s\n", o.note.c_str());
  }
  for (const std::string& f : r.failures) std::printf("  FAILED: %s\n", f.c_str());
  for (const std::string& n : r.notes) std::printf("  note: %s\n", n.c_str());
}

Json tier_json(const TierResult& r) {
  Json j;
  j["tier"] = tier_name(r.tier);
  j["available"] = r.available;
  if (!r.available) {
    j["reason"] = r.unavailable;
    return j;
  }
  j["passed"] = r.passed();
  j["tiers_ran"] = r.ran;
  auto map = [](const std::map<std::string, int>& m) {
    Json o = Json::object();
    for (auto& [k, n] : m) o[k] = n;
    return o;
  };
  j["regions_by_tier"] = map(r.regions);
  j["region_validation"] = map(r.validations);
  j["outputs"] = Json::array();
  for (const OutputResult& o : r.outputs)
    j["outputs"].push_back({{"name", o.name}, {"max_abs_err", o.max_abs_err}, {"max_rel_err", o.max_rel_err},
                            {"passed", o.passed}, {"message", o.message}, {"float64_note", o.note}});
  j["failures"] = r.failures;
  j["notes"] = r.notes;
  return j;
}

// The reference: the graph as loaded, on the interpreter, one call per input set.
std::vector<NamedTensors> reference_outputs(const std::shared_ptr<const Graph>& graph, const Options& base,
                                            const std::vector<NamedTensors>& inputs) {
  Options ref_options = base;
  ref_options.max_tier = Tier::Interp;
  ref_options.optimize = OptimizeLevel::None;
  auto reference_session = Session::from_graph(graph, ref_options);
  std::vector<NamedTensors> reference;
  for (const NamedTensors& in : inputs) reference.push_back(reference_session->run(in));
  return reference;
}

// Rewrites per pass over all its runs (the folding loop runs some passes once per round), as
// "pass n, ...": the passes that rewrote something, in their first run's order.
std::string rewrites_by_pass(const std::vector<PassRecord>& records) {
  std::vector<std::pair<std::string, int>> per_pass;
  for (const PassRecord& p : records) {
    auto it = std::find_if(per_pass.begin(), per_pass.end(), [&](auto& e) { return e.first == p.pass; });
    if (it == per_pass.end()) per_pass.emplace_back(p.pass, p.rewrites);
    else it->second += p.rewrites;
  }
  std::string rewrites;
  for (auto& [pass, n] : per_pass)
    if (n > 0) rewrites += (rewrites.empty() ? "" : ", ") + pass + " " + std::to_string(n);
  return rewrites;
}

}  // namespace

int cmd_validate(const ParsedArgs& args) {
  std::string model = args.operands[0];
  if (std::filesystem::is_directory(model)) model += "/model.onnx";  // a zoo folder
  const std::string json_path = args.get("--json").value_or("");
  if (args.get("--json") && json_path.empty()) throw UsageError{"--json needs a file name"};
  std::vector<std::pair<std::string, int64_t>> dims;
  for (auto& [n, v] : assignments(args, "--dim")) dims.emplace_back(n, parse_count("--dim " + n, v));
  if (!dims.empty() && args.has("--input") && !args.has("--random-inputs"))
    throw UsageError{"--dim sets the random inputs' dims: it needs --random-inputs"};
  std::vector<TierResult> tiers = tiers_to_check(args);
  const Options base = Options::from_env();
  // Enough calls for a region to be promoted and validated on tier 1 and, where tier 2 is checked
  // and available, to climb on to it (Options::climb_threshold calls on tier 1) and be validated there.
  const bool climbs_to_gpu = std::any_of(tiers.begin(), tiers.end(),
                                         [](const TierResult& t) { return t.tier == Tier::Gpu && t.available; });
  const int64_t calls = args.get("--calls") ? parse_positive("--calls", *args.get("--calls"))
                        : base.hot_threshold + base.validate_calls + 1 +
                              (climbs_to_gpu ? base.climb_threshold + base.validate_calls + 1 : 0);

  std::shared_ptr<const Graph> graph = load_onnx_file(model).graph;
  check_dim_names(*graph, dims);
  const InputShapes shapes = parse_shapes(args, *graph);
  const NamedTensors files = input_files(args, *graph);
  std::vector<NamedTensors> inputs;
  for (int64_t c = 0; c < calls; ++c) inputs.push_back(call_inputs(*graph, args, c, files, dims, shapes));

  const std::vector<NamedTensors> reference = reference_outputs(graph, base, inputs);

  std::vector<PassRecord> records;
  std::shared_ptr<const Graph> optimized = optimize_graph(graph, base.optimize, {}, &records);
  std::printf("validate %s: optimize %s (%zu nodes -> %zu), %lld calls per tier, against the unoptimized graph on "
              "the interpreter\n",
              model.c_str(), optimize_level_name(base.optimize), graph->nodes.size(), optimized->nodes.size(),
              (long long)calls);
  if (const std::string rewrites = rewrites_by_pass(records); !rewrites.empty()) std::printf("rewrites by pass: %s\n", rewrites.c_str());

  bool ok = true;
  int checked = 0;
  Float64Reference exact;
  exact.widened = widen_to_float64(*graph, &exact.why);
  for (TierResult& r : tiers) {
    // The session runs the passes itself (Options::optimize): the graph it is given is the loaded one.
    if (r.available) check_tier(r, graph, base, calls, inputs, reference, exact), ++checked;
    print_tier(r);
    ok = ok && r.passed();
  }
  if (checked == 0) {  // nothing was validated: that is no pass
    std::printf("no tier asked for is available: nothing validated\n");
    ok = false;
  }
  if (!json_path.empty()) {
    Json j;
    j["model"] = model;
    j["optimize"] = optimize_level_name(base.optimize);
    j["calls"] = calls;
    j["nodes_before"] = graph->nodes.size();
    j["nodes_after"] = optimized->nodes.size();
    j["passes"] = Json::array();
    for (const PassRecord& p : records) j["passes"].push_back({{"pass", p.pass}, {"rewrites", p.rewrites}});
    j["tiers"] = Json::array();
    for (const TierResult& r : tiers) j["tiers"].push_back(tier_json(r));
    j["passed"] = ok;
    write_json_file(json_path, j);
  }
  return ok ? 0 : 1;
}

}  // namespace terrace::cli
