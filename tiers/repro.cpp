// Repro dumps for failed validations.
#include "tiers/repro.h"

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "interp/log.h"
#include "interp/onnx_import.h"

namespace terrace {

std::string dump_dir() {
  const char* d = std::getenv("TERRACE_DUMP_DIR");
  return d && *d ? d : "";
}

std::string dump_repro(const Graph& graph, const Region& region, const std::vector<Tensor>& inputs,
                       const CompiledRegion* code, const std::string& why) {
  std::string root = dump_dir();
  if (root.empty()) return "";
  static std::atomic<int> counter{0};
  namespace fs = std::filesystem;
  fs::path dir = fs::path(root) / ("repro-region" + std::to_string(region.id) + "-" +
                                    std::to_string(counter++));
  try {
    fs::create_directories(dir);
    std::ofstream(dir / "reason.txt") << why << "\n";
    std::ofstream nodes(dir / "region.txt");
    nodes << "region " << region.id << ": " << region.ops() << "\n";
    for (size_t i = 0; i < region.inputs.size(); ++i)
      nodes << "input " << i << ": " << graph.values[size_t(region.inputs[i])].name << "\n";
    for (int n : region.nodes) {
      const Node& node = graph.nodes[size_t(n)];
      nodes << node.describe() << ":";
      for (int v : node.inputs) nodes << " " << (v >= 0 ? graph.values[size_t(v)].name : "-");
      nodes << " ->";
      for (int v : node.outputs) nodes << " " << (v >= 0 ? graph.values[size_t(v)].name : "-");
      nodes << "\n";
    }
    for (size_t i = 0; i < region.outputs.size(); ++i)
      nodes << "output " << i << ": " << graph.values[size_t(region.outputs[i])].name << "\n";
    for (size_t i = 0; i < inputs.size(); ++i)
      save_tensor_pb(inputs[i], (dir / ("input_" + std::to_string(i) + ".pb")).string(),
                     graph.values[size_t(region.inputs[i])].name);
    if (code) {
      std::ofstream(dir / "kernel_ir.txt") << code->ir;
      std::ofstream(dir / "kernel.cpp") << code->source;
    }
  } catch (const std::exception& e) {
    log(LogLevel::Warn, "could not write repro to ", dir.string(), ": ", e.what());
    return "";
  }
  return dir.string();
}

}  // namespace terrace
