// terrace explain: prints a model's graph (inputs, outputs, each node with its value shapes).
#include <algorithm>
#include <cstdio>
#include <map>
#include <filesystem>

#include "interp/onnx_import.h"
#include "tools/cli_util.h"

namespace terrace::cli {

namespace {
std::string value_str(const Graph& g, int id) {
  if (id < 0) return "-";
  const Value& v = g.values[size_t(id)];
  std::string s = v.name + ":";
  if (v.info.kind == ValueKind::Sequence) s += "seq<";
  if (v.info.kind == ValueKind::Optional) s += "opt<";
  s += v.info.dtype ? dtype_name(*v.info.dtype) : "?";
  if (v.info.shape) {
    s += "[";
    for (size_t d = 0; d < v.info.shape->size(); ++d) {
      int64_t n = (*v.info.shape)[d];
      const std::string& sym = d < v.info.dim_names.size() ? v.info.dim_names[d] : std::string();
      s += (d ? "," : "") + (n >= 0 ? std::to_string(n) : sym.empty() ? "?" : sym);
    }
    s += "]";
  }
  if (v.info.kind != ValueKind::Tensor && v.info.kind != ValueKind::Unknown) s += ">";
  return s;
}

void print_graph(const Graph& g, const std::string& indent) {
  for (int id : g.inputs) std::printf("%sinput  %s\n", indent.c_str(), value_str(g, id).c_str());
  std::printf("%s%zu initializers, %zu nodes\n", indent.c_str(), g.initializers.size(), g.nodes.size());
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const Node& node = g.nodes[n];
    std::string ins, outs;
    for (int v : node.inputs) ins += (ins.empty() ? "" : ", ") + value_str(g, v);
    for (int v : node.outputs) outs += (outs.empty() ? "" : ", ") + value_str(g, v);
    std::printf("%s%4zu  %-20s %s -> %s\n", indent.c_str(), n, node.describe().c_str(), ins.c_str(),
                outs.c_str());
    for (auto& [k, a] : node.attrs)
      if (a.kind == Attribute::Kind::Graph && a.g) {
        std::printf("%s      %s:\n", indent.c_str(), k.c_str());
        print_graph(*a.g, indent + "        ");
      }
  }
  for (int id : g.outputs) std::printf("%soutput %s\n", indent.c_str(), value_str(g, id).c_str());
}
}  // namespace

const CommandDef kExplainCommand{
    "explain",
    "MODEL",
    "Prints a model's graph (inputs, outputs, each node with its value shapes) and the execution plan: "
    "its regions and each graph break with the reason the tier-1 backend gives.",
    {
        {"--tier", "interp|cpu|gpu", "plan for this tier (default: the highest built)"},
    },
    1,
    1,
    "MODEL",
};

int cmd_explain(const ParsedArgs& args) {
  std::string model = args.operands[0];
  if (std::filesystem::is_directory(model)) model += "/model.onnx";
  Options options = Options::from_env();
  bool asked = tier_from_env();
  if (auto t = args.get("--tier")) options.max_tier = parse_tier(*t), asked = true;
  options.max_tier = effective_tier("explain", options.max_tier, asked);
  Model m = load_onnx_file(model);
  std::printf("model %s (ir %lld, opset %d)\n", model.c_str(), (long long)m.ir_version,
              m.graph->opset);
  print_graph(*m.graph, "  ");
  auto session = Session::from_graph(m.graph, options);
  const Graph& g = session->graph();  // the optimized graph the plan indexes (tiers/passes)
  if (g.nodes.size() != m.graph->nodes.size())
    std::printf("optimized: %zu nodes -> %zu (tiers/passes; TERRACE_OPTIMIZE=none to keep the model as loaded)\n",
                m.graph->nodes.size(), g.nodes.size());
  const Plan& plan = session->plan();
  std::printf("plan (up to tier %s): %zu regions, %zu graph breaks\n", tier_name(options.max_tier), plan.regions.size(),
              plan.steps.size() - plan.regions.size());
  for (const Step& s : plan.steps) {
    if (s.region >= 0) {
      const Region& r = plan.regions[size_t(s.region)];
      std::printf("  region %d: %zu ops [%s], %zu inputs, %zu outputs\n", r.id, r.nodes.size(),
                  r.ops().c_str(), r.inputs.size(), r.outputs.size());
    } else {
      std::printf("  break  %-24s %s\n", g.nodes[size_t(s.node)].describe().c_str(), s.reason.c_str());
    }
  }
  // The reasons, most frequent first: what keeps most of the graph in the interpreter.
  std::map<std::string, int> reasons;
  for (const Step& s : plan.steps)
    if (s.region < 0) ++reasons[s.reason];
  std::vector<std::pair<int, std::string>> ranked;
  for (auto& [reason, n] : reasons) ranked.emplace_back(-n, reason);
  std::sort(ranked.begin(), ranked.end());
  if (!ranked.empty()) std::printf("graph breaks by reason (as the backend gives it):\n");
  for (auto& [n, reason] : ranked) std::printf("  %4d  %s\n", -n, reason.c_str());
  return 0;
}

}  // namespace terrace::cli
