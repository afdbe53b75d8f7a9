// Repro dumps for failed validations.
#include "tiers/repro.h"

#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "interp/compare.h"
#include "interp/log.h"
#include "interp/onnx_export.h"
#include "interp/onnx_import.h"

namespace terrace {

std::string dump_dir() {
  const char* d = std::getenv("TERRACE_DUMP_DIR");
  return d && *d ? d : "";
}

namespace {
// A graph name as part of a folder name: letters, digits, '-' and '_' kept, the rest '_'.
std::string folder_safe(const std::string& name) {
  std::string out;
  for (char c : name.substr(0, 40)) out += std::isalnum(static_cast<unsigned char>(c)) || c == '-' ? c : '_';
  return out.empty() ? "graph" : out;
}
}  // namespace

std::string dump_repro(const Graph& graph, const Region& region, const std::vector<Tensor>& inputs,
                       const std::vector<Tensor>& expected, const std::vector<Tensor>& allowance,
                       const CompiledRegion* code, const std::string& why) {
  std::string root = dump_dir();
  if (root.empty()) return "";
  static std::atomic<int> counter{0};
  namespace fs = std::filesystem;
  fs::path dir = fs::path(root) / ("repro-" + folder_safe(graph.name) + "-region" + std::to_string(region.id) + "-" +
                                    std::to_string(::getpid()) + "-" + std::to_string(counter++));
  try {
    fs::create_directories(dir / "test_data_set_0");
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
    // Initializers are part of the exported model; the other inputs are test data.
    int k = 0;
    for (size_t i = 0; i < inputs.size(); ++i)
      if (!graph.initializers.count(region.inputs[i]))
        save_tensor_pb(inputs[i], (dir / "test_data_set_0" / ("input_" + std::to_string(k++) + ".pb")).string(),
                       graph.values[size_t(region.inputs[i])].name);
    std::ofstream tolerance(dir / "tolerance.txt");
    tolerance << "# output rtol atol: what this region was judged by (plus allowance_N.pb where present)\n";
    for (size_t i = 0; i < expected.size(); ++i) {
      save_tensor_pb(expected[i], (dir / "test_data_set_0" / ("output_" + std::to_string(i) + ".pb")).string(),
                     graph.values[size_t(region.outputs[i])].name);
      const Tolerance tol = Tolerance::for_dtype(expected[i].dtype());
      tolerance << i << " " << tol.rtol << " " << tol.atol << "\n";
      if (i < allowance.size() && allowance[i].defined())
        save_tensor_pb(allowance[i], (dir / "test_data_set_0" / ("allowance_" + std::to_string(i) + ".pb")).string(),
                       "allowance_" + std::to_string(i));
    }
    std::ofstream(dir / "model.onnx", std::ios::binary)
        << export_onnx(graph, region.nodes, region.inputs, inputs, region.outputs, expected);
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
