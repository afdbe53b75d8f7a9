// The graph optimizer: the passes of tiers/passes/ in order, run by Session::from_graph before
// partitioning (Options::optimize). The optimized graph computes what the original computes
// (exactly at Basic; within ARCHITECTURE.md's tolerances at Extended), with the same inputs and
// outputs (names, order, dtypes). Only the top-level graph is optimized: If/Loop/Scan bodies are
// kept as they are, and a value a body reads by name is never renamed or removed.
//
// With TERRACE_DUMP_DIR set, the graph is written after each pass to
// $TERRACE_DUMP_DIR/passes/NN_<pass>.txt (00_input.txt: before any), in graph_text's form; with
// TERRACE_LOG=debug each pass logs what it changed and how long it took.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "interp/graph.h"
#include "tiers/options.h"
#include "tiers/passes/passes.h"

namespace terrace {

const char* optimize_level_name(OptimizeLevel level);  // "none", "basic", "extended"

struct PassRecord {
  std::string pass;
  int rewrites = 0;
  size_t nodes_after = 0;
  double ms = 0;
};

// Returns the optimized graph (`graph` itself when the level is None). `records`, when given,
// receives one entry per pass run.
std::shared_ptr<const Graph> optimize_graph(std::shared_ptr<const Graph> graph, OptimizeLevel level,
                                            const passes::PassConfig& config = {},
                                            std::vector<PassRecord>* records = nullptr);

}  // namespace terrace
