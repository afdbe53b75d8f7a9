// BodyPlans: the bodies of control-flow ops (an If's branches, a Loop's or Scan's body) run as plans
// of their own, partitioned like the graph, their regions compiled, guarded and validated by a tier
// manager of their own, instead of node by node in the interpreter. The op stays a graph break: an
// If reads its condition and runs the plan of the branch it selects, so each branch's versions run
// behind the condition's value (a mode flag or sample rate the calls hold constant compiles one
// branch; a changed value runs the other, interpreted until its own regions are hot); a Loop or
// Scan runs its body's plan each iteration, whose versions are guarded on each iteration's inputs.
#pragma once
#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "interp/interpreter.h"
#include "tiers/options.h"
#include "tiers/tier_manager.h"

namespace terrace {

class BodyPlans : public SubgraphRunner {
 public:
  // Finds the If, Loop and Scan nodes of `graph` and of every body in it; a body gets its plan and
  // tier manager the first time it runs, whose jobs run on `host`'s threads (the session's tier
  // manager, which outlives this). Its regions are numbered from `first_id` on (the graph's
  // region count), in the order the bodies first run, so that logs, traces and reports name each
  // region of the session once.
  BodyPlans(std::shared_ptr<const Graph> graph, const Options& options, TierManager& host, int first_id);
  ~BodyPlans() override;

  // Runs `body` when it is a known body with at least one region; nullopt otherwise (the
  // interpreter runs it). The outputs are host tensors.
  std::optional<std::vector<RValue>> run(const Graph& body, std::vector<RValue>& inputs,
                                         const Frame& parent) const override;
  // The regions of the bodies that ran, by id (a body run later adds its regions at the end),
  // each with its body and guard (RegionReport::subgraph, guard).
  std::vector<RegionReport> report() const;
  // Blocks until no body's background job is queued or running.
  void wait_idle() const;
  bool empty() const { return order_.empty(); }

  struct Body;  // one body: where it sits, its guard, its plan (body_plans.cpp)

 private:
  // The body's plan and tier manager, made on its first run (under `parent`, the frame of the
  // graph holding its op, whose initializers it may read as constants).
  Body& made(Body& b, const Frame& parent) const;
  void make_plan(Body& b, const Frame& parent) const;  // made's work; throws what the passes throw

  std::shared_ptr<const Graph> graph_;
  Options options_;
  TierManager& host_;
  mutable std::atomic<int> next_id_;  // the id of the next body's first region
  std::vector<std::unique_ptr<Body>> order_;  // in the order of the graph's ops
  std::map<const Graph*, Body*> by_body_;     // fixed after construction
};

}  // namespace terrace
