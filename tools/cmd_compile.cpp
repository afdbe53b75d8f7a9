// terrace compile: compiles every region of a model for one tier ahead of time, into the disk
// cache, so that a deployment can ship a warm cache. Tier 2 needs no GPU: its kernels are
// rendered in CUDA C and compiled by NVRTC for the asked architecture.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "interp/interpreter.h"
#include "interp/json.h"
#include "interp/onnx_import.h"
#include "kernels/lower.h"
#include "kernels/lower_op.h"
#include "kernels/render_c.h"
#include "kernels/split.h"
#include "tiers/backend.h"
#include "tools/cli_util.h"
#ifdef TERRACE_HAVE_CPU_JIT
#include "jit/code_cache.h"
#include "tiers/cpu_library.h"
#endif
#ifdef TERRACE_HAVE_CUDA
#include "jit/code_cache.h"
#include "jit/nvrtc.h"
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
        {"--json", "FILE", "write each region's id, ops, kernels and status as JSON"},
    },
    1,
    1,
    "MODEL",
    "Regions are the optimized graph's (TERRACE_OPTIMIZE), as tier 1 partitions it, specialised to the\n"
    "signatures a call with random inputs gives them (--dim sets symbolic dims). A region's status is\n"
    "\"compiled\", \"failed: <why>\" or \"skipped: <why>\" (a region the tier cannot compile yet, such as a\n"
    "library op on tier 2 before cuBLASLt/cuDNN). Tier 2 compiles each region as one NVRTC program; its\n"
    "cubin is stored under a key of the source, the arch, NVRTC's version and the options. The last line\n"
    "is `&&&& PASSED ...` (no region failed) or `&&&& FAILED ...`.\n",
};

namespace {

struct RegionResult {
  int id = 0;
  std::string ops;
  int64_t kernels = 0;
  std::string status;  // "compiled", "failed: ...", "skipped: ..."
  double ms = 0;
  bool cached = false;  // tier 2: the cubin was already in the cache
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

bool is_elementwise(const Node& n) { return std::strcmp(op_family(n.op), "elementwise") == 0; }

// True when every output of `node` is known when its region is compiled (tier 1 computes it
// then: kernels::known_at_compile_time); such nodes get no kernel.
bool evaluated_at_compile_time(const Graph& g, const Node& node) {
  bool any = false;
  for (int v : node.outputs) {
    if (v < 0) continue;
    if (!kernels::known_at_compile_time(g, v)) return false;
    any = true;
  }
  return any;
}

// The kernels of a region as tier 1 lowers them (tiers/cpu_backend.cpp, build_mixed): each run
// of elementwise nodes as fusion groups split by iteration domain, each other node its lower_op
// kernels, every signature from `frame`. Kernel names are region<id>_k<n>.
std::vector<kernels::LoweredFunc> region_kernels(const Graph& g, const Region& region, const Frame& frame) {
  auto sig_of = [&](int v) {
    const Tensor& t = frame.env[size_t(v)].tensor;
    return kernels::TensorSig{t.dtype(), t.shape()};
  };
  std::set<int> in_region(region.nodes.begin(), region.nodes.end());
  std::vector<kernels::LoweredFunc> out;
  const std::string prefix = "region" + std::to_string(region.id);
  auto add = [&](kernels::LoweredFunc f) {
    f.name = prefix + "_k" + std::to_string(out.size());
    out.push_back(std::move(f));
  };
  auto read_after = [&](int v, size_t k) {
    if (std::find(region.outputs.begin(), region.outputs.end(), v) != region.outputs.end()) return true;
    for (size_t i = k; i < region.nodes.size(); ++i)
      for (int u : g.nodes[size_t(region.nodes[i])].inputs)
        if (u == v) return true;
    return false;
  };
  size_t k = 0;
  while (k < region.nodes.size()) {
    const Node& first = g.nodes[size_t(region.nodes[k])];
    if (evaluated_at_compile_time(g, first)) {
      ++k;
      continue;
    }
    if (!is_elementwise(first)) {
      std::vector<kernels::OpInput> in;
      for (int v : first.inputs) {
        kernels::OpInput x;
        if (v < 0) {
          x.absent = true;
        } else {
          x.sig = sig_of(v);
          if (kernels::known_at_compile_time(g, v)) x.value = &frame.env[size_t(v)].tensor;
        }
        in.push_back(std::move(x));
      }
      kernels::OpKernels lowered = kernels::lower_op(first, in, prefix + "_n" + std::to_string(k));
      for (kernels::OpKernels::Call& c : lowered.calls) add(std::move(c.func));
      ++k;
      continue;
    }
    size_t end = k;
    while (end < region.nodes.size() && is_elementwise(g.nodes[size_t(region.nodes[end])]) &&
           (end == k || !evaluated_at_compile_time(g, g.nodes[size_t(region.nodes[end])])))
      ++end;
    kernels::FusionGroup group;
    group.name = prefix;
    std::map<int, kernels::Operand> where;
    std::vector<int> produced;
    for (size_t i = k; i < end; ++i) {
      const Node& node = g.nodes[size_t(region.nodes[i])];
      TERRACE_CHECK(node.outputs.size() == 1, NotImplemented, node.describe(), " has ", node.outputs.size(),
                    " outputs; tier 2 fuses single-output ops");
      kernels::FusedOp op;
      op.node = node;
      for (int v : node.inputs) {
        if (v < 0) {
          op.operands.push_back(kernels::Operand::absent());
          continue;
        }
        if (!where.count(v)) {
          group.inputs.push_back(sig_of(v));
          where[v] = kernels::Operand::input(int(group.inputs.size()) - 1);
        }
        op.operands.push_back(where[v]);
      }
      group.ops.push_back(std::move(op));
      const int index = int(group.ops.size()) - 1;
      group.ops.back().result = kernels::infer_result(group, index);
      where[node.outputs[0]] = kernels::Operand::result(index);
      produced.push_back(node.outputs[0]);
    }
    for (int v : produced)
      if (read_after(v, end)) group.outputs.push_back(where[v].index);
    k = end;
    if (group.outputs.empty()) continue;
    for (const kernels::KernelPart& p : kernels::split_by_domain(group).parts) add(kernels::lower(p.group));
  }
  return out;
}

// "" when tier 2 compiles every node of the region, else why it is skipped.
std::string gpu_skip_reason(const Graph& g, const Region& region) {
  for (int n : region.nodes) {
    const Node& node = g.nodes[size_t(n)];
#ifdef TERRACE_HAVE_CPU_JIT
    if (cpu_library::is_library_op(node.op))
      return std::string("tier 2 has no library path yet for ") + op_name(node.op) +
             " (cuBLASLt/cuDNN: issue 11, point 4)";
#endif
    (void)node;
  }
  return "";
}

#ifdef TERRACE_HAVE_CUDA
// The cubin's cache key: everything it depends on. Not the driver's version: NVRTC alone makes
// the cubin, which is what lets a machine without a GPU fill the cache.
std::string cubin_key(const std::string& source, const std::string& arch, const std::vector<std::string>& options) {
  std::string key = "terrace tier-2 cubin 1\nNVRTC " + jit::nvrtc_version() + "\n" + arch + "\n";
  for (const std::string& o : options) key += o + " ";
  return key + "\n" + source;
}
#endif

void compile_gpu_region(const Graph& g, const Region& region, const Frame& frame, const std::string& arch,
                        const std::filesystem::path& cache_dir, RegionResult& r) {
#ifdef TERRACE_HAVE_CUDA
  std::vector<kernels::LoweredFunc> fs = region_kernels(g, region, frame);
  r.kernels = int64_t(fs.size());
  if (fs.empty()) {
    r.status = "compiled";  // every value computed when the region is compiled: nothing to run
    return;
  }
  const std::string source =
      kernels::render_cuda_program(fs, "region " + std::to_string(region.id) + " (" + region.ops() + ")");
  const std::vector<std::string> options = {"-default-device"};
  jit::CodeCache cache(cache_dir);  // (TERRACE_HAVE_CUDA comes with jit/, and its cache)
  const std::string key = cubin_key(source, arch, options);
  if (cache.load(key)) {
    r.cached = true;
    r.status = "compiled";
    return;
  }
  std::vector<char> cubin = jit::nvrtc_compile(source, arch, "region" + std::to_string(region.id) + ".cu", options);
  cache.store(key, std::string_view(cubin.data(), cubin.size()));
  r.status = "compiled";
#else
  (void)g, (void)region, (void)frame, (void)arch, (void)cache_dir;
  r.status = "failed: this build has no tier 2 (built without TERRACE_WITH_CUDA)";
#endif
}

void write_json(const std::string& path, const std::string& model, const std::string& tier, const std::string& arch,
                const std::string& cache_dir, const std::vector<RegionResult>& results, bool passed) {
  JsonWriter j;
  j.begin_object().field("model", model).field("tier", tier);
  if (tier == "gpu") j.field("arch", arch);
  j.field("cache_dir", cache_dir).field("passed", passed);
  j.key("regions").begin_array();
  for (const RegionResult& r : results)
    j.begin_object()
        .field("id", r.id)
        .field("ops", r.ops)
        .field("kernels", r.kernels)
        .field("status", r.status)
        .field("ms", r.ms)
        .field("cached", r.cached)
        .end_object();
  j.end_array().end_object();
  write_text_file(path, j.str() + "\n");
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
  // Tier 1's partition: tier 2 compiles the same regions (library ones skipped until it has them).
  Options options = Options::from_env();
  options.max_tier = Tier::Cpu;
  auto session = Session::from_graph(m.graph, options);
  const Graph& g = session->graph();
  const Plan& plan = session->plan();
  if (highest_available_tier() < Tier::Cpu && plan.regions.empty())
    std::printf("note: this build has no tier 1, whose partition tier 2 follows: no regions\n");
  const Frame frame = evaluate_all(g, plan, random_inputs(g, 42, dims));

  std::unique_ptr<Backend> cpu;
  if (tier == "cpu") {
    cpu = make_cpu_backend(cache_dir.string());
    if (!cpu) {
      std::printf("tier cpu: %s\n", tier_unavailable_reason(Tier::Cpu).c_str());
      return 1;
    }
  }
#ifdef TERRACE_HAVE_CUDA
  if (tier == "gpu") {
    std::string why;
    if (!jit::nvrtc_available(&why)) {
      std::printf("tier gpu: NVRTC is not available: %s\n", why.c_str());
      return 1;
    }
  }
#endif

  std::printf("model %s: %zu regions, tier %s%s, cache %s\n", model.c_str(), plan.regions.size(), tier.c_str(),
              tier == "gpu" ? (" " + arch).c_str() : "", cache_dir.empty() ? "(none)" : cache_dir.c_str());
  std::vector<RegionResult> results;
  int failed = 0, skipped = 0;
  for (const Region& region : plan.regions) {
    RegionResult r;
    r.id = region.id;
    r.ops = region.ops();
    const auto start = std::chrono::steady_clock::now();
    try {
      if (tier == "cpu") {
        std::vector<Tensor> inputs;
        for (int v : region.inputs) inputs.push_back(frame.env[size_t(v)].tensor);
        std::unique_ptr<CompiledRegion> c = cpu->compile(g, region, inputs);
        for (size_t at = 0; (at = c->ir.find("kernel ", at)) != std::string::npos; at += 7)
          if (at == 0 || c->ir[at - 1] == '\n') ++r.kernels;
        r.status = "compiled";
      } else if (std::string why = gpu_skip_reason(g, region); !why.empty()) {
        r.status = "skipped: " + why;
      } else {
        compile_gpu_region(g, region, frame, arch, cache_dir, r);
      }
    } catch (const Error& e) {
      r.status = std::string("failed: ") + e.what();
    }
    r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    failed += r.status.rfind("failed", 0) == 0;
    skipped += r.status.rfind("skipped", 0) == 0;
    std::printf("  region %d [%s]: %lld kernels, %s (%.0f ms%s)\n", r.id, r.ops.c_str(), (long long)r.kernels,
                r.status.c_str(), r.ms, r.cached ? ", from the cache" : "");
    results.push_back(std::move(r));
  }
  const bool passed = failed == 0;
  std::printf("%zu regions: %zu compiled, %d skipped, %d failed\n", results.size(),
              results.size() - size_t(failed + skipped), skipped, failed);
  if (auto path = args.get("--json")) write_json(*path, model, tier, arch, cache_dir.string(), results, passed);
  return passed ? 0 : 1;
}

}  // namespace terrace::cli
