// Tier 1 backend. A generated-code region -> its lowering (tiers/region_lowering.h: kernel IR over
// one slot table) -> C++ -> Clang/ORC; a library region (tiers/cpu/cpu_library.h) -> oneDNN primitives.
#include "tiers/cpu/cpu_backend.h"

#ifdef TERRACE_HAVE_CPU_JIT
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <variant>

#include "interp/log.h"
#include "jit/cpu/cpu_kernel.h"
#include "jit/cpu/dnnl_ops.h"
#include "kernels/printer.h"
#include "tiers/cpu/cpu_library.h"
#include "tiers/cpu/kernel_allowance.h"
#include "tiers/region_lowering.h"
#include "tiers/region_program.h"
#include "tiers/symbolic_lowering.h"
#endif

namespace terrace {

#ifndef TERRACE_HAVE_CPU_JIT
// Built without the JIT library: no tier-1 backend, every region stays on the interpreter.
std::unique_ptr<Backend> make_cpu_backend(const std::string&, std::string* why) {
  if (why) *why = "this build has no tier-1 JIT";
  return nullptr;
}
#else

namespace {

// Tier 1's work in a step: a JIT'd kernel (its slots: the kernel's buffers) or a oneDNN primitive
// (its slots: its inputs, then its outputs).
using CpuWork = std::variant<jit::CpuKernel, std::unique_ptr<jit::DnnlPrimitive>>;
using CpuStep = ProgramStep<CpuWork>;

// A symbolic version's shapes (tiers/symbolic_lowering.h): each a function of one size, read from
// the call's inputs; the slot table and memory plan are the largest size's.
struct SymbolicShapes {
  std::pair<int, int> at;  // the (input, dim) the size is read from
  int dims_slot = -1;      // the kernels' int64 parameter
  std::vector<std::vector<Poly>> slot_dims;
  std::vector<Poly> extents, work;  // per step
  std::vector<std::pair<int, std::vector<Poly>>> constants;  // integer constants that depend on it
};

class CpuRegion : public CompiledRegion {
 public:
  CpuRegion(std::vector<CpuStep> steps, SlotTable table, bool perturb)
      : steps_(std::move(steps)), table_(std::move(table)), perturb_(perturb),
        plan_(plan_memory(table_, steps_, 64)) {
    output_storage = storage_of_outputs(table_, plan_);
    for (const CpuStep& s : steps_) {
      if (!s.work) continue;
      if (const auto* k = std::get_if<jit::CpuKernel>(&*s.work)) source += k->source;
      else
        source += "// a library primitive, no generated code:\n// " +
                  std::get<std::unique_ptr<jit::DnnlPrimitive>>(*s.work)->describe() + "\n";
    }
  }

  void forget_cached() override {
    for (const CpuStep& s : steps_)
      if (const auto* k = s.work ? std::get_if<jit::CpuKernel>(&*s.work) : nullptr; k && k->code)
        k->code->forget_cached();
  }

  using CompiledRegion::run;
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, CallTally& tally) override {
    return run_into(inputs, {}, tally);
  }
  std::vector<Tensor> run_into(const std::vector<Tensor>& inputs, const std::vector<Tensor>& into,
                               CallTally&) override {  // copies none
    std::unique_ptr<Workspace> ws = take_workspace();
    // Back to the pool however run() ends (a run-time check's error included).
    struct Return {
      CpuRegion* self;
      std::unique_ptr<Workspace>& ws;
      ~Return() { self->give_back(std::move(ws)); }
    } give_back_on_exit{this, ws};
    const std::vector<kernels::TensorSig>& sigs = shapes_for(*ws, inputs);
    std::vector<Tensor> owned = bind_slots(*ws, inputs, into, sigs);
    Host host{ws->table, *ws, sigs, steps_.data(), sym_ ? sym_->dims_slot : -1};
    run_program(steps_, host);
    if (perturb_ || (perturb_late_ && runs_.fetch_add(1) >= kHonestRuns))
      for (Tensor& t : owned) {
        t = t.clone();  // an output may be a view of a region input: never write through it
        perturb_for_fault(t);
      }
    return owned;
  }

  // Bytes of one workspace's intermediates (their buffers share memory by liveness), for tests.
  size_t workspace_bytes() const { return plan_.arena_bytes; }

  // Which region outputs are model outputs (their buffers are reused across calls: output_buffer).
  void keep_outputs(std::vector<bool> keep) { keep_outputs_ = std::move(keep); }
  void set_symbolic(SymbolicShapes s) { sym_ = std::move(s); }

 private:
  // What one call needs beyond its inputs and outputs, kept across calls: the intermediates in one
  // 64-byte-aligned block (allocating and page-faulting them each call was part of every call's
  // cost) and the slot table pointing into it. One workspace per concurrent call: run() takes one
  // from the pool (making one when none is free) and gives it back.
  struct Workspace {
    std::unique_ptr<unsigned char, decltype(&std::free)> arena{nullptr, &std::free};
    std::vector<void*> table, buffers;
    std::vector<const float*> args;
    std::vector<float*> outs;
    std::map<size_t, Tensor> escaping;  // this call's intermediates that an output views
    // Per region output that is a model output (keep_outputs): the buffers of earlier calls, for
    // reuse once the caller has let go of them (at most kKeptBuffers each).
    std::vector<std::vector<Tensor>> kept;
    // A symbolic version's: the size the shapes below are for (-1: none yet), the slots' shapes
    // and each step's range at that size.
    int64_t d = -1;
    std::vector<kernels::TensorSig> sigs;
    std::vector<int64_t> extents, work;
    std::map<size_t, Tensor> constants;  // by constant index: the size-dependent ones, at d
  };

  // Where constant i lives for this workspace: its own copy where it depends on the size.
  void* constant_ptr(Workspace& ws, size_t i) const {
    if (auto it = ws.constants.find(i); it != ws.constants.end()) return it->second.raw();
    return const_cast<void*>(table_.constants[i].raw());
  }

  // The size-dependent integer constants at size d, in the workspace's copies.
  void fill_constants(Workspace& ws, int64_t d) {
    for (const auto& [i, polys] : sym_->constants) {
      Tensor& t = ws.constants[size_t(i)];
      if (!t.defined()) t = table_.constants[size_t(i)].clone();
      for (size_t k = 0; k < polys.size(); ++k)
        if (t.dtype() == DType::Int64) t.data<int64_t>()[k] = polys[k].at(d);
        else t.data<int32_t>()[k] = int32_t(polys[k].at(d));
    }
    for (size_t s = table_.n_inputs; s < table_.size(); ++s)
      if (table_.alias[s] <= -2) ws.table[s] = constant_ptr(ws, size_t(-2 - table_.alias[s]));
  }

  // The slots' signatures for this call: the table's, or a symbolic version's at the call's size.
  const std::vector<kernels::TensorSig>& shapes_for(Workspace& ws, const std::vector<Tensor>& inputs) {
    if (!sym_) return table_.sigs;
    const int64_t d = inputs.at(size_t(sym_->at.first)).dim(sym_->at.second);
    if (d == ws.d) return ws.sigs;
    ws.sigs = table_.sigs;
    for (size_t s = 0; s < ws.sigs.size(); ++s)
      for (size_t k = 0; k < ws.sigs[s].shape.size(); ++k) ws.sigs[s].shape[k] = sym_->slot_dims[s][k].at(d);
    ws.extents.clear();
    ws.work.clear();
    for (size_t k = 0; k < steps_.size(); ++k) {
      ws.extents.push_back(sym_->extents[k].at(d));
      ws.work.push_back(sym_->work[k].at(d));
    }
    fill_constants(ws, d);
    ws.d = d;
    return ws.sigs;
  }

  // Tier 1's side of run_program: host memory through the workspace's slot table.
  struct Host {
    std::vector<void*>& table;
    Workspace& ws;
    const std::vector<kernels::TensorSig>& sigs;
    const CpuStep* first;  // steps_.data(): a step's index picks its range in a symbolic version
    int dims_slot;         // a symbolic version's size parameter, -1: none
    void zero_word(int slot) { std::memset(table[size_t(slot)], 0, 2 * sizeof(int64_t)); }
    void copy(int from, int to) {
      const kernels::TensorSig& sig = sigs[size_t(to)];
      std::memcpy(table[size_t(to)], table[size_t(from)], size_t(shape_numel(sig.shape)) * dtype_size(sig.dtype));
    }
    void check(const CpuStep& s) {
      raise_if_set(static_cast<const int64_t*>(table[size_t(s.error_slot)]), s.node, s.error_message);
    }
    void run(const CpuStep& s) {
      if (const auto* k = std::get_if<jit::CpuKernel>(&*s.work)) {
        ws.buffers.clear();
        for (int slot : s.slots) ws.buffers.push_back(table[size_t(slot)]);
        if (dims_slot < 0) {
          jit::run_cpu_kernel(*k, ws.buffers);
          return;
        }
        // Written before each kernel: the arena may lend the word to a copy's value between them.
        *static_cast<int64_t*>(table[size_t(dims_slot)]) = ws.d;
        const size_t at = size_t(&s - first);
        jit::run_cpu_kernel(*k, ws.buffers, ws.extents[at], ws.work[at]);
        return;
      }
      const jit::DnnlPrimitive& p = *std::get<std::unique_ptr<jit::DnnlPrimitive>>(*s.work);
      ws.args.clear();
      ws.outs.clear();
      const size_t n_in = s.slots.size() - p.num_outputs();
      for (size_t i = 0; i < s.slots.size(); ++i)
        if (i < n_in) ws.args.push_back(static_cast<const float*>(table[size_t(s.slots[i])]));
        else ws.outs.push_back(static_cast<float*>(table[size_t(s.slots[i])]));
      try {
        if (p.runtime_shapes()) {  // a symbolic version's product: this call's operand shapes
          p.run_shaped(ws.args, ws.outs, sigs[size_t(s.slots[0])].shape, sigs[size_t(s.slots[1])].shape);
        } else {
          p.run_outputs(ws.args, ws.outs);
        }
      } catch (const Error& e) {
        fail(e.code(), s.node, ": ", e.message());
      }
    }
  };

  // Points the workspace's table at this call's inputs, outputs (into[o] where given and fitting)
  // and escaping intermediates (the planned ones and the constants are set once per workspace);
  // returns the outputs.
  std::vector<Tensor> bind_slots(Workspace& ws, const std::vector<Tensor>& inputs, const std::vector<Tensor>& into,
                                 const std::vector<kernels::TensorSig>& sigs) {
    const size_t n_in = table_.n_inputs, n_out = table_.n_outputs;
    std::vector<void*>& table = ws.table;
    std::vector<Tensor> owned(n_out);  // the outputs: they leave the region
    for (size_t s = 0; s < inputs.size(); ++s) table[s] = const_cast<void*>(inputs[s].raw());
    for (size_t s = n_in; s < n_in + n_out; ++s) {
      if (table_.alias[s] != -1) {
        if (table_.alias[s] <= -2) table[s] = constant_ptr(ws, size_t(-2 - table_.alias[s]));
        continue;
      }
      const size_t o = s - n_in;
      owned[o] = o < into.size() && fits(into[o], sigs[s], false) ? into[o] : output_buffer(ws, o, sigs[s]);
      table[s] = owned[s - n_in].raw();
    }
    for (size_t s : plan_.escaping) {  // an intermediate an output views: a buffer of this call's own
      Tensor& t = ws.escaping[s];
      t = Tensor::empty(sigs[s].dtype, sigs[s].shape);
      table[s] = t.raw();
    }
    // Views: the buffer of the slot they view (a region output view may come before its source).
    for (size_t s = n_in; s < table_.size(); ++s) {
      const size_t root = plan_.root[s];
      if (root == s) continue;
      table[s] = table[root];
      if (table_.output(s))  // a region output: a view of its source tensor
        owned[s - n_in] = (root < n_in ? inputs[root] : table_.output(root) ? owned[root - n_in] : ws.escaping.at(root))
                              .reshaped(sigs[s].shape);
    }
    ws.escaping.clear();
    return owned;
  }

  // A model output's buffer, reused from an earlier call when no one else holds it; else a new one,
  // kept for later calls while fewer than kKeptBuffers are. Large outputs (GPT-2's logits) are
  // mapped fresh by glibc and given back at free, so that every call page-faulted them in again
  // (bench/RESULTS.md). Two buffers cover a caller that holds the last call's outputs until the
  // next call returns (`out = session.run(in)`), as ONNX Runtime's arena does. Intermediates
  // between regions are not kept: their memory goes back between calls and peak RSS stays the
  // liveness plan's.
  Tensor output_buffer(Workspace& ws, size_t o, const kernels::TensorSig& sig) {
    if (o >= keep_outputs_.size() || !keep_outputs_[o] || sig.dtype == DType::String)
      return Tensor::empty(sig.dtype, sig.shape);
    if (ws.kept.size() != table_.n_outputs) ws.kept.resize(table_.n_outputs);
    std::vector<Tensor>& kept = ws.kept[o];
    for (const Tensor& t : kept)
      if (t.sole_owner() && t.shape() == sig.shape) return t;
    Tensor t = Tensor::empty(sig.dtype, sig.shape);
    if (kept.size() < kKeptBuffers) kept.push_back(t);
    else if (sym_)  // another size's buffer gives way to this size's
      for (Tensor& old : kept)
        if (old.sole_owner()) {
          old = t;
          break;
        }
    return t;
  }

  std::unique_ptr<Workspace> take_workspace() {
    {
      std::lock_guard<std::mutex> lock(pool_mu_);
      if (!pool_.empty()) {
        std::unique_ptr<Workspace> ws = std::move(pool_.back());
        pool_.pop_back();
        return ws;
      }
    }
    auto ws = std::make_unique<Workspace>();
    if (plan_.arena_bytes > 0) {
      ws->arena.reset(static_cast<unsigned char*>(std::aligned_alloc(64, plan_.arena_bytes)));
      TERRACE_CHECK(ws->arena, OutOfMemory, "tier 1: no memory for a region's ", plan_.arena_bytes, "-byte workspace");
      if (std::any_of(plan_.planned.begin(), plan_.planned.end(),
                      [&](size_t s) { return table_.sigs[s].dtype == DType::Bool; }))
        std::memset(ws->arena.get(), 0, plan_.arena_bytes);  // as Tensor::empty gives booleans
    }
    ws->table.assign(table_.size(), nullptr);
    for (size_t s : plan_.planned) ws->table[s] = ws->arena.get() + plan_.offset[s];
    for (size_t s = table_.n_inputs; s < table_.size(); ++s)
      if (table_.alias[s] <= -2) ws->table[s] = const_cast<void*>(table_.constants[size_t(-2 - table_.alias[s])].raw());
    size_t widest = 0;
    for (const CpuStep& s : steps_) widest = std::max(widest, s.slots.size());
    ws->buffers.reserve(widest);
    ws->args.reserve(widest);
    ws->outs.reserve(widest);
    return ws;
  }

  void give_back(std::unique_ptr<Workspace> ws) {
    if (!ws) return;
    std::lock_guard<std::mutex> lock(pool_mu_);
    pool_.push_back(std::move(ws));
  }

  std::vector<CpuStep> steps_;
  SlotTable table_;
  bool perturb_;  // TERRACE_FAULT=miscompile:cpu
  // TERRACE_FAULT=miscompile-late:cpu: right for the first kHonestRuns runs (the validated
  // calls), wrong after, for testing continuous validation.
  static constexpr int64_t kHonestRuns = 3;
  bool perturb_late_ = fault_enabled("miscompile-late:cpu");
  std::atomic<int64_t> runs_{0};
  MemoryPlan plan_;
  static constexpr size_t kKeptBuffers = 2;
  std::vector<bool> keep_outputs_;  // per region output: a model output
  std::optional<SymbolicShapes> sym_;
  std::mutex pool_mu_;
  std::vector<std::unique_ptr<Workspace>> pool_;
};

class CpuBackend : public Backend {
 public:
  explicit CpuBackend(const std::string& cache_dir) {
    if (!cache_dir.empty()) cache_.emplace(cache_dir);
  }
  Tier tier() const override { return Tier::Cpu; }
  int promotion_threshold(const Options& o) const override { return o.hot_threshold; }

  std::string can_compile(const Graph& g, const Node& node) const override {
    if (cpu_library::is_library_op(node.op)) return cpu_library::can_compile(g, node);
    if (std::string why = can_lower_node(g, node); !why.empty()) {
#ifdef TERRACE_HAVE_DNNL
      const char* what =
          "elementwise ops, reductions, data movement, and MatMul, Gemm, Conv, ConvTranspose, pools, LSTM, GRU and "
          "RNN through oneDNN";
#else
      const char* what = "elementwise ops, reductions and data movement (built without oneDNN: no MatMul, Gemm, Conv, "
                         "ConvTranspose, pools or recurrent ops)";
#endif
      return std::string("tier 1 compiles ") + what + "; " + why;
    }
    return "";
  }


  // A library op is a region by itself (tiers/cpu/cpu_library.h), with the activation it absorbs.
  bool alone(const Node& node) const override { return cpu_library::is_library_op(node.op); }
  bool absorbs(const Graph& g, const Node& node, const Node& next) const override {
    return cpu_library::absorbs(g, node, next);
  }
  std::vector<Tensor> error_allowance(const Graph& g, const Region& region,
                                      const std::vector<Tensor>& inputs) const override {
    if (cpu_library::is_library_op(g.nodes[size_t(region.nodes[0])].op)) return cpu_library::error_allowance(g, region, inputs);
    return cpu_kernels::error_allowance(g, region, inputs);
  }

  // Partition gives tier 1 two kinds of region: one library op (with the activation it absorbs),
  // or a run of elementwise ops (fused into as few kernels as their iteration domains allow) and
  // lowered ops (reductions, data movement: kernels/lower_op.h), over one slot table.
  std::unique_ptr<CompiledRegion> compile(const Graph& g, const Region& region,
                                          const std::vector<Tensor>& inputs) override {
    LoweredRegion lowered;  // the slot table (a library region's: its inputs, then its outputs)
    std::vector<CpuStep> steps;
    std::string ir;
    if (cpu_library::is_library_op(g.nodes[size_t(region.nodes[0])].op)) {
      for (const Tensor& t : inputs) lowered.add_slot({t.dtype(), t.shape()});
      cpu_library::LibraryPart lib = cpu_library::compile_library(g, region, lowered.slots);
      lowered.alias.resize(lowered.slots.size(), -1);
      ir = lib.primitive->describe() + "\n";
      CpuStep step;
      step.work.emplace(std::move(lib.primitive));
      step.slots = std::move(lib.slots);
      step.node = std::move(lib.node);
      steps.push_back(std::move(step));
    } else {
      lowered = lower_region(g, region, inputs);
      steps = compile_kernels(lowered, ir);
    }
    return finish(g, region, std::move(steps), lowered, std::move(ir));
  }

  // A generated-code region (tiers/symbolic_lowering.h), or a MatMul library region whose rows
  // are the symbol (cpu_library::compile_rows_matmul); other library regions keep static versions.
  std::unique_ptr<CompiledRegion> compile_symbolic(const Graph& g, const Region& region,
                                                   const std::vector<Tensor>& inputs, SymbolicDim& sym,
                                                   std::string& why) override {
    if (cpu_library::is_library_op(g.nodes[size_t(region.nodes[0])].op))
      return compile_symbolic_library(g, region, inputs, sym, why);
    std::optional<SymbolicLowering> sl = lower_symbolic(g, region, inputs, sym, why);
    if (!sl) return nullptr;
    std::string ir;
    std::vector<CpuStep> steps = compile_kernels(sl->lowered, ir);
    const int dims_slot = sl->dims_slot;
    auto compiled = finish(g, region, std::move(steps), sl->lowered, std::move(ir));
    compiled->set_symbolic({sym.positions.front(), dims_slot, std::move(sl->slot_dims), std::move(sl->extents),
                            std::move(sl->work), std::move(sl->constants)});
    return compiled;
  }

 private:
  std::unique_ptr<CompiledRegion> compile_symbolic_library(const Graph& g, const Region& region,
                                                           const std::vector<Tensor>& inputs, SymbolicDim& sym,
                                                           std::string& why) {
    if (!sym.values.empty()) {
      why = "a library region reading the size as a value";
      return nullptr;
    }
    LoweredRegion lowered;
    for (const Tensor& t : inputs) lowered.add_slot({t.dtype(), t.shape()});
    cpu_library::LibraryPart lib = cpu_library::compile_rows_matmul(g, region, lowered.slots, sym.positions, why);
    if (!lib.primitive) return nullptr;
    sym.lo = 1;  // the primitive takes any row count; the bound keeps products' sizes sane
    sym.hi = int64_t(1) << 16;
    lowered.alias.resize(lowered.slots.size(), -1);
    std::string ir = lib.primitive->describe() + "\n";
    // Every dim as in the example but the symbol's, and the output's rows, which are the input's.
    SymbolicShapes shapes;
    shapes.at = sym.positions.front();
    for (const kernels::TensorSig& s : lowered.slots) {
      shapes.slot_dims.emplace_back();
      for (int64_t d : s.shape) shapes.slot_dims.back().push_back(Poly{0, 0, d});
    }
    for (auto [i, d] : sym.positions) shapes.slot_dims[size_t(i)][size_t(d)] = Poly{0, 1, 0};
    const std::vector<Poly>& a = shapes.slot_dims[size_t(lib.slots[0])];
    const std::vector<Poly>& b = shapes.slot_dims[size_t(lib.slots[1])];
    std::vector<Poly>& out = shapes.slot_dims.back();  // a's rows, b's columns
    for (size_t k = 0; k + 1 < out.size(); ++k) out[k] = a[k];
    out.back() = b.back();
    shapes.extents.assign(1, Poly{});
    shapes.work.assign(1, Poly{});
    CpuStep step;
    step.work.emplace(std::move(lib.primitive));
    step.slots = std::move(lib.slots);
    step.node = std::move(lib.node);
    std::vector<CpuStep> steps;
    steps.push_back(std::move(step));
    auto compiled = finish(g, region, std::move(steps), lowered, std::move(ir));
    compiled->set_symbolic(std::move(shapes));
    return compiled;
  }

  std::vector<CpuStep> compile_kernels(LoweredRegion& lowered, std::string& ir) {
    std::vector<CpuStep> steps;
    for (LoweredStep& s : lowered.steps) {
      CpuStep step = CpuStep::lowered(s);
      if (s.kind == LoweredStep::Kind::Kernel) {
        step.work.emplace(jit::compile_cpu_kernel(s.func, jit::CpuJit::global(), cache_ ? &*cache_ : nullptr));
        ir += kernels::to_string(s.func);
      }
      steps.push_back(std::move(step));
    }
    return steps;
  }

  std::unique_ptr<CpuRegion> finish(const Graph& g, const Region& region, std::vector<CpuStep> steps,
                                    LoweredRegion& lowered, std::string ir) {
    std::vector<int> value_inputs = std::move(lowered.value_inputs);
    auto compiled = std::make_unique<CpuRegion>(
        std::move(steps), slot_table(lowered, region.inputs.size(), region.outputs.size()), fault_enabled("miscompile:cpu"));
    compiled->ir = std::move(ir);
    compiled->value_inputs = std::move(value_inputs);
    std::vector<bool> keep(region.outputs.size());
    for (size_t o = 0; o < keep.size(); ++o)
      keep[o] = std::find(g.outputs.begin(), g.outputs.end(), region.outputs[o]) != g.outputs.end();
    compiled->keep_outputs(std::move(keep));
    return compiled;
  }

  std::optional<jit::CodeCache> cache_;  // Options::cache_dir, when set
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const std::string& cache_dir, std::string*) {
  return std::make_unique<CpuBackend>(cache_dir);
}

#endif

}  // namespace terrace
