// Tier 1 backend: a region of elementwise ops -> one fusion group -> kernel IR -> C++ -> Clang/ORC.
#include "tiers/backend.h"

#ifdef TERRACE_HAVE_CPU_JIT
#include <cstring>

#include "jit/cpu_kernel.h"
#include "interp/log.h"
#include "kernels/lower.h"
#include "kernels/printer.h"
#endif

namespace terrace {

#ifndef TERRACE_HAVE_CPU_JIT
// Built without the JIT library: no tier-1 backend, every region stays on the interpreter.
std::unique_ptr<Backend> make_cpu_backend() { return nullptr; }
#else

namespace {

class CpuRegion : public CompiledRegion {
 public:
  CpuRegion(jit::CpuKernel kernel, std::vector<kernels::TensorSig> outputs, bool perturb)
      : kernel_(std::move(kernel)), outputs_(std::move(outputs)), perturb_(perturb) {
    source = kernel_.source;
  }

  std::vector<Tensor> run(const std::vector<Tensor>& inputs) override {
    std::vector<Tensor> out;
    std::vector<void*> buffers;
    buffers.reserve(inputs.size() + outputs_.size());
    for (const Tensor& t : inputs) buffers.push_back(const_cast<void*>(t.raw()));
    for (const auto& sig : outputs_) {
      out.push_back(Tensor::empty(sig.dtype, sig.shape));
      buffers.push_back(out.back().raw());
    }
    jit::run_cpu_kernel(kernel_, buffers);
    if (perturb_) perturb(out);
    return out;
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
  jit::CpuKernel kernel_;
  std::vector<kernels::TensorSig> outputs_;
  bool perturb_;
};

class CpuBackend : public Backend {
 public:
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
    std::vector<kernels::TensorSig> outputs;
    for (int v : region.outputs) {
      kernels::Operand op = operand_of(v);
      TERRACE_ASSERT(op.kind == kernels::Operand::Kind::Result, "region output is not computed in it");
      group.outputs.push_back(op.index);
      outputs.push_back(group.ops[size_t(op.index)].result);
    }
    kernels::LoweredFunc f = kernels::lower(group);
    jit::CpuKernel kernel = jit::compile_cpu_kernel(f);
    auto compiled = std::make_unique<CpuRegion>(std::move(kernel), std::move(outputs),
                                                fault_enabled("miscompile:cpu"));
    compiled->ir = kernels::to_string(f);
    return compiled;
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

#endif

}  // namespace terrace
