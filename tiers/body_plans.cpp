// BodyPlans (tiers/body_plans.h): a control-flow body as a plan of regions of its own.
#include "tiers/body_plans.h"

#include <algorithm>
#include <atomic>
#include <mutex>

#include "interp/cancel.h"
#include "interp/log.h"
#include "interp/omp_threads.h"
#include "tiers/ladder.h"
#include "tiers/passes/pipeline.h"
#include "tiers/trace.h"

namespace terrace {

struct BodyPlans::Body {
  std::string where;  // "then_branch of If 'x'", with the enclosing bodies after it
  std::string guard;  // "If 'x': condition true", "Loop 'y': every iteration"
  std::shared_ptr<const Graph> graph;  // the body, sharing ownership of the session's graph
  // What runs: the body after the graph passes (Options::optimize), as the session's graph is:
  // an exporter's Slices and Concats of constant LSTM weights fold, so the weights are laid out once.
  std::shared_ptr<const Graph> optimized;
  std::once_flag made;
  Plan plan;
  std::vector<int> last_use;            // per value: the last step reading it
  std::unique_ptr<TierManager> tiers;   // null: no region (the interpreter runs the body)
  std::atomic<int64_t> runs{0};          // the tier manager's call index
  std::atomic<bool> ready{false};        // made: plan and tiers are set, for report() and wait_idle()
};

namespace {

// The bodies of each If, Loop and Scan of `g` and of its bodies, named after where they sit.
void find_bodies(const Graph& g, const std::shared_ptr<const Graph>& owner, const std::string& outer,
                 std::vector<std::unique_ptr<BodyPlans::Body>>& out);

}  // namespace

BodyPlans::BodyPlans(std::shared_ptr<const Graph> graph, const Options& options, TierManager& host, int first_id)
    : graph_(std::move(graph)), options_(options), host_(host), next_id_(first_id) {
  if (!options_.compile_bodies || options_.max_tier == Tier::Interp) return;
  find_bodies(*graph_, graph_, "", order_);
  for (const auto& b : order_) by_body_[b->graph.get()] = b.get();
}

// The tier managers go first: a compile they abandon holds the graph, which graph_ keeps alive.
BodyPlans::~BodyPlans() {
  for (auto& b : order_) b->tiers.reset();
}

namespace {

void find_bodies(const Graph& g, const std::shared_ptr<const Graph>& owner, const std::string& outer,
                 std::vector<std::unique_ptr<BodyPlans::Body>>& out) {
  for (const Node& node : g.nodes)
    for (const auto& [name, attr] : node.attrs) {
      if (!attr.g) continue;
      const std::string where = name + " of " + node.describe() + outer;
      if (node.op == Op::If || node.op == Op::Loop || node.op == Op::Scan) {
        auto b = std::make_unique<BodyPlans::Body>();
        b->where = where;
        b->guard = node.op != Op::If ? node.describe() + ": every iteration"
                                     : node.describe() + ": condition " + (name == "then_branch" ? "true" : "false");
        b->graph = std::shared_ptr<const Graph>(owner, attr.g.get());
        out.push_back(std::move(b));
      }
      find_bodies(*attr.g, owner, " in " + where, out);
    }
}

// Before the interpreter runs `node` inside a body: the device values it may read, on the host
// (a node with subgraphs reads any value by name). Only tier 2 leaves values on a device.
void inputs_to_host(Frame& frame, const Node& node) {
  auto fetch = [&](int v) {
    RValue& rv = frame.env[size_t(v)];
    if (rv.kind == ValueKind::Tensor && rv.tensor.on_device()) rv = RValue(rv.tensor.to_host());
  };
  if (!node.subgraphs().empty())
    for (size_t v = 0; v < frame.env.size(); ++v) fetch(int(v));
  for (int v : node.inputs)
    if (v >= 0) fetch(v);
}

// `body` with the values it captures that are initializers where `parent`'s chain defines them
// (the weights of the enclosing graph) as initializers of its own: constants to the graph passes,
// which fold what the body computes from them alone.
std::shared_ptr<Graph> with_captured_constants(const Graph& body, const Frame& parent) {
  auto g = std::make_shared<Graph>(body);  // tensors share storage: a copy of the structure only
  std::vector<int> captures;
  for (int id : g->captures) {
    const std::string& name = g->values[size_t(id)].name;
    const Tensor* constant = nullptr;
    for (const Frame* f = &parent; f; f = f->parent) {  // the scope Frame::lookup resolves
      const int v = f->graph->find_value(name);
      if (v < 0 || !f->env[size_t(v)].defined()) continue;
      if (auto it = f->graph->initializers.find(v); it != f->graph->initializers.end()) constant = &it->second;
      break;
    }
    if (!constant) {
      captures.push_back(id);
      continue;
    }
    g->initializers[id] = *constant;
    g->values[size_t(id)].info.dtype = constant->dtype();
    g->values[size_t(id)].info.shape = constant->shape();
  }
  g->captures = std::move(captures);
  return g;
}

}  // namespace

BodyPlans::Body& BodyPlans::made(Body& b, const Frame& parent) const {
  std::call_once(b.made, [&] {
    try {
      make_plan(b, parent);
    } catch (const std::exception& e) {  // the interpreter runs it, as it did before body plans
      b.tiers.reset();
      log(LogLevel::Warn, b.where, ": runs in the interpreter: its plan could not be made: ", e.what());
    }
  });
  return b;
}

void BodyPlans::make_plan(Body& b, const Frame& parent) const {
  std::vector<std::unique_ptr<Backend>> ladder = make_ladder(options_);
  if (ladder.empty()) return;
  {
    ScopedOmpThreads threads(options_.interp_threads);  // constant folding runs the interpreter
    b.optimized = optimize_graph(with_captured_constants(*b.graph, parent), options_.optimize,
                                 pass_config_for(ladder, options_));
  }
  const Graph& g = *b.optimized;
  b.plan = partition_for(g, ladder, options_);
  if (b.plan.regions.empty()) return;
  const int base = next_id_.fetch_add(int(b.plan.regions.size()));
  for (Region& r : b.plan.regions) r.id += base;
  b.last_use = last_use_positions(g, step_of_node(g, b.plan));
  b.tiers = std::make_unique<TierManager>(b.optimized, b.plan, options_, std::move(ladder), host_);
  b.ready.store(true, std::memory_order_release);
}

std::optional<std::vector<RValue>> BodyPlans::run(const Graph& body, std::vector<RValue>& inputs,
                                                    const Frame& parent) const {
  auto it = by_body_.find(&body);
  if (it == by_body_.end()) return std::nullopt;
  Body& b = made(*it->second, parent);
  if (!b.tiers) return std::nullopt;
  const int64_t call = b.runs.fetch_add(1);
  const Graph& g = *b.optimized;
  Frame frame = make_frame(g, std::move(inputs), &parent);  // inherits this runner for nested Ifs
  Trace* const trace = options_.trace.get();
  for (size_t s = 0; s < b.plan.steps.size(); ++s) {
    const Step& step = b.plan.steps[s];
    check_cancelled();
    if (step.region < 0) {
      TraceSpan span(trace, "node", "interp node", step.node);
      inputs_to_host(frame, g.nodes[size_t(step.node)]);
      run_node(frame, step.node);
      release_dead_inputs(frame, step.node, int(s), b.last_use);
      continue;
    }
    TraceSpan span(trace, "region", "region", b.plan.regions[size_t(step.region)].id);
    const Tier tier = b.tiers->execute(step.region, frame, call).tier;
    if (trace) {
      span.arg("body", b.where);
      span.arg("tier", tier_name(tier));
    }
    for (int n : b.plan.regions[size_t(step.region)].nodes) release_dead_inputs(frame, n, int(s), b.last_use);
  }
  std::vector<RValue> out = frame_outputs(frame);
  for (RValue& rv : out)  // the If's reader may be the interpreter (a Loop reading its condition)
    if (rv.kind == ValueKind::Tensor && rv.tensor.on_device()) rv = RValue(rv.tensor.to_host());
  return out;
}

std::vector<RegionReport> BodyPlans::report() const {
  std::vector<RegionReport> out;
  for (const auto& b : order_) {
    if (!b->ready.load(std::memory_order_acquire)) continue;  // not run yet, or without regions
    for (RegionReport r : b->tiers->report()) {
      r.subgraph = b->where;
      r.guard = b->guard;
      out.push_back(std::move(r));
    }
  }
  std::sort(out.begin(), out.end(), [](const RegionReport& a, const RegionReport& b) { return a.id < b.id; });
  return out;
}

void BodyPlans::wait_idle() const {
  for (const auto& b : order_)
    if (b->ready.load(std::memory_order_acquire)) b->tiers->wait_idle();
}

}  // namespace terrace
