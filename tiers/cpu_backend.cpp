// Tier 1 backend. An elementwise region -> fusion groups (one per iteration domain) -> kernel IR ->
// C++ -> Clang/ORC; a MatMul, Gemm or Conv region (with a Relu it absorbed) -> a oneDNN primitive.
#include "tiers/backend.h"

#ifdef TERRACE_HAVE_CPU_JIT
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <optional>

#include "interp/interpreter.h"
#include "jit/cpu_kernel.h"
#include "jit/dnnl_ops.h"
#include "tiers/cpu_library.h"
#include "interp/log.h"
#include "kernels/lower.h"
#include "kernels/lower_op.h"
#include "kernels/printer.h"
#include "kernels/split.h"
#endif

namespace terrace {

#ifndef TERRACE_HAVE_CPU_JIT
// Built without the JIT library: no tier-1 backend, every region stays on the interpreter.
std::unique_ptr<Backend> make_cpu_backend(const std::string&) { return nullptr; }
#else

namespace {

class CpuRegion : public CompiledRegion {
 public:
  // One step of the region over its slot table: a compiled kernel, a library primitive, or a copy
  // of one slot into another (a region output that is a view of another value).
  struct Part {
    std::optional<jit::CpuKernel> kernel;
    std::unique_ptr<jit::DnnlPrimitive> primitive;
    std::vector<int> slots;  // the kernel's buffers; a primitive's inputs then output; a copy's source then target
    std::string node;        // the op's node, for errors
    // Run-time checks of a lowered op (kernels::OpKernels::error_slot): zeroed before its first
    // kernel (check_first), read after its last one (check_last).
    int error_slot = -1;
    bool check_first = false, check_last = false;
    std::string error_message;
  };
  // `slots`: the region's inputs, its outputs, then intermediates. `alias[s]` >= 0: slot s is slot
  // alias[s]'s buffer seen with another shape (a Reshape or Squeeze), not a buffer of its own;
  // alias[s] <= -2: slot s holds constants[-2 - alias[s]], a value computed at compile time.
  CpuRegion(std::vector<Part> parts, std::vector<kernels::TensorSig> slots, std::vector<int> alias,
            std::vector<Tensor> constants, size_t n_inputs, size_t n_outputs, bool perturb)
      : parts_(std::move(parts)), slots_(std::move(slots)), alias_(std::move(alias)),
        constants_(std::move(constants)), n_inputs_(n_inputs), n_outputs_(n_outputs), perturb_(perturb) {
    for (const Part& p : parts_) {
      if (p.kernel) source += p.kernel->source;
      else if (p.primitive) source += "// a library primitive, no generated code:\n// " + p.primitive->describe() + "\n";
    }
  }

  std::vector<Tensor> run(const std::vector<Tensor>& inputs) override {
    std::vector<Tensor> owned;  // outputs, then intermediates
    std::vector<void*> table(slots_.size(), nullptr);
    for (size_t s = 0; s < inputs.size(); ++s) table[s] = const_cast<void*>(inputs[s].raw());
    owned.reserve(slots_.size() - n_inputs_);
    for (size_t s = n_inputs_; s < slots_.size(); ++s) {
      if (alias_[s] != -1) {
        owned.emplace_back();
        if (alias_[s] <= -2) table[s] = const_cast<void*>(constants_[size_t(-2 - alias_[s])].raw());
        continue;
      }
      owned.push_back(Tensor::empty(slots_[s].dtype, slots_[s].shape));
      table[s] = owned.back().raw();
    }
    for (size_t s = n_inputs_; s < slots_.size(); ++s)  // aliases refer to earlier slots only
      if (alias_[s] >= 0) table[s] = table[size_t(alias_[s])];
    std::vector<void*> buffers;
    std::vector<const float*> args;
    for (const Part& p : parts_) {
      if (p.check_first) std::memset(table[size_t(p.error_slot)], 0, 2 * sizeof(int64_t));
      if (p.kernel) {
        buffers.clear();
        for (int s : p.slots) buffers.push_back(table[size_t(s)]);
        jit::run_cpu_kernel(*p.kernel, buffers);
      } else if (p.primitive) {
        args.clear();
        for (size_t i = 0; i + 1 < p.slots.size(); ++i) args.push_back(static_cast<const float*>(table[size_t(p.slots[i])]));
        try {
          p.primitive->run(args, static_cast<float*>(table[size_t(p.slots.back())]));
        } catch (const Error& e) {
          fail(e.code(), p.node, ": ", e.message());
        }
      } else {
        const kernels::TensorSig& sig = slots_[size_t(p.slots[1])];
        std::memcpy(table[size_t(p.slots[1])], table[size_t(p.slots[0])],
                    size_t(shape_numel(sig.shape)) * dtype_size(sig.dtype));
      }
      if (p.check_last) {
        const auto* word = static_cast<const int64_t*>(table[size_t(p.error_slot)]);
        if (word[0] != 0) fail(ErrorCode::InvalidArgument, p.node, ": ", p.error_message, " (got ", word[1], ")");
      }
    }
    owned.resize(n_outputs_);
    if (perturb_ || (perturb_late_ && runs_.fetch_add(1) >= kHonestRuns)) perturb(owned);
    return owned;
  }

 private:
  // TERRACE_FAULT=miscompile:cpu: a deliberately wrong result, for testing validation.
  static void perturb(std::vector<Tensor>& out) {
    for (Tensor& t : out) {
      if (t.numel() == 0) continue;
      if (t.dtype() == DType::Float32) t.data<float>()[0] += 1.0f;
      else if (t.dtype() == DType::Float64) t.data<double>()[0] += 1.0;
      else if (t.dtype() == DType::Bool) t.data<bool>()[0] = !t.data<bool>()[0];
      else if (t.dtype() == DType::Int32) t.data<int32_t>()[0] += 1;
      else if (t.dtype() == DType::Int64) t.data<int64_t>()[0] += 1;
    }
  }
  std::vector<Part> parts_;
  std::vector<kernels::TensorSig> slots_;
  std::vector<int> alias_;
  std::vector<Tensor> constants_;
  size_t n_inputs_, n_outputs_;
  bool perturb_;
  // TERRACE_FAULT=miscompile-late:cpu: right for the first kHonestRuns runs (the validated
  // calls), wrong after, for testing continuous validation.
  static constexpr int64_t kHonestRuns = 3;
  bool perturb_late_ = fault_enabled("miscompile-late:cpu");
  std::atomic<int64_t> runs_{0};
};

class CpuBackend : public Backend {
 public:
  explicit CpuBackend(const std::string& cache_dir) {
    if (!cache_dir.empty()) cache_.emplace(cache_dir);
  }
  Tier tier() const override { return Tier::Cpu; }

  std::string can_compile(const Graph& g, const Node& node) const override {
    if (cpu_library::is_library_op(node.op)) return cpu_library::can_compile(g, node);
    if (evaluable_here(g, node)) return "";  // computed when the region is compiled
    if (std::strcmp(op_family(node.op), "elementwise") != 0) {
      if (kernels::is_reduction_op(node.op) || kernels::is_movement_op(node.op)) return kernels::can_lower_op(g, node);
#ifdef TERRACE_HAVE_DNNL
      const char* what = "elementwise ops, and MatMul, Gemm and Conv through oneDNN";
#else
      const char* what = "elementwise ops (built without oneDNN: no MatMul, Gemm or Conv)";
#endif
      return std::string("tier 1 compiles ") + what + "; " + op_name(node.op) + " (" + op_family(node.op) +
             ") is not among them";
    }
    std::vector<DType> dtypes;
    for (int v : node.inputs) {
      if (v < 0) { dtypes.push_back(DType::Float32); continue; }
      const ValueInfo& info = g.values[size_t(v)].info;
      if (info.kind != ValueKind::Tensor || !info.dtype)
        return "input '" + g.values[size_t(v)].name + "' has no known tensor dtype";
      dtypes.push_back(*info.dtype);
    }
    if (!kernels::can_lower(node, dtypes))
      return std::string("tier 1 cannot lower ") + op_name(node.op) + " with these dtypes";
    return "";
  }

  // A library op is a region by itself (tiers/cpu_library.h), with the activation it absorbs.
  bool alone(const Node& node) const override { return cpu_library::is_library_op(node.op); }
  bool absorbs(const Graph& g, const Node& node, const Node& next) const override {
    return cpu_library::absorbs(g, node, next);
  }
  std::vector<Tensor> error_allowance(const Graph& g, const Region& region,
                                      const std::vector<Tensor>& inputs) const override {
    return cpu_library::error_allowance(g, region, inputs);
  }

  // Partition gives tier 1 two kinds of region: one library op (with the activation it absorbs),
  // or a run of elementwise ops (fused into as few kernels as their iteration domains allow) and
  // lowered ops (reductions, data movement: kernels/lower_op.h), over one slot table.
  std::unique_ptr<CompiledRegion> compile(const Graph& g, const Region& region,
                                          const std::vector<Tensor>& inputs) override {
    RegionBuild b;
    for (const Tensor& t : inputs) b.add_slot({t.dtype(), t.shape()});
    if (cpu_library::is_library_op(g.nodes[size_t(region.nodes[0])].op)) {
      cpu_library::LibraryPart lib = cpu_library::compile_library(g, region, b.slots);
      b.alias.resize(b.slots.size(), -1);
      b.ir = lib.primitive->describe() + "\n";
      CpuRegion::Part part;
      part.primitive = std::move(lib.primitive);
      part.slots = std::move(lib.slots);
      part.node = std::move(lib.node);
      b.parts.push_back(std::move(part));
    } else {
      build_mixed(g, region, inputs, b);
    }
    auto compiled = std::make_unique<CpuRegion>(std::move(b.parts), std::move(b.slots), std::move(b.alias),
                                                std::move(b.constants), region.inputs.size(),
                                                region.outputs.size(), fault_enabled("miscompile:cpu"));
    compiled->ir = std::move(b.ir);
    compiled->value_inputs = std::move(b.value_inputs);
    return compiled;
  }

 private:
  struct RegionBuild {
    std::vector<kernels::TensorSig> slots;  // the region's inputs, its outputs, then intermediates
    std::vector<int> alias;                 // per slot: the slot whose buffer it views, -1, or a constant
    std::vector<Tensor> constants;          // values computed at compile time that kernels read
    std::vector<int> value_inputs;          // region inputs whose values the version assumes
    std::vector<CpuRegion::Part> parts;
    std::string ir;
    int add_slot(kernels::TensorSig sig, int alias_of = -1) {
      slots.push_back(std::move(sig));
      alias.push_back(alias_of);
      return int(slots.size()) - 1;
    }
  };

  CpuRegion::Part compile_kernel(const kernels::LoweredFunc& f, std::vector<int> slots, RegionBuild& b) {
    CpuRegion::Part part;
    part.kernel = jit::compile_cpu_kernel(f, jit::CpuJit::global(), cache_ ? &*cache_ : nullptr);
    part.slots = std::move(slots);
    b.ir += kernels::to_string(f);
    return part;
  }

  // The region's nodes in order: each maximal run of elementwise nodes becomes one fusion group
  // (split by iteration domain), each other node its lowered kernels. Region outputs get the slots
  // after the inputs; a region output that is a view of another value is copied into its slot.
  void build_mixed(const Graph& g, const Region& region, const std::vector<Tensor>& inputs, RegionBuild& b) {
    const size_t n_in = region.inputs.size(), n_out = region.outputs.size();
    std::map<int, int> slot_of;  // value id -> slot holding it
    for (size_t i = 0; i < n_in; ++i) slot_of[region.inputs[i]] = int(i);
    // Values known at compile time (kernels::known_at_compile_time): initializers, values computed
    // here from shapes, and small region inputs derived from shapes, which the version's guards pin.
    std::map<int, Tensor> known;
    auto known_value = [&](int v) -> const Tensor* {
      if (auto it = known.find(v); it != known.end()) return &it->second;
      if (auto init = g.initializers.find(v);
          init != g.initializers.end() && std::find(g.inputs.begin(), g.inputs.end(), v) == g.inputs.end())
        return &init->second;
      auto in = std::find(region.inputs.begin(), region.inputs.end(), v);
      if (in == region.inputs.end() || !kernels::known_at_compile_time(g, v)) return nullptr;
      const int i = int(in - region.inputs.begin());
      if (inputs[size_t(i)].numel() > kMaxValueGuardElements) return nullptr;
      b.value_inputs.push_back(i);
      return &(known[v] = inputs[size_t(i)]);
    };
    for (size_t j = 0; j < n_out; ++j) b.add_slot({});  // signatures set when computed
    auto is_region_output = [&](int v) {
      auto it = std::find(region.outputs.begin(), region.outputs.end(), v);
      return it == region.outputs.end() ? -1 : int(n_in + size_t(it - region.outputs.begin()));
    };
    // Where a computed value goes: its region output slot, or a new intermediate.
    auto place = [&](int v, const kernels::TensorSig& sig) {
      int s = is_region_output(v);
      if (s >= 0) b.slots[size_t(s)] = sig;
      else s = b.add_slot(sig);
      slot_of[v] = s;
      return s;
    };
    // Values read by region nodes at or after position k (or outside the region).
    auto read_later = [&](int v, size_t k) {
      if (is_region_output(v) >= 0) return true;
      for (size_t i = k; i < region.nodes.size(); ++i)
        for (int u : g.nodes[size_t(region.nodes[i])].inputs)
          if (u == v) return true;
      return false;
    };
    auto is_elementwise = [&](const Node& n) { return std::strcmp(op_family(n.op), "elementwise") == 0; };
    // A value computed at compile time that a kernel reads (or the region returns) gets a slot
    // holding it.
    auto materialize = [&](int v) {
      if (slot_of.count(v)) return;
      auto it = known.find(v);
      if (it == known.end()) return;
      b.constants.push_back(it->second);
      slot_of[v] = b.add_slot({it->second.dtype(), it->second.shape()}, -2 - int(b.constants.size() - 1));
    };

    size_t k = 0;
    int group_count = 0;
    while (k < region.nodes.size()) {
      const Node& first = g.nodes[size_t(region.nodes[k])];
      if (evaluate_at_compile_time(g, first, slot_of, b, known_value, known)) {
        ++k;
        continue;
      }
      if (!is_elementwise(first)) {
        lower_node(g, first, "region" + std::to_string(region.id) + "_n" + std::to_string(k), slot_of,
                   is_region_output, place, known_value, materialize, b);
        ++k;
        continue;
      }
      size_t end = k;
      while (end < region.nodes.size() && is_elementwise(g.nodes[size_t(region.nodes[end])]) &&
             (end == k || !evaluable_here(g, g.nodes[size_t(region.nodes[end])])))
        ++end;
      // The run [k, end) as one fusion group over the slots it reads.
      kernels::FusionGroup group;
      group.name = "region" + std::to_string(region.id) + (group_count++ ? "_g" + std::to_string(group_count) : "");
      std::vector<int> input_slots;
      std::map<int, kernels::Operand> where;
      auto operand_of = [&](const Node& node, int v) {
        if (auto it = where.find(v); it != where.end()) return it->second;
        materialize(v);
        auto s = slot_of.find(v);
        TERRACE_ASSERT(s != slot_of.end(), "tier 1: ", node.describe(), " reads a value its region has not computed");
        group.inputs.push_back(b.slots[size_t(s->second)]);
        input_slots.push_back(s->second);
        kernels::Operand op = kernels::Operand::input(int(input_slots.size()) - 1);
        where[v] = op;
        return op;
      };
      std::vector<int> produced;
      for (size_t i = k; i < end; ++i) {
        const Node& node = g.nodes[size_t(region.nodes[i])];
        kernels::FusedOp op;
        op.node = node;
        for (int v : node.inputs) op.operands.push_back(v < 0 ? kernels::Operand::absent() : operand_of(node, v));
        group.ops.push_back(std::move(op));
        const int index = int(group.ops.size()) - 1;
        group.ops.back().result = kernels::infer_result(group, index);
        TERRACE_CHECK(node.outputs.size() == 1, NotImplemented, node.describe(), " has ",
                      node.outputs.size(), " outputs; tier 1 fuses single-output ops");
        where[node.outputs[0]] = kernels::Operand::result(index);
        produced.push_back(node.outputs[0]);
      }
      std::vector<int> output_values;
      for (int v : produced)
        if (read_later(v, end)) {
          group.outputs.push_back(where[v].index);
          output_values.push_back(v);
        }
      k = end;
      if (group.outputs.empty()) continue;  // dead ops
      kernels::SplitGroup split = kernels::split_by_domain(group);
      // The split's slot table (group inputs, group outputs, its intermediates) in the region's.
      std::vector<int> map;
      for (int s : input_slots) map.push_back(s);
      for (size_t j = 0; j < output_values.size(); ++j)
        map.push_back(place(output_values[j], split.slots[input_slots.size() + j]));
      for (size_t s = map.size(); s < split.slots.size(); ++s) map.push_back(b.add_slot(split.slots[s]));
      for (const kernels::KernelPart& p : split.parts) {
        std::vector<int> slots;
        for (int s : p.input_slots) slots.push_back(map[size_t(s)]);
        for (int s : p.output_slots) slots.push_back(map[size_t(s)]);
        b.parts.push_back(compile_kernel(kernels::lower(p.group), std::move(slots), b));
      }
    }
    for (size_t j = 0; j < n_out; ++j) {  // region outputs computed at compile time: copied out
      const int v = region.outputs[j];
      if (slot_of.count(v) && size_t(slot_of[v]) == n_in + j) continue;
      materialize(v);
      if (auto it = known.find(v); it != known.end()) {
        CpuRegion::Part copy;
        copy.slots = {slot_of[v], int(n_in + j)};
        b.slots[n_in + j] = {it->second.dtype(), it->second.shape()};
        b.parts.push_back(std::move(copy));
        slot_of[v] = int(n_in + j);
      }
    }
    for (size_t j = 0; j < n_out; ++j)
      TERRACE_ASSERT(slot_of.count(region.outputs[j]), "tier 1: region output '",
                     g.values[size_t(region.outputs[j])].name, "' is not computed in it");
  }

  // Value guards cover region inputs of at most this many elements (a guard compares them per call).
  static constexpr int64_t kMaxValueGuardElements = 1 << 16;

  // A node whose every output is known at compile time (kernels::known_at_compile_time).
  static bool evaluable_here(const Graph& g, const Node& node) {
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
  static bool evaluate_at_compile_time(const Graph& g, const Node& node, const std::map<int, int>& slot_of,
                                       const RegionBuild& b, KnownValue& known_value, std::map<int, Tensor>& known) {
    if (!evaluable_here(g, node)) return false;
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

  // A reduction or data-movement node: its kernels (kernels/lower_op.h) over region slots.
  // `output_slot(v)`: v's region output slot, or -1; `place(v, sig)`: the slot v is computed into.
  void lower_node(const Graph& g, const Node& node, const std::string& name, std::map<int, int>& slot_of,
                  const std::function<int(int)>& output_slot,
                  const std::function<int(int, const kernels::TensorSig&)>& place,
                  const std::function<const Tensor*(int)>& known_value, const std::function<void(int)>& materialize,
                  RegionBuild& b) {
    std::vector<kernels::OpInput> in;
    std::vector<int> op_slots;  // the op's slot table in the region's
    for (int v : node.inputs) {
      kernels::OpInput x;
      if (v < 0) {
        x.absent = true;
        op_slots.push_back(-1);
      } else {
        x.value = known_value(v);
        materialize(v);
        auto s = slot_of.find(v);
        TERRACE_ASSERT(s != slot_of.end(), "tier 1: ", node.describe(), " reads a value its region has not computed");
        x.sig = b.slots[size_t(s->second)];
        op_slots.push_back(s->second);
      }
      in.push_back(std::move(x));
    }
    kernels::OpKernels k = kernels::lower_op(node, in, name);
    TERRACE_ASSERT(k.outputs.size() == node.outputs.size(), node.describe(), ": lowering gave ",
                   k.outputs.size(), " outputs");
    for (size_t j = 0; j < node.outputs.size(); ++j) {
      const int v = node.outputs[j];
      const int viewed = k.alias_of.empty() || k.alias_of[j] < 0 ? -1 : op_slots[size_t(k.alias_of[j])];
      if (v < 0) {
        op_slots.push_back(b.add_slot(k.outputs[j]));  // an unused output still needs a buffer
      } else if (viewed >= 0 && output_slot(v) < 0) {
        op_slots.push_back(slot_of[v] = b.add_slot(k.outputs[j], viewed));  // a view, no copy
      } else if (viewed >= 0) {  // region outputs are tensors of their own: copied
        CpuRegion::Part copy;
        copy.slots = {viewed, place(v, k.outputs[j])};
        copy.node = node.describe();
        op_slots.push_back(copy.slots[1]);
        b.parts.push_back(std::move(copy));
      } else {
        op_slots.push_back(place(v, k.outputs[j]));
      }
    }
    for (const kernels::TensorSig& sig : k.scratch) op_slots.push_back(b.add_slot(sig));
    const size_t first = b.parts.size();
    for (const kernels::OpKernels::Call& call : k.calls) {
      std::vector<int> slots;
      for (int s : call.slots) slots.push_back(op_slots[size_t(s)]);
      b.parts.push_back(compile_kernel(call.func, std::move(slots), b));
      b.parts.back().node = node.describe();
    }
    if (k.error_slot >= 0 && b.parts.size() > first) {
      for (size_t p = first; p < b.parts.size(); ++p) {
        b.parts[p].error_slot = op_slots[size_t(k.error_slot)];
        b.parts[p].error_message = k.error_message;
      }
      b.parts[first].check_first = true;
      b.parts.back().check_last = true;
    }
  }

 private:
  std::optional<jit::CodeCache> cache_;  // Options::cache_dir, when set
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const std::string& cache_dir) {
  return std::make_unique<CpuBackend>(cache_dir);
}

#endif

}  // namespace terrace
