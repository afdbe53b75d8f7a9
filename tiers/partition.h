// Partition: splits a graph into regions (convex subgraphs a tier can compile) and graph breaks.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "interp/graph.h"

namespace terrace {

struct Region {
  int id = 0;
  std::vector<int> nodes;    // node indices, in execution order
  std::vector<int> inputs;   // value ids the region reads from outside (initializers included)
  std::vector<int> outputs;  // value ids it produces that are read outside or are graph outputs
  std::string ops() const;   // filled by describe_ops: "Mul,Sigmoid,Add"
  std::vector<std::string> op_names;
};

// Per node of `region` (by position): the values made inside the region, not among its outputs,
// that no later node of the region reads (as an input or a subgraph capture), so the interpreter
// may release them once that node has run (ResNet-50 as one chain would otherwise hold every
// activation of the network until the region ends).
std::vector<std::vector<int>> released_after(const Graph& g, const Region& region);

// One step of execution: a region, or an interpreted node with the reason it is not compiled.
struct Step {
  int region = -1;  // index into Plan::regions, or -1
  int node = -1;    // node index when region == -1
  std::string reason;
};

struct Plan {
  std::vector<Step> steps;  // a topological order of the whole graph
  std::vector<Region> regions;
};

// Per node of `graph`: the index of the plan's step that runs it (alone or in its region).
std::vector<int> step_of_node(const Graph& graph, const Plan& plan);

// Returns "" when a tier can compile the node, else the reason it cannot ("unsupported op Conv").
using CompilablePredicate = std::function<std::string(const Graph&, const Node&)>;

// True for a compilable node that gets a region of its own: tier 1's library ops (MatMul, Gemm,
// Conv), each validated alone against an error bound for its own arithmetic.
using AlonePredicate = std::function<bool(const Node&)>;

// True when the node `next`, reading `last`'s result (as its only reader, or as its first input),
// joins the region that an `alone` node opened and that holds `last` (tier 1: a Relu or Clip
// after a Conv, the next Conv, a residual Add, run as one chain of oneDNN primitives).
using AbsorbPredicate = std::function<bool(const Graph&, const Node& last, const Node& next)>;

// Orders the nodes so that compilable nodes run in as few contiguous runs as possible (each run
// is convex: a contiguous stretch of a topological order), and makes each run a region; a node
// `alone` names is a run by itself, with the nodes `absorbs` accepts after it: the only reader of
// the region's last node, else a ready node whose first input the region produced (asked about
// that input's producer), one after the other.
// A region holds at most `max_nodes` nodes (0: no limit): a compiler's time grows faster than
// linearly with a kernel's size (tier 1: a 3,000-op chain took 8 s, 1,000 results of one fused
// kernel 21 s), so large fusible stretches are cut into regions that compile in bounded time.
Plan partition(const Graph& graph, const CompilablePredicate& can_compile,
               const AlonePredicate& alone = {}, const AbsorbPredicate& absorbs = {}, size_t max_nodes = 0);

}  // namespace terrace
