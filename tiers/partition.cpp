// Partition by list scheduling: keep extending the open region while a compilable node is ready.
#include "tiers/partition.h"

#include <algorithm>
#include <map>
#include <set>

namespace terrace {

std::string Region::ops() const {
  std::string s;
  for (auto& o : op_names) s += (s.empty() ? "" : ",") + o;
  return s;
}

std::vector<std::vector<int>> released_after(const Graph& g, const Region& region) {
  std::map<int, size_t> last_read;  // internal value -> position of its producer, then its last reader
  for (size_t k = 0; k < region.nodes.size(); ++k)
    for (int v : g.nodes[size_t(region.nodes[k])].outputs)
      if (v >= 0 && std::find(region.outputs.begin(), region.outputs.end(), v) == region.outputs.end()) last_read[v] = k;
  for (size_t k = 0; k < region.nodes.size(); ++k) {
    const Node& node = g.nodes[size_t(region.nodes[k])];
    for (const std::vector<int>& reads : {node.inputs, g.captured_by(node)})
      for (int v : reads)
        if (auto it = last_read.find(v); it != last_read.end()) it->second = k;
  }
  std::vector<std::vector<int>> out(region.nodes.size());
  for (const auto& [v, k] : last_read) out[k].push_back(v);
  return out;
}

std::vector<int> step_of_node(const Graph& g, const Plan& plan) {
  std::vector<int> step(g.nodes.size(), 0);
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    if (plan.steps[s].region < 0) step[size_t(plan.steps[s].node)] = int(s);
    else
      for (int n : plan.regions[size_t(plan.steps[s].region)].nodes) step[size_t(n)] = int(s);
  }
  return step;
}

namespace {

// The dataflow partition schedules over, through values (subgraph captures included).
struct Dataflow {
  std::vector<int> producer;            // per value: the node that makes it, or -1
  std::vector<std::vector<int>> users;  // per node: the nodes that read its results
  std::vector<int> pending;             // per node: its producers not yet placed
  std::vector<int> readers;             // per value: nodes reading it (a graph output counts as one)
};

Dataflow dataflow(const Graph& g) {
  const size_t n = g.nodes.size();
  Dataflow d;
  d.producer.assign(g.values.size(), -1);
  for (size_t i = 0; i < n; ++i)
    for (int v : g.nodes[i].outputs)
      if (v >= 0) d.producer[size_t(v)] = int(i);
  d.users.resize(n);
  d.pending.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    std::set<int> preds;
    std::vector<int> reads = g.captured_by(g.nodes[i]);
    reads.insert(reads.end(), g.nodes[i].inputs.begin(), g.nodes[i].inputs.end());
    for (int v : reads)
      if (v >= 0 && d.producer[size_t(v)] >= 0) preds.insert(d.producer[size_t(v)]);
    preds.erase(int(i));
    d.pending[i] = int(preds.size());
    for (int p : preds) d.users[size_t(p)].push_back(int(i));
  }
  d.readers.assign(g.values.size(), 0);
  for (int v : g.outputs) ++d.readers[size_t(v)];
  for (size_t i = 0; i < n; ++i) {
    for (int v : g.nodes[i].inputs)
      if (v >= 0) ++d.readers[size_t(v)];
    for (int v : g.captured_by(g.nodes[i])) ++d.readers[size_t(v)];
  }
  return d;
}

// Every node was placed, in a step or a region, unless the graph has a cycle.
void check_acyclic(const Graph& g, const Plan& plan) {
  size_t placed = 0;
  for (const Step& s : plan.steps) placed += s.region >= 0 ? 0 : 1;
  for (const Region& r : plan.regions) placed += r.nodes.size();
  TERRACE_CHECK(placed == g.nodes.size(), InvalidModel, "graph '", g.name, "' has a cycle");
}

// Region inputs: values read but not produced inside. Outputs: values produced inside and read
// outside (by another step, a subgraph, or as a graph output).
void set_region_io(const Graph& g, const std::vector<int>& producer, const std::vector<int>& region_of, Plan& plan) {
  const size_t n = g.nodes.size();
  std::vector<bool> used_outside(g.values.size(), false);
  for (int v : g.outputs) used_outside[size_t(v)] = true;
  for (size_t i = 0; i < n; ++i)
    for (int v : g.nodes[i].inputs)
      if (v >= 0 && producer[size_t(v)] >= 0 && region_of[size_t(producer[size_t(v)])] != region_of[i])
        used_outside[size_t(v)] = true;
  for (size_t i = 0; i < n; ++i)  // values a subgraph captures are read outside any region
    for (int v : g.captured_by(g.nodes[i]))
      used_outside[size_t(v)] = true;
  for (Region& r : plan.regions) {
    std::set<int> produced;
    for (int i : r.nodes)
      for (int v : g.nodes[size_t(i)].outputs)
        if (v >= 0) produced.insert(v);
    std::set<int> seen;
    for (int i : r.nodes) {
      for (int v : g.nodes[size_t(i)].inputs)
        if (v >= 0 && !produced.count(v) && seen.insert(v).second) r.inputs.push_back(v);
      for (int v : g.nodes[size_t(i)].outputs)
        if (v >= 0 && used_outside[size_t(v)]) r.outputs.push_back(v);
    }
  }
}

}  // namespace

Plan partition(const Graph& g, const CompilablePredicate& can_compile,
               const AlonePredicate& alone, const AbsorbPredicate& absorbs, size_t max_nodes) {
  const size_t n = g.nodes.size();
  Dataflow d = dataflow(g);
  const std::vector<int>& producer = d.producer;
  std::vector<std::vector<int>>& users = d.users;
  std::vector<int>& pending = d.pending;
  std::vector<std::string> reason(n);
  for (size_t i = 0; i < n; ++i) reason[i] = can_compile(g, g.nodes[i]);

  std::set<int> ready_compilable, ready_other;
  auto make_ready = [&](int i) { (reason[size_t(i)].empty() ? ready_compilable : ready_other).insert(i); };
  for (size_t i = 0; i < n; ++i)
    if (pending[i] == 0) make_ready(int(i));

  // The node that may join node i's region as its activation: the only reader of i's only result.
  auto absorbable = [&](int i) {
    const Node& node = g.nodes[size_t(i)];
    if (!absorbs || node.outputs.size() != 1 || node.outputs[0] < 0 || d.readers[size_t(node.outputs[0])] != 1 ||
        users[size_t(i)].size() != 1)
      return -1;
    const int u = users[size_t(i)][0];
    bool ok = ready_compilable.count(u) && absorbs(g, node, g.nodes[size_t(u)]);
    return ok ? u : -1;
  };

  Plan plan;
  int open = -1;  // the region being extended
  std::vector<int> region_of(n, -1);
  auto add = [&](int r, int i) {  // node i joins region r; its readers may become ready
    plan.regions[size_t(r)].nodes.push_back(i);
    plan.regions[size_t(r)].op_names.push_back(op_name(g.nodes[size_t(i)].op));
    region_of[size_t(i)] = r;
  };
  auto release = [&](int i) {
    for (int u : users[size_t(i)])
      if (--pending[size_t(u)] == 0) make_ready(u);
  };
  while (!ready_compilable.empty() || !ready_other.empty()) {
    int i;
    bool by_itself = false;  // i is a region by itself (and may absorb its reader, below)
    if (!ready_compilable.empty() && (open >= 0 || ready_other.empty())) {
      i = *ready_compilable.begin();
      ready_compilable.erase(ready_compilable.begin());
      by_itself = alone && alone(g.nodes[size_t(i)]);
      if (by_itself || (open >= 0 && max_nodes > 0 && plan.regions[size_t(open)].nodes.size() >= max_nodes)) open = -1;
      if (open < 0) {
        open = int(plan.regions.size());
        plan.regions.push_back(Region{open, {}, {}, {}, {}});
        plan.steps.push_back(Step{open, -1, ""});
      }
      add(open, i);
      if (by_itself) open = -1;
    } else {
      i = *ready_other.begin();
      ready_other.erase(ready_other.begin());
      open = -1;
      plan.steps.push_back(Step{-1, i, reason[size_t(i)]});
    }
    release(i);
    if (!by_itself) continue;
    // The region grows by the nodes `absorbs` accepts: first the only reader of its last node
    // (tier 1: a Relu after a Conv, the next Conv, ...), else a ready node whose first input the
    // region produced, asked about that input's producer (the next block's Conv reading a value
    // that a residual Add reads later). Not bounded by max_nodes: a library region compiles op
    // by op, in time linear in its size.
    const int opened = region_of[size_t(i)];
    // A reader of `last` first (a SiLU's Sigmoid right after its Conv, before a sibling branch's
    // Conv), so that each branch's ops follow their producer in the region, as chains expect.
    auto reads_region = [&](int last) {
      int any = -1;
      for (int u : ready_compilable) {
        const Node& node = g.nodes[size_t(u)];
        const int v = node.inputs.empty() ? -1 : node.inputs[0];
        const int p = v < 0 ? -1 : producer[size_t(v)];
        if (p < 0 || region_of[size_t(p)] != opened || !absorbs(g, g.nodes[size_t(p)], node)) continue;
        if (p == last) return u;
        if (any < 0) any = u;
      }
      return any;
    };
    for (int last = i, u; (u = absorbable(last)) >= 0 || (absorbs && (u = reads_region(last)) >= 0); last = u) {
      ready_compilable.erase(u);
      add(opened, u);
      release(u);
    }
  }
  check_acyclic(g, plan);

  set_region_io(g, producer, region_of, plan);
  return plan;
}

}  // namespace terrace
