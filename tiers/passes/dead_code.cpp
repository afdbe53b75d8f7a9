// Dead-code elimination: nodes whose results nobody reads (no node, no body, no graph output),
// last to first so that a chain of them goes at once, then values and initializers nothing refers
// to (a folded-away weight, a Constant's old value). Values are renumbered; names are kept.
#include "tiers/passes/graph_edit.h"
#include "tiers/passes/passes.h"

namespace terrace::passes {

int eliminate_dead_code(Graph& g, const PassConfig&) { return remove_nodes(g, {}); }

}  // namespace terrace::passes
