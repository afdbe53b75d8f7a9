// terrace validate's core, for the CLI (tools/cmd_validate.cpp) and the Python module alike: the
// model optimized (Options::optimize) on each tier against the unoptimized graph on the
// interpreter, every call's outputs compared within the compare module's tolerance, with the
// float64 model as a second opinion (tools/fp64_reference.h).
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tiers/passes/pipeline.h"
#include "tools/cli_util.h"
#include "tools/json_out.h"
#include "tools/model_source.h"

namespace terrace::cli {

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
  bool passed() const;
};

// What to validate, and on what.
struct ValidateSpec {
  std::string tiers = "all";  // interp, cpu, gpu or all (every tier this build has)
  int64_t calls = 0;          // 0: the promotion threshold plus the validated calls, plus one (and as
                              // many again for tier 2 to climb to, where it is checked)
  NamedTensors given;         // inputs given, the same every call (checked against the model's)
  bool random_others = false; // random values for the inputs not given (always, when none is)
  std::vector<std::pair<std::string, int64_t>> dims;  // the random inputs' symbolic dims
  std::vector<std::string> shapes;                    // --shapes' entries, "NAME:DxD"
  Options base = Options::from_env();
};

struct ValidateResult {
  std::string model;
  OptimizeLevel optimize = OptimizeLevel::Extended;
  int64_t calls = 0;
  size_t nodes_before = 0, nodes_after = 0;
  std::vector<PassRecord> passes;
  std::vector<TierResult> tiers;
  int checked = 0;  // tiers available and checked; none checked is no pass
  bool passed = false;
};

// The tiers `asked` names (interp, cpu, gpu or all), each marked available or not here.
// UsageError for another name.
std::vector<TierResult> tiers_to_check(const std::string& asked);

// Runs the validation (sessions of its own: the caller's are untouched). UsageError for a given
// input, dim or shape the model lacks; InvalidArgument for a given input of another dtype or shape.
ValidateResult validate_model(const ModelSource& model, const ValidateSpec& spec);

// "passes a, b" by pass: the passes that rewrote something, in their first run's order.
std::string rewrites_by_pass(const std::vector<PassRecord>& records);

// The result as `terrace validate --json` writes it.
Json validate_json(const ValidateResult& r);

}  // namespace terrace::cli
