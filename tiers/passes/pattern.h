// What the pattern passes (layernorm_fusion, gelu_fusion, hardswish_fusion, attention) share: a
// view of a graph that answers "which node makes this value, read by whom", constant scalars, the
// rules for when a matched value may disappear into a fused op, and the rewrite of the matches.
#pragma once
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "interp/graph.h"
#include "tiers/passes/graph_edit.h"

namespace terrace::passes {

class PatternView {
 public:
  explicit PatternView(const Graph& g);

  const Graph& graph() const { return g_; }
  // The node producing `v` when it is an `op` with one output, else nullptr.
  const Node* producer(int v, Op op) const;
  int producer_index(int v) const { return v < 0 ? -1 : g_.values[size_t(v)].producer; }
  // The only node reading `v`, when exactly one node reads it once, else -1.
  int only_reader(int v) const;
  // True when `v` may vanish into a fused op: it is read `reads` times in all (node inputs, bodies,
  // graph outputs) and is not pinned (a graph output, or read by a body by name).
  bool internal(int v, int reads = 1) const;
  // The value held by a constant of one element of a floating-point type, or nullopt.
  std::optional<double> float_scalar(int v) const;
  // For a two-input node, the input that is not `v` (-1 unless `v` is one of them).
  static int other_input(const Node& n, int v);
  // The dtype statically known for `v` (an initializer's, or its ValueInfo's).
  std::optional<DType> dtype(int v) const;
  // The shape statically known for `v` (dims may be -1), or nullptr when its rank is unknown.
  const Shape* shape(int v) const;

 private:
  const Graph& g_;
  std::vector<int> uses_;
  std::vector<bool> pinned_;
  std::vector<int> reader_;  // the only reading node, -1 for none, -2 for several
};

// `a` within relative tolerance `rtol` of `b` (for constants an exporter rounded to float).
bool close_to(double a, double b, double rtol = 1e-5);

Attribute int_attribute(int64_t v);
Attribute float_attribute(float v);
Attribute string_attribute(std::string v);
Attribute ints_attribute(std::vector<int64_t> v);

// A name for a fused node made from nodes around `base` (its name, or its first output's).
std::string fused_name(const Graph& g, const Node& base, const char* op);

// The pattern passes' rewrite: the matches `match_at(view, i)` gives (an optional of a struct
// with `nodes`, the pattern's nodes but the last, and `last`, the node that becomes the fused op)
// that overlap no earlier one are found on the graph as it is; then each is rewritten by
// `rewrite(match, view, last node)`, which may add values but not nodes, and its other nodes are
// removed. Returns how many were fused.
template <typename MatchAt, typename Rewrite>
int fuse_matches(Graph& g, MatchAt match_at, Rewrite rewrite) {
  PatternView p(g);
  std::vector<std::decay_t<decltype(*match_at(p, 0))>> matches;
  std::vector<bool> taken(g.nodes.size(), false), dead(g.nodes.size(), false);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    auto m = match_at(p, i);
    if (!m) continue;
    bool overlaps = taken[size_t(m->last)];
    for (int n : m->nodes) overlaps = overlaps || taken[size_t(n)];
    if (overlaps) continue;
    for (int n : m->nodes) taken[size_t(n)] = dead[size_t(n)] = true;
    taken[size_t(m->last)] = true;
    matches.push_back(std::move(*m));
  }
  for (const auto& m : matches) rewrite(m, p, g.nodes[size_t(m.last)]);
  if (!matches.empty()) remove_nodes(g, std::move(dead));
  return int(matches.size());
}

}  // namespace terrace::passes
