// terrace explain: prints a model's graph (inputs, outputs, each node with its value shapes).
#include <algorithm>
#include <cstdio>
#include <map>
#include <filesystem>

#include "interp/onnx_import.h"
#include "tools/cli_util.h"
#include "tools/json_out.h"

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

// A value as JSON: name, kind, dtype, shape (a symbolic dim by its name, an unknown one as null).
Json value_json(const Graph& g, int id) {
  if (id < 0) return nullptr;
  const Value& v = g.values[size_t(id)];
  Json j;
  j["name"] = v.name;
  j["kind"] = v.info.kind == ValueKind::Sequence ? "sequence" : v.info.kind == ValueKind::Optional ? "optional" : "tensor";
  j["dtype"] = v.info.dtype ? Json(dtype_name(*v.info.dtype)) : Json(nullptr);
  if (v.info.shape) {
    Json dims = Json::array();
    for (size_t d = 0; d < v.info.shape->size(); ++d) {
      int64_t n = (*v.info.shape)[d];
      const std::string& sym = d < v.info.dim_names.size() ? v.info.dim_names[d] : std::string();
      dims.push_back(n >= 0 ? Json(n) : sym.empty() ? Json(nullptr) : Json(sym));
    }
    j["shape"] = dims;
  } else {
    j["shape"] = nullptr;
  }
  return j;
}

Json graph_json(const Graph& g) {
  Json j;
  j["inputs"] = Json::array();
  for (int id : g.inputs) j["inputs"].push_back(value_json(g, id));
  j["outputs"] = Json::array();
  for (int id : g.outputs) j["outputs"].push_back(value_json(g, id));
  j["initializers"] = g.initializers.size();
  j["nodes"] = Json::array();
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const Node& node = g.nodes[n];
    Json jn;
    jn["index"] = n;
    jn["op"] = op_name(node.op);
    jn["name"] = node.name;
    jn["inputs"] = Json::array();
    for (int v : node.inputs) jn["inputs"].push_back(v < 0 ? Json(nullptr) : Json(g.values[size_t(v)].name));
    jn["outputs"] = Json::array();
    for (int v : node.outputs) jn["outputs"].push_back(v < 0 ? Json(nullptr) : Json(g.values[size_t(v)].name));
    for (auto& [k, a] : node.attrs)
      if (a.kind == Attribute::Kind::Graph && a.g) jn["subgraphs"][k] = graph_json(*a.g);
    j["nodes"].push_back(std::move(jn));
  }
  return j;
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
        {"--json", "FILE", "write the graph, the plan (regions, graph breaks with reasons) and the reasons' counts as JSON"},
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
  options.strict = false;  // explain shows the graph breaks that TERRACE_STRICT=1 would refuse
  const std::string json_path = args.get("--json").value_or("");
  if (args.get("--json") && json_path.empty()) throw UsageError{"--json needs a file name"};
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
  if (!json_path.empty()) {
    Json j;
    j["model"] = model;
    j["ir_version"] = m.ir_version;
    j["opset"] = m.graph->opset;
    j["graph"] = graph_json(*m.graph);
    j["optimized_nodes"] = g.nodes.size();
    j["tier"] = tier_name(options.max_tier);
    Json regions = Json::array(), breaks = Json::array(), steps = Json::array();
    for (const Step& s : plan.steps) {
      if (s.region >= 0) {
        const Region& r = plan.regions[size_t(s.region)];
        Json jr;
        jr["id"] = r.id;
        jr["ops"] = r.ops();
        jr["nodes"] = r.nodes;
        jr["inputs"] = Json::array();
        for (int v : r.inputs) jr["inputs"].push_back(g.values[size_t(v)].name);
        jr["outputs"] = Json::array();
        for (int v : r.outputs) jr["outputs"].push_back(g.values[size_t(v)].name);
        regions.push_back(std::move(jr));
        steps.push_back({{"region", r.id}});
      } else {
        const Node& node = g.nodes[size_t(s.node)];
        breaks.push_back({{"node", s.node}, {"op", op_name(node.op)}, {"name", node.describe()}, {"reason", s.reason}});
        steps.push_back({{"node", s.node}});
      }
    }
    j["plan"] = {{"steps", steps}, {"regions", regions}, {"graph_breaks", breaks}};
    Json by_reason = Json::array();
    for (auto& [n, reason] : ranked) by_reason.push_back({{"reason", reason}, {"count", -n}});
    j["graph_breaks_by_reason"] = by_reason;
    write_json_file(json_path, j);
  }
  return 0;
}

}  // namespace terrace::cli
