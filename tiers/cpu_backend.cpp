// Tier 1 backend: a region of elementwise ops -> fusion groups (one per iteration domain) -> kernel
// IR -> C++ -> Clang/ORC.
#include "tiers/backend.h"

#ifdef TERRACE_HAVE_CPU_JIT
#include <cstring>
#include <optional>

#include "jit/cpu_kernel.h"
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
  struct Part {
    jit::CpuKernel kernel;
    std::vector<int> slots;  // the kernel's buffers (inputs, then outputs) in the slot table
  };
  // `slots`: the region's inputs, its outputs, then intermediates (kernels::SplitGroup).
  CpuRegion(std::vector<Part> parts, std::vector<kernels::TensorSig> slots, size_t n_inputs,
            size_t n_outputs, bool perturb)
      : parts_(std::move(parts)), slots_(std::move(slots)), n_inputs_(n_inputs),
        n_outputs_(n_outputs), perturb_(perturb) {
    for (const Part& p : parts_) source += p.kernel.source;
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
    for (const Part& p : parts_) {
      buffers.clear();
      for (int s : p.slots) buffers.push_back(table[size_t(s)]);
      jit::run_cpu_kernel(p.kernel, buffers);
    }
    owned.resize(n_outputs_);
    if (perturb_) perturb(owned);
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
};

class CpuBackend : public Backend {
 public:
  explicit CpuBackend(const std::string& cache_dir) {
    if (!cache_dir.empty()) cache_.emplace(cache_dir);
  }
  Tier tier() const override { return Tier::Cpu; }

  std::string can_compile(const Graph& g, const Node& node) const override {
    if (std::strcmp(op_family(node.op), "elementwise") != 0)
      return std::string("tier 1 compiles elementwise ops only (") + op_name(node.op) + " is " +
             op_family(node.op) + ")";
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

  std::unique_ptr<CompiledRegion> compile(const Graph& g, const Region& region,
                                          const std::vector<Tensor>& inputs) override {
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
    // One kernel per iteration domain: a region may hold independent chains of unrelated shapes.
    kernels::SplitGroup split = kernels::split_by_domain(group);
    std::vector<CpuRegion::Part> parts;
    std::string ir;
    for (const kernels::KernelPart& p : split.parts) {
      kernels::LoweredFunc f = kernels::lower(p.group);
      CpuRegion::Part part{jit::compile_cpu_kernel(f, jit::CpuJit::global(), cache_ ? &*cache_ : nullptr),
                           p.input_slots};
      part.slots.insert(part.slots.end(), p.output_slots.begin(), p.output_slots.end());
      parts.push_back(std::move(part));
      ir += kernels::to_string(f);
    }
    auto compiled = std::make_unique<CpuRegion>(std::move(parts), std::move(split.slots),
                                                region.inputs.size(), region.outputs.size(),
                                                fault_enabled("miscompile:cpu"));
    compiled->ir = std::move(ir);
    return compiled;
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
