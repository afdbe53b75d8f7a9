// terrace validate's core (validate.h): the checks, their results and their JSON.
#include "tools/validate.h"

#include <algorithm>

#include "interp/compare.h"
#include "tiers/tier_manager.h"
#include "tools/fp64_reference.h"
#include "tools/tensor_files.h"

namespace terrace::cli {

bool TierResult::passed() const {
  if (!available) return true;
  bool ok = failures.empty();
  for (const OutputResult& o : outputs) ok = ok && o.passed;
  return ok;
}

namespace {

int tier_rank(const std::string& t) { return t == "interp" ? 0 : t == "cpu" ? 1 : t == "gpu" ? 2 : 3; }

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

}  // namespace

std::vector<TierResult> tiers_to_check(const std::string& asked) {
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

ValidateResult validate_model(const ModelSource& model, const ValidateSpec& spec) {
  ValidateResult result;
  result.model = model.name();
  result.tiers = tiers_to_check(spec.tiers);
  const Options& base = spec.base;
  result.optimize = base.optimize;
  // Enough calls for a region to be promoted and validated on tier 1 and, where tier 2 is checked
  // and available, to climb on to it (Options::climb_threshold calls on tier 1) and be validated there.
  const bool climbs_to_gpu = std::any_of(result.tiers.begin(), result.tiers.end(),
                                         [](const TierResult& t) { return t.tier == Tier::Gpu && t.available; });
  result.calls = spec.calls > 0 ? spec.calls
                                : base.hot_threshold + base.validate_calls + 1 +
                                      (climbs_to_gpu ? base.climb_threshold + base.validate_calls + 1 : 0);

  std::shared_ptr<const Graph> graph = model.graph();
  check_dim_names(*graph, spec.dims);
  const InputShapes shapes = parse_shapes(spec.shapes, *graph);
  for (auto& [name, t] : spec.given) {
    check_input_name(*graph, name, "input");
    check_against_input(*graph, name, t, "input '" + name + "'");
  }
  // The inputs of call c: those given, random values (seed 42 + c) for the rest.
  const bool random = spec.given.empty() || spec.random_others;
  std::vector<NamedTensors> inputs;
  for (int64_t c = 0; c < result.calls; ++c)
    inputs.push_back(with_files(random ? random_inputs(*graph, 42 + uint64_t(c), spec.dims, shapes) : NamedTensors(),
                                spec.given));

  const std::vector<NamedTensors> reference = reference_outputs(graph, base, inputs);
  std::shared_ptr<const Graph> optimized = optimize_graph(graph, base.optimize, {}, &result.passes);
  result.nodes_before = graph->nodes.size();
  result.nodes_after = optimized->nodes.size();

  bool ok = true;
  Float64Reference exact;
  exact.widened = widen_to_float64(*graph, &exact.why);
  for (TierResult& r : result.tiers) {
    // The session runs the passes itself (Options::optimize): the graph it is given is the loaded one.
    if (r.available) check_tier(r, graph, base, result.calls, inputs, reference, exact), ++result.checked;
    ok = ok && r.passed();
  }
  result.passed = ok && result.checked > 0;  // nothing validated is no pass
  return result;
}

Json validate_json(const ValidateResult& r) {
  Json j;
  j["model"] = r.model;
  j["optimize"] = optimize_level_name(r.optimize);
  j["calls"] = r.calls;
  j["nodes_before"] = r.nodes_before;
  j["nodes_after"] = r.nodes_after;
  j["passes"] = Json::array();
  for (const PassRecord& p : r.passes) j["passes"].push_back({{"pass", p.pass}, {"rewrites", p.rewrites}});
  j["tiers"] = Json::array();
  for (const TierResult& t : r.tiers) j["tiers"].push_back(tier_json(t));
  j["passed"] = r.passed;
  return j;
}

}  // namespace terrace::cli
