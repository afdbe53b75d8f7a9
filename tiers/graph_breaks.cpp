// Graph breaks at load: logged by topic; fatal with Options::strict.
#include "tiers/graph_breaks.h"

#include "interp/error.h"
#include "interp/log.h"

namespace terrace {

std::vector<std::string> graph_break_lines(const Graph& graph, const Plan& plan) {
  std::vector<std::string> lines;
  for (const Step& s : plan.steps)
    if (s.region < 0)
      lines.push_back("node " + std::to_string(s.node) + " " + graph.nodes[size_t(s.node)].describe() + ": " +
                      s.reason);
  return lines;
}

void check_graph_breaks(const Graph& graph, const Plan& plan, const Options& options) {
  if (!options.strict && !log_topic_enabled(LogTopic::GraphBreaks)) return;
  const std::vector<std::string> lines = graph_break_lines(graph, plan);
  if (log_topic_enabled(LogTopic::GraphBreaks))
    for (const std::string& l : lines) log_topic_line(LogTopic::GraphBreaks, l);
  if (!options.strict || lines.empty()) return;
  std::string list;
  for (const std::string& l : lines) list += "\n  " + l;
  fail(ErrorCode::NotImplemented, "strict: ", lines.size(), " graph break", lines.size() == 1 ? "" : "s",
       " (nodes no compiled tier takes, up to tier ", tier_name(options.max_tier),
       "); without strict they run in the interpreter:", list);
}

}  // namespace terrace
