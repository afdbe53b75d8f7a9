// Tier 1 backend. An elementwise region -> fusion groups (one per iteration domain) -> kernel IR ->
// C++ -> Clang/ORC; a MatMul, Gemm or Conv region (with a Relu it absorbed) -> a oneDNN primitive.
#include "tiers/backend.h"

#ifdef TERRACE_HAVE_CPU_JIT
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <optional>

#include "interp/interpreter.h"
#include "jit/cpu_kernel.h"
#include "jit/dnnl_ops.h"
#include "tiers/cpu_library.h"
#include "interp/log.h"
#include "kernels/lower.h"
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
  // A fused elementwise kernel or a library primitive, with its buffers' slots (inputs, then
  // outputs) in the region's slot table.
  struct Part {
    std::optional<jit::CpuKernel> kernel;
    std::unique_ptr<jit::DnnlPrimitive> primitive;
    std::vector<int> slots;
    std::string node;  // the library op's node, for errors
  };
  // `slots`: the region's inputs, its outputs, then intermediates.
  CpuRegion(std::vector<Part> parts, std::vector<kernels::TensorSig> slots, size_t n_inputs,
            size_t n_outputs, bool perturb)
      : parts_(std::move(parts)), slots_(std::move(slots)), n_inputs_(n_inputs),
        n_outputs_(n_outputs), perturb_(perturb) {
    for (const Part& p : parts_)
      source += p.kernel ? p.kernel->source : "// a library primitive, no generated code:\n// " + p.primitive->describe() + "\n";
  }

  std::vector<Tensor> run(const std::vector<Tensor>& inputs) override {
    std::vector<Tensor> owned;  // outputs, then intermediates
    std::vector<void*> table;
    table.reserve(slots_.size());
    for (const Tensor& t : inputs) table.push_back(const_cast<void*>(t.raw()));
    for (size_t s = n_inputs_; s < slots_.size(); ++s) {
      owned.push_back(Tensor::empty(slots_[s].dtype, slots_[s].shape));
      table.push_back(owned.back().raw());
    }
    std::vector<void*> buffers;
    std::vector<const float*> args;
    for (const Part& p : parts_) {
      if (p.kernel) {
        buffers.clear();
        for (int s : p.slots) buffers.push_back(table[size_t(s)]);
        jit::run_cpu_kernel(*p.kernel, buffers);
      } else {
        args.clear();
        for (size_t i = 0; i + 1 < p.slots.size(); ++i) args.push_back(static_cast<const float*>(table[size_t(p.slots[i])]));
        try {
          p.primitive->run(args, static_cast<float*>(table[size_t(p.slots.back())]));
        } catch (const Error& e) {
          fail(e.code(), p.node, ": ", e.message());
        }
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
    if (std::strcmp(op_family(node.op), "elementwise") != 0) {
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
  // or elementwise ops only.
  std::unique_ptr<CompiledRegion> compile(const Graph& g, const Region& region,
                                          const std::vector<Tensor>& inputs) override {
    std::vector<kernels::TensorSig> slots;  // the region's inputs, its outputs, then intermediates
    for (const Tensor& t : inputs) slots.push_back({t.dtype(), t.shape()});
    std::vector<CpuRegion::Part> parts;
    std::string ir;
    if (cpu_library::is_library_op(g.nodes[size_t(region.nodes[0])].op)) {
      cpu_library::LibraryPart lib = cpu_library::compile_library(g, region, slots);
      ir = lib.primitive->describe() + "\n";
      CpuRegion::Part part;
      part.primitive = std::move(lib.primitive);
      part.slots = std::move(lib.slots);
      part.node = std::move(lib.node);
      parts.push_back(std::move(part));
    } else {
      kernels::SplitGroup split = kernels::split_by_domain(elementwise_group(g, region, inputs));
      slots = std::move(split.slots);
      for (const kernels::KernelPart& p : split.parts) {
        kernels::LoweredFunc f = kernels::lower(p.group);
        CpuRegion::Part part;
        part.kernel = jit::compile_cpu_kernel(f, jit::CpuJit::global(), cache_ ? &*cache_ : nullptr);
        part.slots = p.input_slots;
        part.slots.insert(part.slots.end(), p.output_slots.begin(), p.output_slots.end());
        parts.push_back(std::move(part));
        ir += kernels::to_string(f);
      }
    }
    auto compiled = std::make_unique<CpuRegion>(std::move(parts), std::move(slots), region.inputs.size(),
                                                region.outputs.size(), fault_enabled("miscompile:cpu"));
    compiled->ir = std::move(ir);
    return compiled;
  }

 private:
  // An elementwise region as one fusion group over the region's inputs.
  static kernels::FusionGroup elementwise_group(const Graph& g, const Region& region,
                                                const std::vector<Tensor>& inputs) {
    kernels::FusionGroup group;
    group.name = "region" + std::to_string(region.id);
    std::vector<std::pair<int, kernels::Operand>> where;  // value id -> operand
    auto operand_of = [&](int v) {
      for (auto& [id, op] : where)
        if (id == v) return op;
      return kernels::Operand::absent();
    };
    for (size_t i = 0; i < region.inputs.size(); ++i) {
      group.inputs.push_back({inputs[i].dtype(), inputs[i].shape()});
      where.emplace_back(region.inputs[i], kernels::Operand::input(int(i)));
    }
    for (int n : region.nodes) {
      const Node& node = g.nodes[size_t(n)];
      kernels::FusedOp op;
      op.node = node;
      for (int v : node.inputs) op.operands.push_back(v < 0 ? kernels::Operand::absent() : operand_of(v));
      group.ops.push_back(std::move(op));
      int index = int(group.ops.size()) - 1;
      group.ops.back().result = kernels::infer_result(group, index);
      TERRACE_CHECK(node.outputs.size() == 1, NotImplemented, node.describe(), " has ",
                    node.outputs.size(), " outputs; tier 1 fuses single-output ops");
      where.emplace_back(node.outputs[0], kernels::Operand::result(index));
    }
    for (int v : region.outputs) {
      kernels::Operand op = operand_of(v);
      TERRACE_ASSERT(op.kind == kernels::Operand::Kind::Result, "region output is not computed in it");
      group.outputs.push_back(op.index);
    }
    return group;
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
