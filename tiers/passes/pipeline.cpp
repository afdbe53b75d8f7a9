// The graph optimizer's pipeline (pipeline.h): which passes run at which level, in which order.
//
// Basic (answers bitwise those of the original graph): constant folding, shape folding and Reshape
// targets on symbolic dims, in turn until none finds more (a folded Shape feeds a Gather that
// constant folding takes, whose result may feed a Reshape target ...), with shape inference after
// each round (a Reshape given a constant target gives its result a shape, whose Shape the next
// round folds), no-op elimination, constant folding once more for what removing no-ops exposed,
// then dead code. Extended adds BatchNormalization folding (rounding
// changes only) after no-op elimination, so that a Dropout or Identity between a Conv and its BN
// is gone first, then the pattern fusions (decomposed LayerNorm and GELU; attention blocks with
// PassConfig::fuse_attention), which need the folded constants (an exporter's Constant nodes are
// initializers by then). Last, at every level, shape
// inference gives the values whose shapes folding made static their shapes, for the partitioner
// and terrace explain.
//
// TERRACE_FAULT=wrong-pass:NAME makes pass NAME rewrite wrongly (PassConfig::deliberately_wrong), so
// that terrace validate's failure is tested on a real model.
#include "tiers/passes/pipeline.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "interp/log.h"
#include "tiers/passes/graph_edit.h"
#include "tiers/repro.h"

namespace terrace {

const char* optimize_level_name(OptimizeLevel level) {
  switch (level) {
    case OptimizeLevel::None: return "none";
    case OptimizeLevel::Basic: return "basic";
    case OptimizeLevel::Extended: return "extended";
  }
  return "?";
}

namespace {

// $TERRACE_DUMP_DIR/passes, created; empty when dumps are off or the folder cannot be made.
std::filesystem::path passes_dump_dir() {
  const std::string root = dump_dir();  // tiers/repro.h: TERRACE_DUMP_DIR, or "" when off
  if (root.empty()) return {};
  std::filesystem::path dir = std::filesystem::path(root) / "passes";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    log(LogLevel::Warn, "passes: cannot create ", dir.string(), ": ", ec.message());
    return {};
  }
  return dir;
}

void dump(const std::filesystem::path& dir, int index, const std::string& pass, const Graph& g) {
  if (dir.empty()) return;
  char prefix[16];
  std::snprintf(prefix, sizeof prefix, "%02d_", index);
  std::ofstream out(dir / (prefix + pass + ".txt"));
  out << passes::graph_text(g);
}

}  // namespace

std::shared_ptr<const Graph> optimize_graph(std::shared_ptr<const Graph> graph, OptimizeLevel level,
                                            const passes::PassConfig& config,
                                            std::vector<PassRecord>* records) {
  if (level == OptimizeLevel::None || !graph) return graph;
  auto t_start = std::chrono::steady_clock::now();
  auto g = std::make_shared<Graph>(*graph);  // tensors share storage: a copy of the structure only
  const size_t nodes_before = g->nodes.size(), inits_before = g->initializers.size();
  const std::filesystem::path dir = passes_dump_dir();
  int step = 0;
  dump(dir, step++, "input", *g);
  auto run = [&](const char* name, int (*pass)(Graph&, const passes::PassConfig&)) {
    const size_t nodes = g->nodes.size(), inits = g->initializers.size();
    auto t0 = std::chrono::steady_clock::now();
    passes::PassConfig pass_config = config;
    pass_config.deliberately_wrong = fault_enabled(std::string("wrong-pass:") + name);
    int rewrites = pass(*g, pass_config);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    log(LogLevel::Debug, "passes: ", name, ": ", rewrites, " rewrites, nodes ", nodes, " -> ", g->nodes.size(),
        ", initializers ", inits, " -> ", g->initializers.size(), " (", ms, " ms)");
    dump(dir, step++, name, *g);
    if (records) records->push_back({name, rewrites, g->nodes.size(), ms});
    return rewrites;
  };
  run("constant_folding", passes::fold_constants);
  // A transformer takes a round per layer: a layer's Reshape targets fold once the layer before
  // has shapes, which its own folded targets give it: two rounds a layer (BERT-base: 25 rounds, the
  // whole pipeline 0.11 s on 2 cores).
  for (int round = 0; round < 64; ++round) {
    const int folded = run("shape_folding", passes::fold_shapes) + run("constant_folding", passes::fold_constants) +
                       run("reshape_targets", passes::fold_reshape_targets);
    if (folded == 0) break;
    run("shape_inference", passes::infer_static_shapes);  // the next round folds on what this one made known
  }
  if (run("noop_elimination", passes::eliminate_noops) > 0) run("constant_folding", passes::fold_constants);
  if (level >= OptimizeLevel::Extended) {
    run("batchnorm_folding", passes::fold_batchnorm);
    run("layernorm_fusion", passes::fuse_layernorm);
    run("gelu_fusion", passes::fuse_gelu);
    run("hardswish_fusion", passes::fuse_hardswish);
    if (config.fuse_attention) run("attention_fusion", passes::fuse_attention);
    else if (log_enabled(LogLevel::Debug))
      log(LogLevel::Debug, "passes: attention: ", passes::find_attention(*g).size(),
          " blocks found (MatMul, scale, mask, Softmax, MatMul), left as they are: no tier compiles Attention yet "
          "(PassConfig::fuse_attention)");
  }
  run("dead_code", passes::eliminate_dead_code);
  run("shape_inference", passes::infer_static_shapes);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_start).count();
  log(LogLevel::Debug, "passes: level ", optimize_level_name(level), ": nodes ", nodes_before, " -> ",
      g->nodes.size(), ", initializers ", inits_before, " -> ", g->initializers.size(), " (", ms, " ms)");
  return g;
}

}  // namespace terrace
