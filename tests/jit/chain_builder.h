// Test helper: builds a FusionGroup op by op while computing each op's reference value with the
// interpreter, then compiles, runs and compares the tier-1 kernel against it.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "interp/interpreter.h"
#include "jit/cpu/cpu_kernel.h"
#include "kernels/lower.h"
#include "tests/support/attrs.h"

namespace terrace::testing {

using kernels::FusedOp;
using kernels::FusionGroup;
using kernels::Operand;

struct Ref {
  Operand operand;
  Tensor value;  // the interpreter's value
};

class ChainBuilder {
 public:
  explicit ChainBuilder(std::string name) { group.name = std::move(name); }

  Ref input(Tensor t) {
    group.inputs.push_back({t.dtype(), t.shape()});
    inputs.push_back(t);
    return {Operand::input(int(group.inputs.size() - 1)), t};
  }
  Ref constant(Tensor t) {
    group.constants.push_back(t);
    return {Operand::constant(int(group.constants.size() - 1)), t};
  }
  Ref op(Op op, const std::vector<Ref>& args, std::map<std::string, Attribute> attrs = {}) {
    FusedOp f;
    f.node.op = op;
    f.node.name = "n" + std::to_string(group.ops.size());
    f.node.attrs = std::move(attrs);
    f.node.outputs = {0};
    std::vector<RValue> values;
    for (const Ref& a : args) {
      f.node.inputs.push_back(a.operand.kind == Operand::Kind::Absent ? -1 : 0);
      f.operands.push_back(a.operand);
      values.push_back(RValue(a.value));
    }
    std::vector<const RValue*> ptrs;
    for (size_t i = 0; i < args.size(); ++i)
      ptrs.push_back(args[i].operand.kind == Operand::Kind::Absent ? nullptr : &values[i]);
    Tensor expected = interpret_node(f.node, ptrs).at(0).tensor;
    group.ops.push_back(f);
    group.ops.back().result = kernels::infer_result(group, int(group.ops.size() - 1));
    return {Operand::result(int(group.ops.size() - 1)), expected};
  }
  void output(const Ref& r) {
    group.outputs.push_back(r.operand.index);
    expected.push_back(r.value);
  }

  // Lowers, compiles and runs the group; returns its outputs.
  std::vector<Tensor> run(jit::CpuJit& jit = jit::CpuJit::global()) {
    kernel = jit::compile_cpu_kernel(kernels::lower(group), jit);
    std::vector<Tensor> outs;
    std::vector<void*> buffers;
    for (Tensor& t : inputs) buffers.push_back(t.raw());
    for (int o : group.outputs) {
      const auto& sig = group.ops[size_t(o)].result;
      outs.push_back(Tensor::empty(sig.dtype, sig.shape));
      buffers.push_back(outs.back().raw());
    }
    jit::run_cpu_kernel(kernel, buffers);
    return outs;
  }

  FusionGroup group;
  std::vector<Tensor> inputs;
  std::vector<Tensor> expected;
  jit::CpuKernel kernel;
};

// Random values in [lo, hi], with NaN, +-Inf, zeros and -0 sprinkled in for float dtypes.
inline Tensor random_tensor(DType dtype, Shape shape, double lo, double hi, uint32_t seed,
                            bool specials = true) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  Tensor t = Tensor::empty(DType::Float64, std::move(shape));
  double* p = t.data<double>();
  const double specials_list[] = {NAN, INFINITY, -INFINITY, 0.0, -0.0};
  for (int64_t i = 0; i < t.numel(); ++i) {
    p[i] = dist(rng);
    if (!is_float(dtype)) p[i] = std::round(p[i]);
    else if (specials && rng() % 16 == 0) p[i] = specials_list[rng() % 5];
  }
  return t.cast(dtype);
}

// Compiled tier vs interpreter: the tolerances of ARCHITECTURE.md's "Rules the code keeps"; NaN and Inf positions exact.
inline void expect_close(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  double rtol = 1e-3, atol = 1e-5;
  if (want.dtype() == DType::Float16) atol = 1e-3;
  if (want.dtype() == DType::BFloat16) rtol = 1.6e-2;
  bool exact = !is_float(want.dtype());
  int shown = 0;
  for (int64_t i = 0; i < want.numel() && shown < 5; ++i) {
    double g = got.get_as_double(i), w = want.get_as_double(i);
    bool ok;
    if (exact) ok = g == w;
    else if (std::isnan(w) || std::isinf(w)) ok = std::isnan(w) ? std::isnan(g) : g == w;
    else ok = std::isfinite(g) && std::abs(g - w) <= atol + rtol * std::abs(w);
    if (!ok) {
      ++shown;
      ADD_FAILURE() << what << ": element " << i << " is " << g << ", interpreter gives " << w;
    }
  }
}

}  // namespace terrace::testing
