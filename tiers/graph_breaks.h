// Graph breaks at load: the graph_breaks log topic and Options::strict (torch.compile's fullgraph).
#pragma once
#include <string>
#include <vector>

#include "interp/graph.h"
#include "tiers/options.h"
#include "tiers/partition.h"

namespace terrace {

// One line per graph break of `plan`: "node 3 CumSum 'c': <the backend's reason>".
std::vector<std::string> graph_break_lines(const Graph& graph, const Plan& plan);

// Logs each graph break under the graph_breaks topic (TERRACE_LOG=graph_breaks), and with
// options.strict throws Error(NotImplemented) listing every one with its reason.
void check_graph_breaks(const Graph& graph, const Plan& plan, const Options& options);

}  // namespace terrace
