// make_ladder and partition_for (tiers/ladder.h).
#include "tiers/ladder.h"

#include <algorithm>
#include <mutex>
#include <string>

#include "interp/error.h"
#include "interp/log.h"
#include "tiers/gpu_backend.h"

namespace terrace {

std::vector<std::unique_ptr<Backend>> make_ladder(const Options& options) {
  std::vector<std::unique_ptr<Backend>> ladder;
  if (options.max_tier >= Tier::Cpu)
    if (auto cpu = make_cpu_backend(options.cache_dir)) ladder.push_back(std::move(cpu));
  if (options.max_tier >= Tier::Gpu && !ladder.empty()) {
    std::string why;
    if (auto gpu = make_gpu_backend(options.cache_dir, &why)) ladder.push_back(std::move(gpu));
    else {
      static std::once_flag said;
      std::call_once(said, [&] { log(LogLevel::Info, "tier 2 unavailable: ", why, "; regions stay on tier 1"); });
    }
  }
  if (ladder.empty()) return ladder;  // a plug-in tier climbs from the built-in ones
  for (const auto& make : options.extra_tiers) {
    ladder.push_back(make());
    TERRACE_CHECK(ladder.back() && int(ladder.back()->tier()) > int(ladder[ladder.size() - 2]->tier()) &&
                      int(ladder.back()->tier()) < kMaxTiers,
                  InvalidArgument, "Options::extra_tiers: each tier must be above the one before it, below ",
                  kMaxTiers);
  }
  return ladder;
}

Plan partition_for(const Graph& graph, const std::vector<std::unique_ptr<Backend>>& ladder, const Options& options) {
  if (ladder.empty())
    return partition(graph, [](const Graph&, const Node&) { return std::string("tier 1 is disabled"); });
  const Backend* first = ladder.front().get();
  std::vector<const Backend*> higher;
  for (size_t k = 1; k < ladder.size(); ++k) higher.push_back(ladder[k].get());
  const bool plan_for_gpu = options.plan_for_gpu;
  return partition(graph, [first](const Graph& g, const Node& n) { return first->can_compile(g, n); },
                   [first](const Node& n) { return first->alone(n); },
                   [first, higher, plan_for_gpu](const Graph& g, const Node& n, const Node& next) {
                     return first->absorbs(g, n, next) && (!plan_for_gpu || gpu_fuses(n, next)) &&
                            std::all_of(higher.begin(), higher.end(),
                                        [&](const Backend* b) { return b->fuses(n, next); });
                   },
                   size_t(std::max(0, options.max_region_nodes)));
}

}  // namespace terrace
