// The ladder of compiled tiers a session climbs, and the partition it makes: the one place that
// names the built-in tiers (adding one is a line in ladder.cpp).
#pragma once
#include <memory>
#include <vector>

#include "interp/graph.h"
#include "tiers/backend.h"
#include "tiers/options.h"
#include "tiers/partition.h"

namespace terrace {

// Lowest first: tier 1 where Options::max_tier allows it; tier 2 where it allows that too and
// there is a GPU (its absence is said once per process); then Options::extra_tiers. Empty: the
// interpreter alone.
std::vector<std::unique_ptr<Backend>> make_ladder(const Options& options);

// The graph's regions for `ladder`: its first tier's (can_compile, alone, absorbs), less what a
// higher tier would not run together (Backend::fuses); Options::plan_for_gpu adds tier 2's rule
// where there is no GPU (terrace compile --tier gpu). Without a compiled tier, every node is a
// graph break.
Plan partition_for(const Graph& graph, const std::vector<std::unique_ptr<Backend>>& ladder, const Options& options);

}  // namespace terrace
