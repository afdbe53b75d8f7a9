// Helpers the graph passes share: who reads a value, which values keep their identity, rewiring a
// node's result onto another value, dropping dead nodes and values, and a text form of a graph.
#pragma once
#include <string>
#include <vector>

#include "interp/graph.h"

namespace terrace::passes {

// How many readers each value has: node inputs, reads by If/Loop/Scan bodies (by name), and one
// per appearance in the graph outputs.
std::vector<int> use_counts(const Graph& g);

// Values whose identity (id and name) a pass must keep: graph inputs and outputs, and values a
// subgraph reads by name. Such a value may become an initializer, but is never renamed or removed.
std::vector<bool> pinned_values(const Graph& g);

// True for a value that holds a constant: an initializer of this graph.
inline bool is_constant(const Graph& g, int v) { return v >= 0 && g.initializers.count(v) != 0; }

// The constant a value holds (is_constant(g, v) must hold).
inline const Tensor& constant(const Graph& g, int v) { return g.initializers.at(v); }

// A statically known shape with every dim known, or nullptr.
const Shape* static_shape(const Graph& g, int v);

// Makes value `v` an initializer holding `t` (its producer, if any, must be removed by the caller);
// its ValueInfo takes t's dtype and shape.
void make_constant(Graph& g, int v, Tensor t);

// Adds a new initializer named after `base` (made unique) and returns its id.
int add_constant(Graph& g, const std::string& base, Tensor t);

// A new value named after `base` (made unique), with `info`, written by node `producer`.
int new_value(Graph& g, const std::string& base, ValueInfo info, int producer);

// Every read of `from` by a node becomes a read of `to` (graph outputs are left alone).
void replace_uses(Graph& g, int from, int to);

// Node `n` computes `out` as an exact copy of `in` (Identity, a Reshape to the same shape, ...).
// Rewires the graph so that the node can be removed, keeping pinned values' identity: readers of
// `out` read `in`, or, where `out` is pinned, `in`'s producer writes `out` directly. Returns
// false, changing nothing, when neither is possible (e.g. a graph input passed to a graph output).
bool bypass(Graph& g, int n, int in, int out, const std::vector<bool>& pinned);

// Removes the nodes marked in `dead` (their outputs must no longer be read), then every node whose
// results nobody reads, then values nothing refers to (initializers included); renumbers values.
// Returns the number of nodes removed.
int remove_nodes(Graph& g, std::vector<bool> dead);

// A readable text form: inputs, initializers (small ones with their values), nodes, outputs.
std::string graph_text(const Graph& g);

}  // namespace terrace::passes
