// The built-in tiers' registry, make_ladder and partition_for (tiers/ladder.h).
#include "tiers/ladder.h"

#include <algorithm>
#include <mutex>
#include <string>

#include "interp/env_flag.h"
#include "interp/error.h"
#include "interp/log.h"
#include "tiers/cpu/cpu_backend.h"
#include "tiers/gpu/gpu_backend.h"

namespace terrace {

const std::vector<TierEntry>& builtin_tiers() {
  static const std::vector<TierEntry> tiers = {
      {Tier::Cpu, [](const Options& o, std::string* why) { return make_cpu_backend(o.cache_dir, why); }, nullptr,
       nullptr},
      // max-autotune times cuBLASLt's candidates; TERRACE_GEMM_TUNE says so for any mode.
      {Tier::Gpu,
       [](const Options& o, std::string* why) {
         return make_gpu_backend(o.cache_dir, why, env_flag("TERRACE_GEMM_TUNE", o.mode == Mode::MaxAutotune));
       },
       gpu_fuses,
       gpu_configure_passes},
  };
  return tiers;
}

std::vector<std::unique_ptr<Backend>> make_ladder(const Options& options) {
  std::vector<std::unique_ptr<Backend>> ladder;
  for (const TierEntry& entry : builtin_tiers()) {
    if (entry.tier > options.max_tier) break;
    std::string why;
    std::unique_ptr<Backend> backend = entry.make(options, &why);
    if (!backend) {
      static std::once_flag said[kMaxTiers];
      if (!ladder.empty())  // no tier 1 is a build without the JIT: Options::max_tier says the rest
        std::call_once(said[int(entry.tier)], [&] {
          log(LogLevel::Info, tier_name(entry.tier), " tier unavailable: ", why, "; regions stay on the ",
              tier_name(ladder.back()->tier()), " tier");
        });
      break;
    }
    ladder.push_back(std::move(backend));
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

passes::PassConfig pass_config_for(const std::vector<std::unique_ptr<Backend>>& ladder, const Options& options) {
  passes::PassConfig config;
  for (const auto& b : ladder) b->configure_passes(config);
  for (const TierEntry& entry : builtin_tiers())
    if (entry.tier <= options.plan_for && entry.configure &&
        std::none_of(ladder.begin(), ladder.end(), [&](const auto& b) { return b->tier() == entry.tier; }))
      entry.configure(config);
  return config;
}

Plan partition_for(const Graph& graph, const std::vector<std::unique_ptr<Backend>>& ladder, const Options& options) {
  if (ladder.empty())
    return partition(graph, [](const Graph&, const Node&) { return std::string("tier 1 is disabled"); });
  const Backend* first = ladder.front().get();
  std::vector<const Backend*> higher;
  for (size_t k = 1; k < ladder.size(); ++k) higher.push_back(ladder[k].get());
  // Tiers planned for but not in the ladder (no device here): their rules, without their backends.
  std::vector<bool (*)(const Node&, const Node&)> absent;
  for (const TierEntry& entry : builtin_tiers())
    if (entry.tier <= options.plan_for && entry.fuses &&
        std::none_of(ladder.begin(), ladder.end(), [&](const auto& b) { return b->tier() == entry.tier; }))
      absent.push_back(entry.fuses);
  // A node the first tier refuses and a higher one compiles (tier 2's Attention) is a region of its
  // own, which climbs from the interpreter straight to that tier.
  auto higher_only = [first, higher](const Graph& g, const Node& n) {
    return !first->can_compile(g, n).empty() &&
           std::any_of(higher.begin(), higher.end(), [&](const Backend* b) { return b->can_compile(g, n).empty(); });
  };
  // An If, Loop or Scan runs in the interpreter, but its bodies as plans of their own.
  const bool bodies = options.compile_bodies;
  return partition(graph,
                   [first, higher_only, bodies](const Graph& g, const Node& n) {
                     std::string why = first->can_compile(g, n);
                     if (why.empty() || higher_only(g, n)) return std::string();
                     if (bodies && (n.op == Op::If || n.op == Op::Loop || n.op == Op::Scan))
                       why = "control flow: the " + std::string(op_name(n.op)) +
                             " runs in the interpreter, its bodies as compiled plans of their own (tiers/body_plans.h)";
                     return why;
                   },
                   [first, higher_only, &graph](const Node& n) { return first->alone(n) || higher_only(graph, n); },
                   [first, higher, absent, higher_only](const Graph& g, const Node& n, const Node& next) {
                     return !higher_only(g, next) && first->absorbs(g, n, next) &&
                            std::all_of(higher.begin(), higher.end(), [&](const Backend* b) { return b->fuses(n, next); }) &&
                            std::all_of(absent.begin(), absent.end(), [&](auto fuses) { return fuses(n, next); });
                   },
                   size_t(std::max(0, options.max_region_nodes)));
}

}  // namespace terrace
