// The ladder of compiled tiers a session climbs, and the partition it makes: the one place that
// names the built-in tiers (adding one is its folder under tiers/ and a line in ladder.cpp).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "interp/graph.h"
#include "tiers/backend.h"
#include "tiers/options.h"
#include "tiers/partition.h"

namespace terrace {

// A built-in compiled tier, as registered in ladder.cpp.
struct TierEntry {
  Tier tier;
  // Its backend, or nullptr with the reason in `why` where this build or machine cannot run it.
  std::unique_ptr<Backend> (*make)(const Options& options, std::string* why);
  // Its Backend::fuses, known without its device: partition_for applies it for a tier planned for
  // (Options::plan_for) but absent. nullptr: it fuses whatever the first tier does.
  bool (*fuses)(const Node& last, const Node& next);
  // Its Backend::configure_passes, likewise (nullptr: none).
  void (*configure)(passes::PassConfig& config);
};
// Lowest first.
const std::vector<TierEntry>& builtin_tiers();

// Lowest first: each built-in tier up to Options::max_tier, as long as each can run here (the first
// that cannot ends the climb, its reason said once per process); then Options::extra_tiers. Empty:
// the interpreter alone.
std::vector<std::unique_ptr<Backend>> make_ladder(const Options& options);

// The graph passes' settings for `ladder`: each tier's Backend::configure_passes, and the entry's
// of each built-in tier up to Options::plan_for that is not in the ladder.
passes::PassConfig pass_config_for(const std::vector<std::unique_ptr<Backend>>& ladder, const Options& options);

// The graph's regions for `ladder`: its first tier's (can_compile, alone, absorbs), less what a
// higher tier would not run together (Backend::fuses, and the fusion rule of each built-in tier up
// to Options::plan_for that is not in the ladder). Without a compiled tier, every node is a graph
// break.
Plan partition_for(const Graph& graph, const std::vector<std::unique_ptr<Backend>>& ladder, const Options& options);

}  // namespace terrace
