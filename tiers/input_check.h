// Checks a run() call's inputs against the graph's declared inputs.
#pragma once
#include <vector>

#include "interp/graph.h"
#include "tiers/session.h"

namespace terrace {

// Matches named inputs to graph inputs (in graph order), checking count, names, dtypes, ranks and
// static dims; InvalidArgument naming the input on any mismatch.
std::vector<RValue> bind_inputs(const Graph& graph, const NamedTensors& inputs);

}  // namespace terrace
