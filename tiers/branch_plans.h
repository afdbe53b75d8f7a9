// BranchPlans: the branches of a graph's If nodes run as plans of their own, partitioned like the
// graph, their regions compiled, guarded and validated by a tier manager of their own, instead of
// node by node in the interpreter. The If stays: it reads its condition and runs the plan of the
// branch that condition selects, so each branch's versions run behind the condition's value (a
// mode flag or sample rate the calls hold constant compiles one branch; a changed value runs the
// other branch, interpreted until its own regions are hot and compiled).
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "interp/interpreter.h"
#include "tiers/options.h"
#include "tiers/tier_manager.h"

namespace terrace {

class BranchPlans : public SubgraphRunner {
 public:
  // Finds the If nodes of `graph` and of every subgraph in it (a branch inside a Loop body or
  // another branch included); a branch gets its plan and tier manager the first time it runs.
  BranchPlans(std::shared_ptr<const Graph> graph, const Options& options);
  ~BranchPlans() override;

  // Runs `body` when it is a known branch with at least one region; nullopt otherwise (the
  // interpreter runs it). The outputs are host tensors.
  std::optional<std::vector<RValue>> run(const Graph& body, std::vector<RValue>& inputs,
                                         const Frame& parent) const override;
  // The regions of the branches that ran, in the order the graph holds their Ifs, numbered from
  // `first_id` on, each with its branch and guard (RegionReport::subgraph, guard).
  std::vector<RegionReport> report(int first_id) const;
  // Blocks until no branch's background job is queued or running.
  void wait_idle() const;
  bool empty() const { return order_.empty(); }

  struct Branch;  // one branch: where it sits, its guard, its plan (branch_plans.cpp)

 private:
  // The branch's plan and tier manager, made on its first run (under `parent`, the frame of the
  // graph holding its If, whose initializers it may read as constants).
  Branch& made(Branch& b, const Frame& parent) const;

  std::shared_ptr<const Graph> graph_;
  Options options_;
  std::vector<std::unique_ptr<Branch>> order_;      // in the order of the graph's Ifs
  std::map<const Graph*, Branch*> by_body_;         // fixed after construction
};

}  // namespace terrace
