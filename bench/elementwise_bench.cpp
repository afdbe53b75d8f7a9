// Tier 1 on a fused elementwise chain over 16M float32: y = a*sigmoid(a) + b; out = tanh(y)*0.5 + y*y.
// Interpreter (op by op) vs the fused tier-1 kernel vs a copy, plus compile latency. The tier-1
// result is checked against the interpreter before timing.
#include <benchmark/benchmark.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <vector>

#include "interp/interpreter.h"
#include "jit/cpu/cpu_kernel.h"
#include "kernels/lower.h"

namespace terrace {
namespace {

using kernels::FusedOp;
using kernels::FusionGroup;
using kernels::Operand;

constexpr int64_t kElems = 16 << 20;  // 64 MiB per float32 tensor

// A group over inputs a, b (16M float32 each) and the constant 0.5.
FusionGroup make_group(const char* name) {
  FusionGroup g;
  g.name = name;
  g.inputs = {{DType::Float32, {kElems}}, {DType::Float32, {kElems}}};
  g.constants = {Tensor::scalar<float>(0.5f)};
  return g;
}

Operand add_op(FusionGroup& g, Op op, std::vector<Operand> operands) {
  FusedOp f;
  f.node.op = op;
  f.node.outputs = {0};
  f.node.inputs.assign(operands.size(), 0);
  f.operands = std::move(operands);
  g.ops.push_back(f);
  g.ops.back().result = kernels::infer_result(g, int(g.ops.size() - 1));
  return Operand::result(int(g.ops.size() - 1));
}

// out = a + b: the same bytes as the chain with almost no arithmetic.
FusionGroup make_add_group() {
  FusionGroup g = make_group("bench_add");
  g.outputs = {add_op(g, Op::Add, {Operand::input(0), Operand::input(1)}).index};
  return g;
}

// The chain; ops in order.
FusionGroup make_chain_group() {
  FusionGroup g = make_group("bench_chain");
  auto add = [&](Op op, std::vector<Operand> operands) { return add_op(g, op, std::move(operands)); };
  Operand a = Operand::input(0), b = Operand::input(1), half = Operand::constant(0);
  Operand y = add(Op::Add, {add(Op::Mul, {a, add(Op::Sigmoid, {a})}), b});
  Operand out = add(Op::Add, {add(Op::Mul, {add(Op::Tanh, {y}), half}), add(Op::Mul, {y, y})});
  g.outputs = {out.index};
  return g;
}

struct Data {
  Tensor a = Tensor::empty(DType::Float32, {kElems});
  Tensor b = Tensor::empty(DType::Float32, {kElems});
  Tensor out = Tensor::empty(DType::Float32, {kElems});
  FusionGroup group = make_chain_group();

  Data() {
    std::mt19937 rng(42);
    std::uniform_real_distribution<float> dist(-4, 4);
    for (int64_t i = 0; i < kElems; ++i) a.data<float>()[i] = dist(rng);
    for (int64_t i = 0; i < kElems; ++i) b.data<float>()[i] = dist(rng);
  }

  // The interpreter runs the group's nodes one by one, as tier 0 would.
  Tensor interpret() const {
    std::vector<RValue> results;
    RValue ra(a), rb(b), rhalf(group.constants[0]);
    for (const FusedOp& op : group.ops) {
      std::vector<const RValue*> args;
      for (const Operand& o : op.operands)
        args.push_back(o.kind == Operand::Kind::Input ? (o.index == 0 ? &ra : &rb)
                       : o.kind == Operand::Kind::Constant ? &rhalf
                                                          : &results[size_t(o.index)]);
      results.push_back(interpret_node(op.node, args).at(0));
    }
    return results.back().tensor;
  }
};

Data& data() {
  static Data d;
  return d;
}

void set_bytes(benchmark::State& state, int64_t tensors) {
  state.SetBytesProcessed(state.iterations() * tensors * kElems * int64_t(sizeof(float)));
}

void BM_Interpreter(benchmark::State& state) {
  data();
  for (auto _ : state) benchmark::DoNotOptimize(data().interpret());
  set_bytes(state, 3);
}

jit::CpuKernel& chain_kernel() {
  static jit::CpuKernel k = jit::compile_cpu_kernel(kernels::lower(data().group));
  return k;
}

bool tier1_matches_interpreter() {
  Data& d = data();
  void* buffers[] = {d.a.raw(), d.b.raw(), d.out.raw()};
  jit::run_cpu_kernel(chain_kernel(), buffers);
  Tensor want = d.interpret();
  for (int64_t i = 0; i < kElems; ++i) {
    float g = d.out.data<float>()[i], w = want.data<float>()[i];
    if (!(std::abs(g - w) <= 1e-5f + 1e-3f * std::abs(w))) return false;
  }
  return true;
}

// False, with the benchmark marked skipped, when tier 1's chain differs from the interpreter.
bool chain_checked(benchmark::State& state) {
  static const bool ok = tier1_matches_interpreter();
  if (!ok) state.SkipWithError("tier-1 result differs from the interpreter");
  return ok;
}

void BM_Tier1Chain(benchmark::State& state) {
  if (!chain_checked(state)) return;
  Data& d = data();
  void* buffers[] = {d.a.raw(), d.b.raw(), d.out.raw()};
  for (auto _ : state) jit::run_cpu_kernel(chain_kernel(), buffers);
  set_bytes(state, 3);
  state.counters["compile_ms"] = chain_kernel().compile_ms();
}

void BM_Tier1Add(benchmark::State& state) {
  static jit::CpuKernel k = jit::compile_cpu_kernel(kernels::lower(make_add_group()));
  Data& d = data();
  void* buffers[] = {d.a.raw(), d.b.raw(), d.out.raw()};
  for (auto _ : state) jit::run_cpu_kernel(k, buffers);
  set_bytes(state, 3);
}

// The copy baseline: a parallel memcpy of a into out (reads 64 MiB, writes 64 MiB).
void parallel_copy(Data& d) {
  const int64_t chunk = 1 << 18;
  tbb::parallel_for(int64_t(0), kElems / chunk, [&](int64_t c) {
    std::memcpy(d.out.data<float>() + c * chunk, d.a.data<float>() + c * chunk, chunk * sizeof(float));
  });
  benchmark::ClobberMemory();
}

void BM_Memcpy(benchmark::State& state) {
  Data& d = data();
  for (auto _ : state) parallel_copy(d);
  set_bytes(state, 2);
}

// The chain and the copy in turns, each pair under the same load: on a shared machine whose speed
// drifts by 20% between benchmarks, the ratio of these medians is steadier than the ratio of two
// benchmarks run a second apart. per_byte = chain / (1.5 x copy): the chain moves 3 tensors' bytes,
// the copy 2.
void BM_ChainAgainstCopy(benchmark::State& state) {
  if (!chain_checked(state)) return;
  Data& d = data();
  void* buffers[] = {d.a.raw(), d.b.raw(), d.out.raw()};
  std::vector<double> chain, copy;
  using clock = std::chrono::steady_clock;
  for (auto _ : state) {
    auto t0 = clock::now();
    jit::run_cpu_kernel(chain_kernel(), buffers);
    auto t1 = clock::now();
    parallel_copy(d);
    auto t2 = clock::now();
    chain.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    copy.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
    state.SetIterationTime(std::chrono::duration<double>(t2 - t0).count());
  }
  auto median = [](std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + long(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  const double chain_ms = median(chain), copy_ms = median(copy);
  state.counters["chain_ms"] = chain_ms;
  state.counters["copy_ms"] = copy_ms;
  state.counters["per_byte"] = chain_ms / (1.5 * copy_ms);
}

// One thread each, timed in CPU time: robust to a loaded machine, and the per-core cost.
void BM_Tier1ChainOneThread(benchmark::State& state) {
  Data& d = data();
  void* buffers[] = {d.a.raw(), d.b.raw(), d.out.raw()};
  for (auto _ : state) chain_kernel().fn(buffers, 0, chain_kernel().parallel_extent);
  set_bytes(state, 3);
}
void BM_MemcpyOneThread(benchmark::State& state) {
  Data& d = data();
  for (auto _ : state) {
    std::memcpy(d.out.data<float>(), d.a.data<float>(), kElems * sizeof(float));
    benchmark::ClobberMemory();
  }
  set_bytes(state, 2);
}

// Compile latency of the chain: lower + render + Clang + O3 + codegen + link, each time fresh.
// A JIT of its own (the global one holds BM_Tier1Chain's kernel, whose code a compile of the same
// source would reuse) and no disk cache (it would serve every compile after the first).
void BM_CompileChain(benchmark::State& state) {
  data();  // set up outside the timed loop
  static std::unique_ptr<jit::CpuJit> own = jit::CpuJit::create();
  static const jit::CodeCache no_cache{std::filesystem::path()};
  jit::CompileTimings t;
  for (auto _ : state) {
    jit::CpuKernel k = jit::compile_cpu_kernel(kernels::lower(data().group), *own, &no_cache);
    t = k.code->timings();
  }
  state.counters["frontend_ms"] = t.frontend_ms;
  state.counters["optimize_ms"] = t.optimize_ms;
  state.counters["codegen_ms"] = t.codegen_ms;
  state.counters["link_ms"] = t.link_ms;
  state.counters["cpu_ms"] = t.cpu_ms;
}

BENCHMARK(BM_Interpreter)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Tier1Chain)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Tier1Add)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Memcpy)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ChainAgainstCopy)->Unit(benchmark::kMillisecond)->UseManualTime();
BENCHMARK(BM_Tier1ChainOneThread)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MemcpyOneThread)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CompileChain)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace terrace

BENCHMARK_MAIN();
