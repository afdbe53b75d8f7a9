// terrace validate: the optimized model on each tier against the unoptimized graph on the
// interpreter (DESIGN.md, principle 1: every graph rewrite is judged against the unrewritten graph).
#include <cstdio>
#include <filesystem>
#include <map>

#include "tools/cli_util.h"
#include "tools/json_out.h"
#include "tools/tensor_files.h"
#include "tools/validate.h"

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

}  // namespace

int cmd_validate(const ParsedArgs& args) {
  ModelSource model{args.operands[0]};
  if (std::filesystem::is_directory(model.path)) model.path += "/model.onnx";  // a zoo folder
  const std::string json_path = args.get("--json").value_or("");
  if (args.get("--json") && json_path.empty()) throw UsageError{"--json needs a file name"};
  ValidateSpec spec;
  for (auto& [n, v] : assignments(args, "--dim")) spec.dims.emplace_back(n, parse_count("--dim " + n, v));
  if (!spec.dims.empty() && args.has("--input") && !args.has("--random-inputs"))
    throw UsageError{"--dim sets the random inputs' dims: it needs --random-inputs"};
  spec.tiers = args.get("--tier").value_or("all");
  tiers_to_check(spec.tiers);  // a usage error before the model loads
  if (auto v = args.get("--calls")) spec.calls = parse_positive("--calls", *v);
  spec.random_others = args.has("--random-inputs");
  spec.shapes = args.all("--shapes");
  model.loaded = model.graph();
  check_dim_names(*model.loaded, spec.dims);
  parse_shapes(spec.shapes, *model.loaded);
  spec.given = input_files(args, *model.loaded);

  const ValidateResult r = validate_model(model, spec);
  std::printf("validate %s: optimize %s (%zu nodes -> %zu), %lld calls per tier, against the unoptimized graph on "
              "the interpreter\n",
              r.model.c_str(), optimize_level_name(r.optimize), r.nodes_before, r.nodes_after, (long long)r.calls);
  if (const std::string rewrites = rewrites_by_pass(r.passes); !rewrites.empty()) std::printf("rewrites by pass: %s\n", rewrites.c_str());
  for (const TierResult& t : r.tiers) print_tier(t);
  if (r.checked == 0) std::printf("no tier asked for is available: nothing validated\n");
  if (!json_path.empty()) write_json_file(json_path, validate_json(r));
  return r.passed ? 0 : 1;
}

}  // namespace terrace::cli
