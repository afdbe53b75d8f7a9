// Lowering of tier 1's and tier 2's generated regions (tiers/region_lowering.h).
#include "tiers/region_lowering.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <optional>

#include "interp/interpreter.h"
#include "kernels/lower.h"
#include "kernels/lower_op.h"
#include "kernels/lower_reduce.h"
#include "kernels/split.h"

namespace terrace {

int LoweredRegion::add_slot(kernels::TensorSig sig, int alias_of) {
  slots.push_back(std::move(sig));
  alias.push_back(alias_of);
  return int(slots.size()) - 1;
}

namespace {

LoweredStep kernel_step(kernels::LoweredFunc f, std::vector<int> slots) {
  LoweredStep step;
  step.kind = LoweredStep::Kind::Kernel;
  step.func = std::move(f);
  step.slots = std::move(slots);
  return step;
}

// Value guards cover region inputs of at most this many elements (a guard compares them per call).
constexpr int64_t kMaxValueGuardElements = 1 << 16;

// A node whose every output is known at compile time (kernels::known_at_compile_time).
bool evaluable_here_impl(const Graph& g, const Node& node) {
  bool any = false;
  for (int v : node.outputs) {
    if (v < 0) continue;
    if (!kernels::known_at_compile_time(g, v)) return false;
    any = true;
  }
  return any;
}

// Evaluates `node` now when its outputs are known at compile time and the values it reads are
// at hand (Shape and Size read only their input's signature); its outputs go to `known`, and to
// a slot only where a kernel reads them. False: the node must be compiled like any other.
template <typename KnownValue>
bool evaluate_at_compile_time(const Graph& g, const Node& node, const std::map<int, int>& slot_of,
                                     const LoweredRegion& b, KnownValue& known_value, std::map<int, Tensor>& known) {
  if (!evaluable_here_impl(g, node)) return false;
  if (node.op == Op::Shape || node.op == Op::Size) {
    auto s = slot_of.find(node.inputs.at(0));
    const Shape* shape = nullptr;
    Shape from_known;
    if (s != slot_of.end()) shape = &b.slots[size_t(s->second)].shape;
    else if (const Tensor* t = known_value(node.inputs[0])) shape = &(from_known = t->shape());
    if (!shape) return false;
    const int64_t rank = int64_t(shape->size());
    if (node.op == Op::Size) {
      known[node.outputs[0]] = Tensor::scalar<int64_t>(shape_numel(*shape));
      return true;
    }
    auto clamp = [&](int64_t i) { return std::clamp(i < 0 ? i + rank : i, int64_t(0), rank); };
    const int64_t start = clamp(node.attr_int("start", 0)), end = clamp(node.attr_int("end", rank));
    std::vector<int64_t> dims;
    for (int64_t i = start; i < end; ++i) dims.push_back((*shape)[size_t(i)]);
    known[node.outputs[0]] = Tensor::from_vector<int64_t>({int64_t(dims.size())}, dims);
    return true;
  }
  std::vector<RValue> values;
  values.reserve(node.inputs.size());
  std::vector<const RValue*> args;
  for (int v : node.inputs) {
    if (v < 0) {
      args.push_back(nullptr);
      continue;
    }
    const Tensor* t = known_value(v);
    if (!t) return false;
    values.emplace_back(*t);
    args.push_back(&values.back());
  }
  std::vector<RValue> out = interpret_node(node, args);
  for (size_t j = 0; j < node.outputs.size(); ++j)
    if (node.outputs[j] >= 0) known[node.outputs[j]] = out.at(j).tensor;
  return true;
}

class MixedBuilder {
 public:
  MixedBuilder(const Graph& g, const Region& region, const std::vector<Tensor>& inputs, LoweredRegion& b)
      : g_(g), region_(region), inputs_(inputs), b_(b) {}

  void build() {
    const size_t n_in = region_.inputs.size(), n_out = region_.outputs.size();
    for (size_t i = 0; i < n_in; ++i) slot_of_[region_.inputs[i]] = int(i);
    for (size_t j = 0; j < n_out; ++j) b_.add_slot({});  // signatures set when computed
    size_t k = 0;
    while (k < region_.nodes.size()) {
      const Node& first = node_at(k);
      if (evaluate_at_compile_time(g_, first, slot_of_, b_, known_fn_, known_)) {
        ++k;
      } else if (!is_elementwise(first)) {
        k = lower_at(k, std::nullopt);
      } else {
        const size_t end = run_end(k);
        Group run = make_group(k, end, -1);
        // The run only computes a reduction's input 0: it becomes the reduction's prologue.
        if (end < region_.nodes.size() && kernels::is_reduction_op(node_at(end).op) &&
            run.output_values.size() == 1 && run.output_values[0] == node_at(end).inputs.at(0) &&
            !read_later(run.output_values[0], end + 1) && one_domain(run.group)) {
          k = lower_at(end, std::move(run));
        } else {
          compile_group(std::move(run));
          k = end;
        }
      }
    }
    for (size_t j = 0; j < n_out; ++j) {  // region outputs computed at compile time: copied out
      const int v = region_.outputs[j];
      if (slot_of_.count(v) && size_t(slot_of_[v]) == n_in + j) continue;
      materialize(v);
      if (auto it = known_.find(v); it != known_.end()) {
        LoweredStep copy;
        copy.kind = LoweredStep::Kind::Copy;
        copy.slots = {slot_of_[v], int(n_in + j)};
        b_.slots[n_in + j] = {it->second.dtype(), it->second.shape()};
        b_.steps.push_back(std::move(copy));
        slot_of_[v] = int(n_in + j);
      }
    }
    for (size_t j = 0; j < n_out; ++j)
      TERRACE_ASSERT(slot_of_.count(region_.outputs[j]), "tier 1: region output '",
                     g_.values[size_t(region_.outputs[j])].name, "' is not computed in it");
  }

 private:
  // An elementwise run as a fusion group over region slots.
  struct Group {
    kernels::FusionGroup group;
    std::vector<int> input_slots;    // per group input (-1: the fused op's result, an epilogue's operand)
    std::vector<int> output_values;  // per group output: the value it computes
  };

  const Node& node_at(size_t k) const { return g_.nodes[size_t(region_.nodes[k])]; }
  static bool is_elementwise(const Node& n) { return std::strcmp(op_family(n.op), "elementwise") == 0; }
  std::string name(const char* what, size_t k) const {
    return "region" + std::to_string(region_.id) + "_" + what + std::to_string(k);
  }

  size_t run_end(size_t k) const {
    size_t end = k;
    while (end < region_.nodes.size() && is_elementwise(node_at(end)) &&
           (end == k || !evaluable_here_impl(g_, node_at(end))))
      ++end;
    return end;
  }

  int region_output_slot(int v) const {
    auto it = std::find(region_.outputs.begin(), region_.outputs.end(), v);
    return it == region_.outputs.end() ? -1 : int(region_.inputs.size() + size_t(it - region_.outputs.begin()));
  }
  // Where a computed value goes: its region output slot, or a new intermediate.
  int place(int v, const kernels::TensorSig& sig) {
    int s = region_output_slot(v);
    if (s >= 0) b_.slots[size_t(s)] = sig;
    else s = b_.add_slot(sig);
    slot_of_[v] = s;
    return s;
  }
  // True when v is read by region nodes at or after position k, or outside the region.
  bool read_later(int v, size_t k) const {
    if (region_output_slot(v) >= 0) return true;
    for (size_t i = k; i < region_.nodes.size(); ++i)
      for (int u : node_at(i).inputs)
        if (u == v) return true;
    return false;
  }
  // Known at compile time (kernels::known_at_compile_time): initializers, values computed here
  // from shapes, and small region inputs derived from shapes, which the version's guards pin.
  const Tensor* known_value(int v) {
    if (auto it = known_.find(v); it != known_.end()) return &it->second;
    if (auto init = g_.initializers.find(v);
        init != g_.initializers.end() && std::find(g_.inputs.begin(), g_.inputs.end(), v) == g_.inputs.end())
      return &init->second;
    auto in = std::find(region_.inputs.begin(), region_.inputs.end(), v);
    if (in == region_.inputs.end() || !kernels::known_at_compile_time(g_, v)) return nullptr;
    const int i = int(in - region_.inputs.begin());
    if (inputs_[size_t(i)].numel() > kMaxValueGuardElements) return nullptr;
    b_.value_inputs.push_back(i);
    return &(known_[v] = inputs_[size_t(i)]);
  }
  // A value computed at compile time that a kernel reads (or the region returns) gets a slot.
  void materialize(int v) {
    if (slot_of_.count(v)) return;
    auto it = known_.find(v);
    if (it == known_.end()) return;
    b_.constants.push_back(it->second);
    slot_of_[v] = b_.add_slot({it->second.dtype(), it->second.shape()}, -2 - int(b_.constants.size() - 1));
  }
  bool views_constant(int s) const {
    while (b_.alias[size_t(s)] >= 0) s = b_.alias[size_t(s)];
    return b_.alias[size_t(s)] <= -2;
  }
  int slot(const Node& node, int v) {
    materialize(v);
    auto s = slot_of_.find(v);
    TERRACE_ASSERT(s != slot_of_.end(), "tier 1: ", node.describe(), " reads a value its region has not computed");
    return s->second;
  }

  // The run [k, end) as one fusion group; `operand` (a value, or -1) is a group input with no slot.
  Group make_group(size_t k, size_t end, int operand) {
    Group r;
    r.group.name = name("g", k);
    std::map<int, kernels::Operand> where;
    auto operand_of = [&](const Node& node, int v) {
      if (auto it = where.find(v); it != where.end()) return it->second;
      kernels::TensorSig sig;
      int s = -1;
      if (v == operand) sig = operand_sig_;
      else sig = b_.slots[size_t(s = slot(node, v))];
      r.group.inputs.push_back(sig);
      r.input_slots.push_back(s);
      return where[v] = kernels::Operand::input(int(r.input_slots.size()) - 1);
    };
    std::vector<int> produced;
    for (size_t i = k; i < end; ++i) {
      const Node& node = node_at(i);
      kernels::FusedOp op;
      op.node = node;
      for (int v : node.inputs) op.operands.push_back(v < 0 ? kernels::Operand::absent() : operand_of(node, v));
      r.group.ops.push_back(std::move(op));
      const int index = int(r.group.ops.size()) - 1;
      r.group.ops.back().result = kernels::infer_result(r.group, index);
      TERRACE_CHECK(node.outputs.size() == 1, NotImplemented, node.describe(), " has ",
                    node.outputs.size(), " outputs; tier 1 fuses single-output ops");
      where[node.outputs[0]] = kernels::Operand::result(index);
      produced.push_back(node.outputs[0]);
    }
    for (int v : produced)
      if (read_later(v, end)) {
        r.group.outputs.push_back(where[v].index);
        r.output_values.push_back(v);
      }
    return r;
  }

  // Every op of the group computes over the shape of its last output (what a fused prologue or
  // epilogue needs: it is evaluated per element of that shape).
  static bool one_domain(const kernels::FusionGroup& group) {
    if (group.outputs.size() != 1) return false;
    const Shape& domain = group.ops[size_t(group.outputs[0])].result.shape;
    for (const kernels::FusedOp& op : group.ops) {
      Shape s = domain;
      if (!kernels::try_broadcast(s, op.result.shape) || s != domain) return false;
    }
    return true;
  }

  void compile_group(Group run) {
    if (run.group.outputs.empty()) return;  // dead ops
    kernels::SplitGroup split = kernels::split_by_domain(run.group);
    // The split's slot table (group inputs, group outputs, its intermediates) in the region's.
    std::vector<int> map = run.input_slots;
    for (size_t j = 0; j < run.output_values.size(); ++j)
      map.push_back(place(run.output_values[j], split.slots[run.input_slots.size() + j]));
    for (size_t s = map.size(); s < split.slots.size(); ++s) map.push_back(b_.add_slot(split.slots[s]));
    for (const kernels::KernelPart& p : split.parts) {
      std::vector<int> slots;
      for (int s : p.input_slots) slots.push_back(map[size_t(s)]);
      for (int s : p.output_slots) slots.push_back(map[size_t(s)]);
      b_.steps.push_back(kernel_step(kernels::lower(p.group), std::move(slots)));
    }
  }

  // Lowers the node at position k (with `prologue` fused, and an epilogue taken from the run
  // after it where one fits); returns the position after what it consumed.
  size_t lower_at(size_t k, std::optional<Group> prologue) {
    const Node& node = node_at(k);
    std::vector<kernels::OpInput> in;
    std::vector<int> op_slots;  // the op's slot table in the region's
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const int v = node.inputs[i];
      kernels::OpInput x;
      if (v < 0) {
        x.absent = true;
        op_slots.push_back(-1);
      } else if (i == 0 && prologue) {  // computed by the prologue wherever it is read: no buffer
        x.sig = prologue->group.ops[size_t(prologue->group.outputs[0])].result;
        op_slots.push_back(prologue->input_slots.empty() ? 0 : prologue->input_slots[0]);
      } else {
        x.value = known_value(v);
        x.sig = b_.slots[size_t(slot(node, v))];
        op_slots.push_back(slot_of_[v]);
      }
      in.push_back(std::move(x));
    }
    kernels::OpKernels k_out;
    size_t next = k + 1;
    std::optional<Group> epilogue;
    if (kernels::is_reduction_op(node.op)) {
      kernels::ReductionFusion fusion;
      if (prologue) fusion.prologue = prologue->group;
      // Output 0 read only by the elementwise run after the node, which computes one value.
      const bool fusible = node.op == Op::Softmax || node.op == Op::LogSoftmax || node.op == Op::LayerNormalization;
      if (fusible && next < region_.nodes.size() && is_elementwise(node_at(next)) && node.outputs.at(0) >= 0 &&
          region_output_slot(node.outputs[0]) < 0) {
        const size_t end = run_end(next);
        if (!read_later(node.outputs[0], end)) {
          operand_sig_ = kernels::lower_reduction(node, in, name("probe", k), g_.opset).outputs.at(0);
          Group run = make_group(next, end, node.outputs[0]);
          auto operand = std::find(run.input_slots.begin(), run.input_slots.end(), -1);
          if (run.output_values.size() == 1 && operand != run.input_slots.end() && one_domain(run.group) &&
              run.group.ops[size_t(run.group.outputs[0])].result == operand_sig_) {
            fusion.epilogue = run.group;
            fusion.epilogue_operand = int(operand - run.input_slots.begin());
            epilogue = std::move(run);
            next = end;
          }
        }
      }
      k_out = kernels::lower_reduction(node, in, name("n", k), g_.opset, fusion);
    } else {
      k_out = kernels::lower_op(node, in, name("n", k));
    }
    TERRACE_ASSERT(k_out.outputs.size() == node.outputs.size(), node.describe(), ": lowering gave ",
                   k_out.outputs.size(), " outputs");
    for (size_t j = 0; j < node.outputs.size(); ++j) {
      const int v = node.outputs[j];
      const int viewed = k_out.alias_of.empty() || k_out.alias_of[j] < 0 ? -1 : op_slots[size_t(k_out.alias_of[j])];
      if (j == 0 && epilogue) {  // the kernels store the epilogue's value into output 0's slot
        op_slots.push_back(place(epilogue->output_values[0], k_out.outputs[0]));
      } else if (v < 0) {
        op_slots.push_back(b_.add_slot(k_out.outputs[j]));  // an unused output still needs a buffer
      } else if (viewed >= 0 && region_output_slot(v) < 0) {
        op_slots.push_back(slot_of_[v] = b_.add_slot(k_out.outputs[j], viewed));  // a view, no copy
      } else if (viewed >= 0 && !views_constant(viewed)) {  // a region output viewing a buffer
        const int s = place(v, k_out.outputs[j]);
        b_.alias[size_t(s)] = viewed;
        op_slots.push_back(s);
      } else if (viewed >= 0) {  // a view of a constant: the caller gets a copy of its own
        LoweredStep copy;
        copy.kind = LoweredStep::Kind::Copy;
        copy.slots = {viewed, place(v, k_out.outputs[j])};
        copy.node = node.describe();
        op_slots.push_back(copy.slots[1]);
        b_.steps.push_back(std::move(copy));
      } else {
        op_slots.push_back(place(v, k_out.outputs[j]));
      }
    }
    if (prologue)
      for (int s : prologue->input_slots) op_slots.push_back(s);
    if (epilogue)
      for (int s : epilogue->input_slots)
        if (s >= 0) op_slots.push_back(s);
    for (const kernels::TensorSig& sig : k_out.scratch) op_slots.push_back(b_.add_slot(sig));
    const size_t first = b_.steps.size();
    for (const kernels::OpKernels::Call& call : k_out.calls) {
      std::vector<int> slots;
      for (int s : call.slots) slots.push_back(op_slots[size_t(s)]);
      b_.steps.push_back(kernel_step(call.func, std::move(slots)));
      b_.steps.back().node = node.describe();
    }
    if (k_out.error_slot >= 0 && b_.steps.size() > first) {
      for (size_t p = first; p < b_.steps.size(); ++p) {
        b_.steps[p].error_slot = op_slots[size_t(k_out.error_slot)];
        b_.steps[p].error_message = k_out.error_message;
      }
      b_.steps[first].check_first = true;
      b_.steps.back().check_last = true;
    }
    return next;
  }

  const Graph& g_;
  const Region& region_;
  const std::vector<Tensor>& inputs_;
  LoweredRegion& b_;
  std::map<int, int> slot_of_;  // value id -> slot holding it
  std::map<int, Tensor> known_;
  std::function<const Tensor*(int)> known_fn_ = [this](int v) { return known_value(v); };
  kernels::TensorSig operand_sig_;  // make_group's `operand`: the fused op's output 0
};

}  // namespace

bool evaluable_at_compile_time(const Graph& g, const Node& node) { return evaluable_here_impl(g, node); }

std::string can_lower_node(const Graph& g, const Node& node) {
  if (evaluable_here_impl(g, node)) return "";  // computed when the region is compiled
  if (std::string why = kernels::narrow_dtype_reason(g, node); !why.empty()) return why;
  if (std::strcmp(op_family(node.op), "elementwise") != 0) {
    if (kernels::is_reduction_op(node.op) || kernels::is_movement_op(node.op)) return kernels::can_lower_op(g, node);
    return std::string(op_name(node.op)) + " (" + op_family(node.op) + ") is not among the ops the kernel IR lowers";
  }
  std::vector<DType> dtypes;
  for (int v : node.inputs) {
    if (v < 0) { dtypes.push_back(DType::Float32); continue; }
    const ValueInfo& info = g.values[size_t(v)].info;
    if (info.kind != ValueKind::Tensor || !info.dtype)
      return "input '" + g.values[size_t(v)].name + "' has no known tensor dtype";
    dtypes.push_back(*info.dtype);
  }
  if (!kernels::can_lower(node, dtypes)) return std::string("cannot lower ") + op_name(node.op) + " with these dtypes";
  return "";
}

LoweredRegion lower_region(const Graph& g, const Region& region, const std::vector<Tensor>& inputs) {
  LoweredRegion lowered;
  for (const Tensor& t : inputs) lowered.add_slot({t.dtype(), t.shape()});
  MixedBuilder m{g, region, inputs, lowered};
  m.build();
  return lowered;
}

}  // namespace terrace
