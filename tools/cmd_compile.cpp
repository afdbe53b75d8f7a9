// terrace compile: compiles every region of a model for one tier ahead of time, into the disk
// cache, so that a deployment can ship a warm cache. Tier 2 needs no GPU: its kernels are
// rendered in CUDA C and compiled by NVRTC for the asked architecture.
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "interp/interpreter.h"
#include "interp/onnx_import.h"
#include "kernels/render_c.h"
#include "tiers/backend.h"
#include "tiers/cpu/cpu_backend.h"
#include "tiers/gpu/gpu_backend.h"
#include "tiers/region_lowering.h"
#include "tools/cli_util.h"
#include "tools/json_out.h"
#ifdef TERRACE_HAVE_CPU_JIT
#include "jit/code_cache.h"
#endif
#ifdef TERRACE_HAVE_CUDA
#include "jit/code_cache.h"
#include "jit/cuda/nvrtc.h"
#endif

namespace terrace::cli {

const CommandDef kCompileCommand{
    "compile",
    "MODEL",
    "Compiles every region of the model for one tier into the disk cache, without running it: tier 2's "
    "kernels are rendered in CUDA C and compiled by NVRTC for --arch (no GPU needed), tier 1's through "
    "its Clang/ORC backend.",
    {
        {"--tier", "gpu|cpu", "the tier to compile for (default gpu)"},
        {"--arch", "sm_XY", "tier 2's GPU architecture (default sm_90, the H100)"},
        {"--cache-dir", "DIR", "the disk cache to fill (default $TERRACE_CACHE_DIR, else ~/.cache/terrace)"},
        {"--dim", "SYM=N", "the symbolic dim SYM of the inputs compiled for (default 1)", true},
        kShapesOption,
        {"--json", "FILE", "write each region's id, ops, kernels and status as JSON"},
    },
    1,
    1,
    "MODEL",
    "Regions are the optimized graph's (TERRACE_OPTIMIZE), as tier 1 partitions it, specialised to the\n"
    "signatures a call with random inputs gives them (--dim sets symbolic dims). A region's status is\n"
    "\"compiled\", \"failed: <why>\" or \"skipped: <why>\" (a region the tier cannot compile yet, such as a\n"
    "convolution on tier 2 before cuDNN). Tier 2 compiles each region as one NVRTC program: the source its\n"
    "backend compiles, its cubin stored under the backend's key (source, arch, NVRTC's version, options);\n"
    "where the backend does not take a region yet, the kernels every tier lowers it to are compiled as a\n"
    "check (\"used_by_tier2\": false in the JSON, with the backend's reason). The last line is\n"
    "`&&&& PASSED ...` (no region failed) or `&&&& FAILED ...`.\n",
};

namespace {

struct RegionResult {
  int id = 0;
  std::string ops;
  int64_t kernels = 0;
  std::string status;  // "compiled", "failed: ...", "skipped: ..."
  double ms = 0;
  bool cached = false;         // tier 2: the cubin was already in the cache
  bool used_by_tier2 = true;   // tier 2: false where its backend does not take the region (yet)
  std::string note;            // why not
};

// Every value of the graph for one call: the interpreter over the plan's order, nothing released.
Frame evaluate_all(const Graph& g, const Plan& plan, const NamedTensors& inputs) {
  std::vector<RValue> in;
  for (int v : g.inputs) {
    const std::string& name = g.values[size_t(v)].name;
    for (auto& [n, t] : inputs)
      if (n == name) in.emplace_back(t);
  }
  Frame frame = make_frame(g, std::move(in), nullptr);
  for (const Step& s : plan.steps) {
    if (s.region < 0) {
      run_node(frame, s.node);
      continue;
    }
    for (int n : plan.regions[size_t(s.region)].nodes) run_node(frame, n);
  }
  return frame;
}

// Tier 2's program for the region: the source its backend compiles (tiers/gpu/gpu_backend.h), so that
// the cache entry is the one a session loads; where the backend does not take the region yet, the
// kernels every tier lowers it to (tiers/region_lowering.h), rendered as one program and checked
// (used_by_tier2 false); a region neither takes is skipped with the backend's reason.
void compile_gpu_region(const Graph& g, const Region& region, const std::vector<Tensor>& inputs,
                        const std::string& arch, const std::filesystem::path& cache_dir, RegionResult& r) {
#ifdef TERRACE_HAVE_CUDA
  std::string source;
  try {
    GpuRegionCode code = render_gpu_region(g, region, inputs);
    r.kernels = int64_t(code.kernels.size());
    source = std::move(code.source);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::CompileFailed) throw;
    for (int n : region.nodes)
      if (!can_lower_node(g, g.nodes[size_t(n)]).empty()) {
        r.status = "skipped: " + e.message();
        r.used_by_tier2 = false;
        return;
      }
    LoweredRegion lowered = lower_region(g, region, inputs);
    std::vector<kernels::LoweredFunc> fs;
    for (const LoweredStep& step : lowered.steps)
      if (step.kind == LoweredStep::Kind::Kernel) fs.push_back(step.func);
    r.kernels = int64_t(fs.size());
    r.used_by_tier2 = false;
    r.note = e.message();
    if (!fs.empty())
      source = kernels::render_cuda_program(fs, "region " + std::to_string(region.id) + " (" + region.ops() + ")");
  }
  r.status = "compiled";
  if (r.kernels == 0) return;  // nothing generated (values computed at compile time, library calls)
  jit::CodeCache cache(cache_dir);  // (TERRACE_HAVE_CUDA comes with jit/, and its cache)
  compile_gpu_cubin(source, arch, "region" + std::to_string(region.id) + ".cu", cache, &r.cached);
#else
  (void)g, (void)region, (void)inputs, (void)arch, (void)cache_dir;
  r.status = "failed: this build has no tier 2 (built without TERRACE_WITH_CUDA)";
#endif
}

// The tier's compiler, made for --tier cpu, and a writable cache (filling it is the command's
// purpose: one it cannot write fails it before any compile); or the line saying why not.
std::string prepare(const std::string& tier, const std::filesystem::path& cache_dir, std::unique_ptr<Backend>& cpu) {
  if (tier == "cpu") {
    cpu = make_cpu_backend(cache_dir.string());
    if (!cpu) return "tier cpu: " + tier_unavailable_reason(Tier::Cpu);
  }
#ifdef TERRACE_HAVE_CUDA
  if (tier == "gpu") {
    std::string why;
    if (!jit::nvrtc_available(&why)) return "tier gpu: NVRTC is not available: " + why;
  }
#endif
#ifdef TERRACE_HAVE_CPU_JIT
  if (!cache_dir.empty())
    if (std::string why = jit::CodeCache(cache_dir).writable(); !why.empty()) return "the cache cannot be written: " + why;
#endif
  return "";
}

// One region compiled for tier 1 (`cpu`) or else tier 2, on the inputs `frame` holds for it.
RegionResult compile_region(const Graph& g, const Region& region, const Frame& frame, Backend* cpu,
                            const std::string& arch, const std::filesystem::path& cache_dir) {
  RegionResult r;
  r.id = region.id;
  r.ops = region.ops();
  const auto start = std::chrono::steady_clock::now();
  try {
    std::vector<Tensor> inputs;
    for (int v : region.inputs) inputs.push_back(frame.env[size_t(v)].tensor);
    if (cpu) {
      std::unique_ptr<CompiledRegion> c = cpu->compile(g, region, inputs);
      for (size_t at = 0; (at = c->ir.find("kernel ", at)) != std::string::npos; at += 7)
        if (at == 0 || c->ir[at - 1] == '\n') ++r.kernels;
      r.status = "compiled";
    } else {
      compile_gpu_region(g, region, inputs, arch, cache_dir, r);
    }
  } catch (const Error& e) {
    r.status = std::string("failed: ") + e.what();
  }
  r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return r;
}

void write_json(const std::string& path, const std::string& model, const std::string& tier, const std::string& arch,
                const std::string& cache_dir, const std::vector<RegionResult>& results, bool passed) {
  Json j;
  j["model"] = model;
  j["tier"] = tier;
  if (tier == "gpu") j["arch"] = arch;
  j["cache_dir"] = cache_dir;
  j["passed"] = passed;
  j["regions"] = Json::array();
  for (const RegionResult& r : results)
    j["regions"].push_back({{"id", r.id}, {"ops", r.ops}, {"kernels", r.kernels}, {"status", r.status}, {"ms", r.ms},
                            {"cached", r.cached}, {"used_by_tier2", r.used_by_tier2}, {"note", r.note}});
  write_json_file(path, j);
}

}  // namespace

int cmd_compile(const ParsedArgs& args) {
  std::string model = args.operands[0];
  if (std::filesystem::is_directory(model)) model += "/model.onnx";
  const std::string tier = args.get("--tier").value_or("gpu");
  if (tier != "gpu" && tier != "cpu") throw UsageError{"--tier: expected gpu or cpu, got '" + tier + "'"};
  const std::string arch = args.get("--arch").value_or("sm_90");
  if (args.has("--arch") && tier != "gpu") throw UsageError{"--arch is tier 2's: it needs --tier gpu"};
  if (arch.rfind("sm_", 0) != 0 || arch.size() < 5)
    throw UsageError{"--arch: expected a real architecture such as sm_90, got '" + arch + "'"};
  const std::vector<std::pair<std::string, int64_t>> dims = [&] {
    std::vector<std::pair<std::string, int64_t>> d;
    for (auto& [name, value] : assignments(args, "--dim")) d.emplace_back(name, parse_count("--dim", value));
    return d;
  }();
#ifdef TERRACE_HAVE_CPU_JIT
  const std::filesystem::path cache_dir =
      args.has("--cache-dir") ? std::filesystem::path(*args.get("--cache-dir")) : jit::CodeCache::default_dir();
#else
  const std::filesystem::path cache_dir = args.get("--cache-dir").value_or("");
#endif

  Model m = load_onnx_file(model);
  check_dim_names(*m.graph, dims);
  // The partition a session makes on a machine with the tier asked for: tier 1's, and with --tier
  // gpu one where tier 2's regions stand alone where it fuses less (Options::plan_for).
  Options options = Options::from_env();
  options.max_tier = Tier::Cpu;
  options.plan_for = tier == "gpu" ? Tier::Gpu : Tier::Interp;
  auto session = Session::from_graph(m.graph, options);
  const Graph& g = session->graph();
  const Plan& plan = session->plan();
  if (!tier_available(Tier::Cpu) && plan.regions.empty())
    std::printf("note: this build has no tier 1, whose partition tier 2 follows: no regions\n");
  const Frame frame = evaluate_all(g, plan, random_inputs(g, 42, dims, parse_shapes(args, g)));

  std::unique_ptr<Backend> cpu;
  if (std::string why = prepare(tier, cache_dir, cpu); !why.empty()) {
    std::printf("%s\n", why.c_str());
    return 1;
  }
  std::printf("model %s: %zu regions, tier %s%s, cache %s\n", model.c_str(), plan.regions.size(), tier.c_str(),
              tier == "gpu" ? (" " + arch).c_str() : "", cache_dir.empty() ? "(none)" : cache_dir.c_str());
  std::vector<RegionResult> results;
  int failed = 0, skipped = 0;
  for (const Region& region : plan.regions) {
    RegionResult r = compile_region(g, region, frame, cpu.get(), arch, cache_dir);
    failed += r.status.rfind("failed", 0) == 0;
    skipped += r.status.rfind("skipped", 0) == 0;
    std::printf("  region %d [%s]: %lld kernels, %s (%.0f ms%s)%s%s\n", r.id, r.ops.c_str(), (long long)r.kernels,
                r.status.c_str(), r.ms, r.cached ? ", from the cache" : "",
                r.used_by_tier2 ? "" : "; checked, not yet run by tier 2: ", r.used_by_tier2 ? "" : r.note.c_str());
    results.push_back(std::move(r));
  }
  const bool passed = failed == 0;
  std::printf("%zu regions: %zu compiled, %d skipped, %d failed\n", results.size(),
              results.size() - size_t(failed + skipped), skipped, failed);
  if (results.empty()) std::printf("nothing to compile: the model has no region for tier %s\n", tier.c_str());
  else if (size_t(skipped) == results.size())
    std::printf("nothing was compiled: every region was skipped (above), so the cache holds nothing new\n");
  if (auto path = args.get("--json")) write_json(*path, model, tier, arch, cache_dir.string(), results, passed);
  return passed ? 0 : 1;
}

}  // namespace terrace::cli
