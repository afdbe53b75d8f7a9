// Tier 0: runs a graph node by node with the reference kernels.
#pragma once
#include <functional>
#include <optional>
#include <vector>

#include "interp/graph.h"

namespace terrace {

struct Frame;

// Runs the bodies of control-flow ops (If, Loop, Scan) in place of interpret(): tiers/ runs a
// body as a plan of compiled regions of its own (tiers/body_plans.h). The interpreter stays the
// specification: whatever runs a body must compute what interpret() would.
class SubgraphRunner {
 public:
  virtual ~SubgraphRunner() = default;
  // The body's outputs for `inputs`, read under frame `parent`; nullopt leaves it to interpret().
  virtual std::optional<std::vector<RValue>> run(const Graph& body, std::vector<RValue>& inputs,
                                                 const Frame& parent) const = 0;
};

// One activation of a graph: the runtime value of each of its values.
struct Frame {
  const Graph* graph = nullptr;
  std::vector<RValue> env;
  const Frame* parent = nullptr;  // the enclosing graph's frame, for subgraph captures
  // What runs the bodies of this frame's control-flow nodes (null: interpret()); a subgraph's frame
  // inherits its parent's.
  const SubgraphRunner* bodies = nullptr;
  // Finds a value by name here or in an enclosing frame; nullptr if none is set.
  const RValue* lookup(const std::string& name) const;
};

// Called after each node with its index and the time it took (for profiling).
using NodeObserver = std::function<void(int node, double ms)>;

// Runs `graph` on `inputs` (given in graph.inputs order) and returns its outputs in order.
// Errors name the node that failed. `parent` is set for subgraphs.
std::vector<RValue> interpret(const Graph& graph, std::vector<RValue> inputs,
                              const Frame* parent = nullptr, const NodeObserver& observe = {});

// The pieces interpret() is made of, for executors that interleave compiled regions (tiers/).
// A frame for `graph` with initializers, inputs and captured values bound.
Frame make_frame(const Graph& graph, std::vector<RValue> inputs, const Frame* parent);
// Runs node `n` of the frame's graph, storing its outputs in the frame.
void run_node(Frame& frame, int n, const NodeObserver& observe = {});
// For each value, the largest position (position[node]) of a node that reads it, directly or
// through a subgraph; graph outputs read at INT_MAX, unread values at -1.
std::vector<int> last_use_positions(const Graph& graph, const std::vector<int>& position);
// Drops the values of node `n`'s inputs whose last use is at `pos` (initializers are kept).
void release_dead_inputs(Frame& frame, int n, int pos, const std::vector<int>& last_use);
// The graph outputs from a finished frame.
std::vector<RValue> frame_outputs(const Frame& frame);

// Runs one node on the given inputs (nullptr for absent ones) and returns its outputs.
std::vector<RValue> interpret_node(const Node& node, const std::vector<const RValue*>& inputs,
                                   const Frame* frame = nullptr);

}  // namespace terrace
