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
    if (is_library_op(node.op)) return library_can_compile(g, node);
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

  // A library op is a region by itself, validated against a bound on its own fp32 rounding (the
  // interpreter accumulates in double). A ResNet-50 trunk of 50 convolutions in one region, or
  // one convolution with a long reduction under the plain tolerance (ARCHITECTURE.md), differs from the
  // interpreter by more than rtol 1e-3 / atol 1e-5 on a few outputs near zero (max abs err 1.4e-3
  // and 4.7e-4, measured) though every product is rounded correctly.
  bool alone(const Node& node) const override { return is_library_op(node.op); }

  // A Relu after a library op runs inside its primitive.
  bool absorbs(const Graph& g, const Node& node, const Node& next) const override {
    return is_library_op(node.op) && activation_of(g, next).has_value();
  }

  // For a region of one MatMul, Gemm or Conv: gamma_K * (|A| |B| + |C|), the classic bound on the
  // rounding error of K-term fp32 dot products in any summation order (gamma_K = K u / (1 - K u),
  // u = 2^-24), with K counting the bias and scaling too. |A| |B| is the interpreter's own result
  // on the inputs' absolute values. A wrong kernel is off by the size of the terms, far outside it.
  std::vector<Tensor> error_allowance(const Graph& g, const Region& region,
                                      const std::vector<Tensor>& inputs) const override {
    std::vector<Tensor> out(region.outputs.size());
    // Relu moves no value further than it was: the bound holds after it too.
    if (region.nodes.size() > 2 || region.outputs.size() != 1) return out;
    const Node& node = g.nodes[size_t(region.nodes[0])];
    if (!is_library_op(node.op)) return out;
    if (region.nodes.size() == 2 && !activation_of(g, g.nodes[size_t(region.nodes[1])])) return out;
    Node magnitude = node;
    magnitude.inputs.clear();
    std::vector<RValue> abs_inputs;
    for (int v : node.inputs) {
      if (v < 0) { magnitude.inputs.push_back(-1); continue; }
      Tensor t = inputs[region_input_index(region, v)].cast(DType::Float64);
      for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = std::abs(t.data<double>()[i]);
      magnitude.inputs.push_back(int(abs_inputs.size()));
      abs_inputs.emplace_back(std::move(t));
    }
    for (const char* k : {"alpha", "beta"})
      if (auto a = magnitude.attrs.find(k); a != magnitude.attrs.end()) a->second.f = std::abs(a->second.f);
    std::vector<const RValue*> args;
    for (int v : magnitude.inputs) args.push_back(v < 0 ? nullptr : &abs_inputs[size_t(v)]);
    Tensor m = interpret_node(magnitude, args).at(0).tensor;
    const double u = std::ldexp(1.0, -24), K = double(reduction_length(node, inputs[0].shape(), inputs[1].shape())) + 2;
    const double gamma = K * u / (1 - K * u);
    for (int64_t i = 0; i < m.numel(); ++i) m.data<double>()[i] *= gamma;
    out[0] = std::move(m);
    return out;
  }

  // Partition gives tier 1 two kinds of region: one library op (with the Relu it absorbs), or
  // elementwise ops only.
  std::unique_ptr<CompiledRegion> compile(const Graph& g, const Region& region,
                                          const std::vector<Tensor>& inputs) override {
    std::vector<kernels::TensorSig> slots;  // the region's inputs, its outputs, then intermediates
    for (const Tensor& t : inputs) slots.push_back({t.dtype(), t.shape()});
    std::vector<CpuRegion::Part> parts;
    std::string ir;
    if (is_library_op(g.nodes[size_t(region.nodes[0])].op)) {
      parts.push_back(compile_library(g, region, slots));
      ir = parts.back().primitive->describe() + "\n";
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
  static bool is_library_op(Op op) { return op == Op::MatMul || op == Op::Gemm || op == Op::Conv; }

  // The oneDNN activation a node can be: a Relu.
  static std::optional<jit::DnnlActivation> activation_of(const Graph&, const Node& n) {
#ifdef TERRACE_HAVE_DNNL
    if (n.op == Op::Relu && n.outputs.size() == 1) return jit::DnnlActivation{jit::DnnlActivation::Kind::Relu};
#else
    (void)n;
#endif
    return std::nullopt;
  }

  // The number of products summed into each output.
  static int64_t reduction_length(const Node& node, const Shape& a, const Shape& b) {
    if (node.op == Op::MatMul) return a.back();
    if (node.op == Op::Gemm) return node.attr_int("transA", 0) ? a[0] : a[1];
    int64_t k = 1;  // Conv: weights [M, C/group, k...]
    for (size_t i = 1; i < b.size(); ++i) k *= b[i];
    return k;
  }

  // Where value v is among the region's inputs.
  static size_t region_input_index(const Region& region, int v) {
    auto it = std::find(region.inputs.begin(), region.inputs.end(), v);
    TERRACE_ASSERT(it != region.inputs.end(), "tier 1: a library op reads a value from inside its region");
    return size_t(it - region.inputs.begin());
  }

  std::string library_can_compile(const Graph& g, const Node& node) const {
#ifdef TERRACE_HAVE_DNNL
    std::vector<DType> dtypes;
    std::vector<std::optional<size_t>> ranks;
    for (int v : node.inputs) {
      if (v < 0) continue;
      const ValueInfo& info = g.values[size_t(v)].info;
      if (info.kind != ValueKind::Tensor || !info.dtype)
        return "input '" + g.values[size_t(v)].name + "' has no known tensor dtype";
      dtypes.push_back(*info.dtype);
      ranks.push_back(info.shape ? std::optional(info.shape->size()) : std::nullopt);
    }
    return jit::dnnl_can_compile(node, dtypes, ranks);
#else
    (void)g;
    return std::string("tier 1 was built without oneDNN, which runs ") + op_name(node.op);
#endif
  }

  // A MatMul, Gemm or Conv (and the Relu it absorbed): one oneDNN primitive, reading the region's
  // inputs and writing its one output. Inputs that are initializers (and not graph inputs) are
  // handed over at compile time, so that constant weights are laid out once.
  CpuRegion::Part compile_library(const Graph& g, const Region& region, std::vector<kernels::TensorSig>& slots) {
    const Node& node = g.nodes[size_t(region.nodes[0])];
    TERRACE_CHECK(node.outputs.size() == 1 && node.outputs[0] >= 0, NotImplemented, node.describe(),
                  ": tier 1 runs single-output library ops");
    TERRACE_ASSERT(region.nodes.size() <= 2 && region.outputs.size() == 1,
                   "tier 1: a library region holds its op and at most its activation");
    std::optional<jit::DnnlActivation> act;
    if (region.nodes.size() == 2) act = activation_of(g, g.nodes[size_t(region.nodes[1])]);
    TERRACE_ASSERT(region.nodes.size() == 1 || act, "tier 1: a library region's second node is no activation");
    std::vector<Shape> shapes;
    std::vector<const Tensor*> constants;
    CpuRegion::Part part;
    for (int v : node.inputs) {
      if (v < 0) continue;
      const size_t slot = region_input_index(region, v);
      shapes.push_back(slots[slot].shape);
      auto init = g.initializers.find(v);
      bool constant = init != g.initializers.end() &&
                      std::find(g.inputs.begin(), g.inputs.end(), v) == g.inputs.end();
      constants.push_back(constant ? &init->second : nullptr);
      part.slots.push_back(int(slot));
    }
    part.node = node.describe();
    part.primitive = jit::make_dnnl_primitive(node, shapes, constants, act.value_or(jit::DnnlActivation{}));
    slots.push_back({DType::Float32, part.primitive->output_shape()});
    part.slots.push_back(int(slots.size()) - 1);
    return part;
  }

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
