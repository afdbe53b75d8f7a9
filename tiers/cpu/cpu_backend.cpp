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

#include "interp/log.h"
#include "jit/cpu/cpu_kernel.h"
#include "jit/cpu/dnnl_ops.h"
#include "kernels/printer.h"
#include "tiers/cpu/cpu_library.h"
#include "tiers/region_lowering.h"
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
    plan_memory();
  }

  void forget_cached() override {
    for (const Part& p : parts_)
      if (p.kernel && p.kernel->code) p.kernel->code->forget_cached();
  }

  using CompiledRegion::run;
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, CallTally&) override {  // copies none
    std::unique_ptr<Workspace> ws = take_workspace();
    // Back to the pool however run() ends (a run-time check's error included).
    struct Return {
      CpuRegion* self;
      std::unique_ptr<Workspace>& ws;
      ~Return() { self->give_back(std::move(ws)); }
    } give_back_on_exit{this, ws};
    std::vector<void*>& table = ws->table;  // intermediates and constants are set once per workspace
    std::vector<Tensor> owned(n_outputs_);  // the outputs: they leave the region
    for (size_t s = 0; s < inputs.size(); ++s) table[s] = const_cast<void*>(inputs[s].raw());
    for (size_t s = n_inputs_; s < n_inputs_ + n_outputs_; ++s) {
      if (alias_[s] != -1) {
        if (alias_[s] <= -2) table[s] = const_cast<void*>(constants_[size_t(-2 - alias_[s])].raw());
        continue;
      }
      owned[s - n_inputs_] = output_buffer(*ws, s - n_inputs_);
      table[s] = owned[s - n_inputs_].raw();
    }
    for (size_t s : escaping_) {  // an intermediate an output views: a buffer of this call's own
      Tensor& t = ws->escaping[s];
      t = Tensor::empty(slots_[s].dtype, slots_[s].shape);
      table[s] = t.raw();
    }
    // Views: the buffer of the slot they view (a region output view may come before its source).
    for (size_t s = n_inputs_; s < slots_.size(); ++s) {
      const size_t root = root_[s];
      if (root == s) continue;
      table[s] = table[root];
      if (s < n_inputs_ + n_outputs_)  // a region output: a view of its source tensor
        owned[s - n_inputs_] = (root < n_inputs_                  ? inputs[root]
                                : root < n_inputs_ + n_outputs_ ? owned[root - n_inputs_]
                                                                 : ws->escaping.at(root))
                                   .reshaped(slots_[s].shape);
    }
    ws->escaping.clear();
    std::vector<void*>& buffers = ws->buffers;
    std::vector<const float*>& args = ws->args;
    std::vector<float*>& outs = ws->outs;
    for (const Part& p : parts_) {
      if (p.check_first) std::memset(table[size_t(p.error_slot)], 0, 2 * sizeof(int64_t));
      if (p.kernel) {
        buffers.clear();
        for (int s : p.slots) buffers.push_back(table[size_t(s)]);
        jit::run_cpu_kernel(*p.kernel, buffers);
      } else if (p.primitive) {
        args.clear();
        outs.clear();  // a primitive's slots: its inputs, then its outputs
        const size_t n_in = p.slots.size() - p.primitive->num_outputs();
        for (size_t i = 0; i < p.slots.size(); ++i)
          if (i < n_in) args.push_back(static_cast<const float*>(table[size_t(p.slots[i])]));
          else outs.push_back(static_cast<float*>(table[size_t(p.slots[i])]));
        try {
          p.primitive->run_outputs(args, outs);
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
    if (perturb_ || (perturb_late_ && runs_.fetch_add(1) >= kHonestRuns)) perturb(owned);
    return owned;
  }

  // Bytes of one workspace's intermediates (their buffers share memory by liveness), for tests.
  size_t workspace_bytes() const { return arena_bytes_; }

  // Which region outputs are model outputs (their buffers are reused across calls: output_buffer).
  void keep_outputs(std::vector<bool> keep) { keep_outputs_ = std::move(keep); }

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
  };

  // A model output's buffer, reused from an earlier call when no one else holds it; else a new one,
  // kept for later calls while fewer than kKeptBuffers are. Large outputs (GPT-2's logits) are
  // mapped fresh by glibc and given back at free, so that every call page-faulted them in again (a
  // sixth of its vocabulary projection's time: bench/RESULTS.md). Two buffers cover a caller that holds the last call's
  // outputs until the next call returns (`out = session.run(in)`), as ONNX Runtime's arena does.
  // Intermediates between regions are not kept: their memory goes back between calls and peak RSS
  // stays the liveness plan's.
  Tensor output_buffer(Workspace& ws, size_t o) {
    const size_t s = n_inputs_ + o;
    if (o >= keep_outputs_.size() || !keep_outputs_[o] || slots_[s].dtype == DType::String)
      return Tensor::empty(slots_[s].dtype, slots_[s].shape);
    if (ws.kept.size() != n_outputs_) ws.kept.resize(n_outputs_);
    std::vector<Tensor>& kept = ws.kept[o];
    for (const Tensor& t : kept)
      if (t.sole_owner()) return t;
    Tensor t = Tensor::empty(slots_[s].dtype, slots_[s].shape);
    if (kept.size() < kKeptBuffers) kept.push_back(t);
    return t;
  }

  // The root slot of every slot (the buffer it views), which intermediates escape as the source of
  // an output view, and each other intermediate's offset in the arena: two intermediates share
  // memory when no step uses both while both hold values (first to last step that names them, its
  // views' uses included). Placement: largest first, at the lowest offset free over its life.
  void plan_memory() {
    const size_t n = slots_.size();
    root_.resize(n);
    for (size_t s = 0; s < n; ++s) {
      size_t r = s;
      while (r >= n_inputs_ && alias_[r] >= 0) r = size_t(alias_[r]);
      root_[s] = r;
    }
    const size_t first_intermediate = n_inputs_ + n_outputs_;
    for (size_t s = n_inputs_; s < first_intermediate; ++s)
      if (root_[s] != s && root_[s] >= first_intermediate) escaping_.push_back(root_[s]);
    std::sort(escaping_.begin(), escaping_.end());
    escaping_.erase(std::unique(escaping_.begin(), escaping_.end()), escaping_.end());
    std::vector<int> first(n, -1), last(n, -1);
    auto use = [&](int slot, int step) {
      const size_t r = root_[size_t(slot)];
      if (first[r] < 0) first[r] = step;
      last[r] = std::max(last[r], step);
    };
    for (size_t k = 0; k < parts_.size(); ++k) {
      for (int s : parts_[k].slots) use(s, int(k));
      if (parts_[k].error_slot >= 0) use(parts_[k].error_slot, int(k));
    }
    std::vector<size_t> planned;
    for (size_t s = first_intermediate; s < n; ++s)
      if (alias_[s] == -1 && !std::binary_search(escaping_.begin(), escaping_.end(), s)) planned.push_back(s);
    auto bytes_of = [&](size_t s) {
      const size_t b = size_t(shape_numel(slots_[s].shape)) * dtype_size(slots_[s].dtype);
      return (std::max<size_t>(b, 1) + 63) / 64 * 64;
    };
    std::stable_sort(planned.begin(), planned.end(), [&](size_t a, size_t b) { return bytes_of(a) > bytes_of(b); });
    offset_.assign(n, 0);
    std::vector<size_t> placed;
    for (size_t s : planned) {
      // Slots never named by a step (none expected) live through the whole call.
      if (first[s] < 0) first[s] = 0, last[s] = int(parts_.size());
      std::vector<std::pair<size_t, size_t>> busy;  // [begin, end) of those live at the same time
      for (size_t o : placed)
        if (first[o] <= last[s] && first[s] <= last[o]) busy.emplace_back(offset_[o], offset_[o] + bytes_of(o));
      std::sort(busy.begin(), busy.end());
      size_t at = 0;
      for (const auto& [b, e] : busy) {
        if (at + bytes_of(s) <= b) break;
        at = std::max(at, e);
      }
      offset_[s] = at;
      arena_bytes_ = std::max(arena_bytes_, at + bytes_of(s));
      placed.push_back(s);
    }
    planned_ = std::move(planned);
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
    if (arena_bytes_ > 0) {
      ws->arena.reset(static_cast<unsigned char*>(std::aligned_alloc(64, arena_bytes_)));
      TERRACE_CHECK(ws->arena, OutOfMemory, "tier 1: no memory for a region's ", arena_bytes_, "-byte workspace");
      if (std::any_of(planned_.begin(), planned_.end(), [&](size_t s) { return slots_[s].dtype == DType::Bool; }))
        std::memset(ws->arena.get(), 0, arena_bytes_);  // as Tensor::empty gives booleans
    }
    ws->table.assign(slots_.size(), nullptr);
    for (size_t s : planned_) ws->table[s] = ws->arena.get() + offset_[s];
    for (size_t s = n_inputs_; s < slots_.size(); ++s)
      if (alias_[s] <= -2) ws->table[s] = const_cast<void*>(constants_[size_t(-2 - alias_[s])].raw());
    size_t widest = 0;
    for (const Part& p : parts_) widest = std::max(widest, p.slots.size());
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

  // TERRACE_FAULT=miscompile:cpu: a deliberately wrong result, for testing validation.
  static void perturb(std::vector<Tensor>& out) {
    for (Tensor& t : out) {
      if (t.numel() == 0) continue;
      t = t.clone();  // an output may be a view of a region input: never write through it
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
  // The memory plan (plan_memory) and the pool of workspaces.
  std::vector<size_t> root_, offset_, planned_, escaping_;
  size_t arena_bytes_ = 0;
  static constexpr size_t kKeptBuffers = 2;
  std::vector<bool> keep_outputs_;  // per region output: a model output
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
    return cpu_library::error_allowance(g, region, inputs);
  }

  // Partition gives tier 1 two kinds of region: one library op (with the activation it absorbs),
  // or a run of elementwise ops (fused into as few kernels as their iteration domains allow) and
  // lowered ops (reductions, data movement: kernels/lower_op.h), over one slot table.
  std::unique_ptr<CompiledRegion> compile(const Graph& g, const Region& region,
                                          const std::vector<Tensor>& inputs) override {
    LoweredRegion lowered;  // the slot table (a library region's: its inputs, then its outputs)
    std::vector<CpuRegion::Part> parts;
    std::string ir;
    if (cpu_library::is_library_op(g.nodes[size_t(region.nodes[0])].op)) {
      for (const Tensor& t : inputs) lowered.add_slot({t.dtype(), t.shape()});
      cpu_library::LibraryPart lib = cpu_library::compile_library(g, region, lowered.slots);
      lowered.alias.resize(lowered.slots.size(), -1);
      ir = lib.primitive->describe() + "\n";
      CpuRegion::Part part;
      part.primitive = std::move(lib.primitive);
      part.slots = std::move(lib.slots);
      part.node = std::move(lib.node);
      parts.push_back(std::move(part));
    } else {
      lowered = lower_region(g, region, inputs);
      for (LoweredStep& step : lowered.steps) {
        CpuRegion::Part part;
        if (step.kind == LoweredStep::Kind::Kernel) {
          part.kernel = jit::compile_cpu_kernel(step.func, jit::CpuJit::global(), cache_ ? &*cache_ : nullptr);
          ir += kernels::to_string(step.func);
        }
        part.slots = std::move(step.slots);
        part.node = std::move(step.node);
        part.error_slot = step.error_slot;
        part.check_first = step.check_first;
        part.check_last = step.check_last;
        part.error_message = std::move(step.error_message);
        parts.push_back(std::move(part));
      }
    }
    auto compiled = std::make_unique<CpuRegion>(std::move(parts), std::move(lowered.slots), std::move(lowered.alias),
                                                std::move(lowered.constants), region.inputs.size(),
                                                region.outputs.size(), fault_enabled("miscompile:cpu"));
    compiled->ir = std::move(ir);
    compiled->value_inputs = std::move(lowered.value_inputs);
    std::vector<bool> keep(region.outputs.size());
    for (size_t o = 0; o < keep.size(); ++o)
      keep[o] = std::find(g.outputs.begin(), g.outputs.end(), region.outputs[o]) != g.outputs.end();
    compiled->keep_outputs(std::move(keep));
    return compiled;
  }

 private:
  std::optional<jit::CodeCache> cache_;  // Options::cache_dir, when set
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const std::string& cache_dir, std::string*) {
  return std::make_unique<CpuBackend>(cache_dir);
}

#endif

}  // namespace terrace
