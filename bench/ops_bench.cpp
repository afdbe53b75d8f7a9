// Micro-benchmarks of single ops through Session, per tier: softmax, layernorm, GEMM (+bias +GELU),
// conv (+bias +ReLU), ReduceMean, GlobalAveragePool. Each checks its result against a double-precision reference computed here and
// reports FLOP/s or bytes/s as a fraction of the machine's measured ceilings (bench/ceilings.h).
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <cmath>
#include <functional>
#include <map>

#include "bench/ceilings.h"
#include "interp/compare.h"
#include "tests/support/graph_builder.h"
#include "tiers/session.h"
#ifdef TERRACE_HAVE_CUDA
#include "jit/cuda/cuda_driver.h"
#include "jit/cuda/cuda_memory.h"
#endif

namespace terrace::bench {
namespace {

using testing::GraphBuilder;
using testing::random_tensor;

// One benchmark case: a small graph, its inputs, the reference output, and the work per call.
struct OpCase {
  std::shared_ptr<Graph> graph;
  NamedTensors inputs;
  Tensor expected;
  double bytes = 0;  // bytes a call must move at least (inputs + outputs), for memory-bound ops
  double flops = 0;  // for compute-bound ops
};

int64_t rows_of(const Tensor& t) { return t.numel() / t.shape().back(); }

// Fills a float tensor of `like`'s shape from `f(row, col)`, rows over the last dimension.
Tensor reference_rows(const Tensor& like, const std::function<void(int64_t, float*)>& row_fn) {
  Tensor out = Tensor::empty(DType::Float32, like.shape());
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows_of(like); ++r) row_fn(r, out.data<float>() + r * like.shape().back());
  return out;
}

OpCase softmax_case(int64_t rows, int64_t cols) {
  GraphBuilder g;
  int x = g.input("x", DType::Float32, {rows, cols});
  g.output(g.node(Op::Softmax, {x}, {{"axis", GraphBuilder::attr_int(-1)}}));
  Tensor xt = random_tensor({rows, cols}, 1, -4, 4);
  Tensor ref = reference_rows(xt, [&](int64_t r, float* out) {
    const float* in = xt.data<float>() + r * cols;
    double mx = in[0], sum = 0;
    for (int64_t c = 0; c < cols; ++c) mx = std::max(mx, double(in[c]));
    for (int64_t c = 0; c < cols; ++c) sum += std::exp(double(in[c]) - mx);
    for (int64_t c = 0; c < cols; ++c) out[c] = float(std::exp(double(in[c]) - mx) / sum);
  });
  return {g.build(), {{"x", xt}}, ref, 2.0 * 4 * double(xt.numel()), 0};
}

OpCase layernorm_case(int64_t rows, int64_t cols) {
  GraphBuilder g;
  Tensor xt = random_tensor({rows, cols}, 2), scale = random_tensor({cols}, 3), bias = random_tensor({cols}, 4);
  int x = g.input("x", DType::Float32, {rows, cols});
  int node = g.node(Op::LayerNormalization, {x, g.constant("scale", scale), g.constant("bias", bias)},
                    {{"axis", GraphBuilder::attr_int(-1)}, {"epsilon", GraphBuilder::attr_float(1e-5f)}});
  g.output(node);
  Tensor ref = reference_rows(xt, [&](int64_t r, float* out) {
    const float* in = xt.data<float>() + r * cols;
    double mean = 0, var = 0;
    for (int64_t c = 0; c < cols; ++c) mean += in[c];
    mean /= double(cols);
    for (int64_t c = 0; c < cols; ++c) var += (in[c] - mean) * (in[c] - mean);
    double inv = 1.0 / std::sqrt(var / double(cols) + double(1e-5f));
    for (int64_t c = 0; c < cols; ++c)
      out[c] = float((in[c] - mean) * inv * scale.data<float>()[c] + bias.data<float>()[c]);
  });
  return {g.build(), {{"x", xt}}, ref, 2.0 * 4 * double(xt.numel()), 0};
}

// ReduceMean over the last axis of [a, b, c], keepdims (a reduction of short contiguous rows).
OpCase reduce_mean_case(int64_t a, int64_t b, int64_t c) {
  GraphBuilder g;
  int x = g.input("x", DType::Float32, {a, b, c});
  g.output(g.node(Op::ReduceMean, {x}, {{"axes", GraphBuilder::attr_ints({-1})}}));
  Tensor xt = random_tensor({a, b, c}, 11);
  Tensor ref = Tensor::empty(DType::Float32, {a, b, 1});
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < a * b; ++r) {
    double sum = 0;
    for (int64_t k = 0; k < c; ++k) sum += xt.data<float>()[r * c + k];
    ref.data<float>()[r] = float(sum / double(c));
  }
  return {g.build(), {{"x", xt}}, ref, 4.0 * double(xt.numel() + ref.numel()), 0};
}

// GlobalAveragePool over [n, ch, hw, hw] (a CNN's head).
OpCase global_average_pool_case(int64_t n, int64_t ch, int64_t hw) {
  GraphBuilder g;
  int x = g.input("x", DType::Float32, {n, ch, hw, hw});
  g.output(g.node(Op::GlobalAveragePool, {x}));
  Tensor xt = random_tensor({n, ch, hw, hw}, 12);
  Tensor ref = Tensor::empty(DType::Float32, {n, ch, 1, 1});
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < n * ch; ++p) {
    double sum = 0;
    for (int64_t k = 0; k < hw * hw; ++k) sum += xt.data<float>()[p * hw * hw + k];
    ref.data<float>()[p] = float(sum / double(hw * hw));
  }
  return {g.build(), {{"x", xt}}, ref, 4.0 * double(xt.numel() + ref.numel()), 0};
}

// GELU as PyTorch exports it (opset 17 has no Gelu op): x * 0.5 * (1 + erf(x / sqrt(2))).
int gelu(GraphBuilder& g, int x) {
  auto c = [&](const char* name, float v) { return g.constant(name, Tensor::scalar<float>(v)); };
  int erf = g.node(Op::Erf, {g.node(Op::Div, {x, c("sqrt2", float(M_SQRT2))})});
  return g.node(Op::Mul, {g.node(Op::Mul, {x, g.node(Op::Add, {erf, c("one", 1.f)})}), c("half", 0.5f)});
}
double gelu_ref(double v) { return v * 0.5 * (1.0 + std::erf(v / M_SQRT2)); }

OpCase gemm_case(int64_t m, int64_t k, int64_t n) {
  GraphBuilder g;
  Tensor a = random_tensor({m, k}, 5), b = random_tensor({k, n}, 6), bias = random_tensor({n}, 7);
  int x = g.input("a", DType::Float32, {m, k});
  g.output(gelu(g, g.node(Op::Gemm, {x, g.constant("b", b), g.constant("bias", bias)})));
  Tensor ref = Tensor::empty(DType::Float32, {m, n});
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < m; ++i) {
    std::vector<double> acc(size_t(n), 0.0);
    for (int64_t p = 0; p < k; ++p) {
      double av = a.data<float>()[i * k + p];
      const float* brow = b.data<float>() + p * n;
      for (int64_t j = 0; j < n; ++j) acc[size_t(j)] += av * brow[j];
    }
    for (int64_t j = 0; j < n; ++j)
      ref.data<float>()[i * n + j] = float(gelu_ref(float(acc[size_t(j)] + bias.data<float>()[j])));
  }
  return {g.build(), {{"a", a}}, ref, 0, 2.0 * double(m) * double(k) * double(n)};
}

// 3x3 convolution, stride 1, padding 1, then bias and ReLU (a ResNet layer).
OpCase conv_case(int64_t batch, int64_t ch, int64_t hw) {
  GraphBuilder g;
  Tensor xt = random_tensor({batch, ch, hw, hw}, 8), w = random_tensor({ch, ch, 3, 3}, 9, -0.1f, 0.1f),
         bias = random_tensor({ch}, 10);
  int x = g.input("x", DType::Float32, {batch, ch, hw, hw});
  int conv = g.node(Op::Conv, {x, g.constant("w", w), g.constant("bias", bias)},
                    {{"pads", GraphBuilder::attr_ints({1, 1, 1, 1})}});
  g.output(g.node(Op::Relu, {conv}));
  Tensor ref = Tensor::empty(DType::Float32, {batch, ch, hw, hw});
  const float *in = xt.data<float>(), *wt = w.data<float>();
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t o = 0; o < ch; ++o)
      for (int64_t y = 0; y < hw; ++y)
        for (int64_t xx = 0; xx < hw; ++xx) {
          double acc = bias.data<float>()[o];
          for (int64_t c = 0; c < ch; ++c)
            for (int64_t ky = 0; ky < 3; ++ky)
              for (int64_t kx = 0; kx < 3; ++kx) {
                int64_t iy = y + ky - 1, ix = xx + kx - 1;
                if (iy < 0 || iy >= hw || ix < 0 || ix >= hw) continue;
                acc += double(in[((b * ch + c) * hw + iy) * hw + ix]) * wt[((o * ch + c) * 3 + ky) * 3 + kx];
              }
          ref.data<float>()[((b * ch + o) * hw + y) * hw + xx] = float(std::max(acc, 0.0));
        }
  return {g.build(), {{"x", xt}}, ref, 0, 2.0 * double(batch * ch * ch * 9 * hw * hw)};
}

// Issue 11's elementwise chain (elementwise_bench's): y = a*sigmoid(a) + b; out = tanh(y)*0.5 + y*y.
OpCase chain_case(int64_t n) {
  GraphBuilder g;
  int a = g.input("a", DType::Float32, {n});
  int b = g.input("b", DType::Float32, {n});
  int half = g.constant("half", Tensor::scalar<float>(0.5f));
  int y = g.node(Op::Add, {g.node(Op::Mul, {a, g.node(Op::Sigmoid, {a})}), b});
  g.output(g.node(Op::Add, {g.node(Op::Mul, {g.node(Op::Tanh, {y}), half}), g.node(Op::Mul, {y, y})}));
  Tensor at = random_tensor({n}, 5, -4, 4), bt = random_tensor({n}, 6);
  Tensor ref = Tensor::empty(DType::Float32, {n});
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const double av = at.data<float>()[i], yv = av / (1 + std::exp(-av)) + bt.data<float>()[i];
    ref.data<float>()[i] = float(std::tanh(yv) * 0.5 + yv * yv);
  }
  return {g.build(), {{"a", at}, {"b", bt}}, ref, 3.0 * 4 * double(n), 0};
}

// Cases are built once, on first use (their references take a while).
const OpCase& get_case(const std::string& name) {
  static std::map<std::string, OpCase> cache;
  static const std::map<std::string, std::function<OpCase()>> makers = {
      {"softmax", [] { return softmax_case(4096, 4096); }},
      {"layernorm", [] { return layernorm_case(8192, 1024); }},
      {"gemm_bias_gelu", [] { return gemm_case(1024, 1024, 1024); }},
      {"conv_bias_relu", [] { return conv_case(4, 64, 56); }},
      // The reductions of issue 10 at model shapes: BERT-base's attention softmax ([8,12,128,128]
      // as its 12288 rows of 128) and layernorm ([8,128,768] as 1024 rows), a mean over short
      // rows, MobileNetV2's and a ResNet stage's global pools.
      {"softmax_attention", [] { return softmax_case(8 * 12 * 128, 128); }},
      {"layernorm_bert", [] { return layernorm_case(8 * 128, 768); }},
      // The same at batch 1 (a BERT or GPT-2 call on 1x128 tokens): 196 K and 98 K elements,
      // where splitting across cores is worth less than a fork and join may cost.
      {"softmax_attention_b1", [] { return softmax_case(12 * 128, 128); }},
      {"layernorm_bert_b1", [] { return layernorm_case(128, 768); }},
      {"reducemean_rows64", [] { return reduce_mean_case(64, 1024, 64); }},
      {"global_avgpool_1280x7x7", [] { return global_average_pool_case(1, 1280, 7); }},
      {"global_avgpool_32x256x56x56", [] { return global_average_pool_case(32, 256, 56); }},
      // Issue 11's GPU targets: softmax and layernorm over 8192x4096, the chain over 16M elements.
      {"softmax_8192x4096", [] { return softmax_case(8192, 4096); }},
      {"layernorm_8192x4096", [] { return layernorm_case(8192, 4096); }},
      {"chain_16M", [] { return chain_case(int64_t(1) << 24); }},
  };
  auto it = cache.find(name);
  if (it == cache.end()) it = cache.emplace(name, makers.at(name)()).first;
  return it->second;
}

// Runs the case on a session limited to `tier`: warms up until compiles are done and the
// promoted code is validated, checks the result, then times calls.
void run_case(benchmark::State& state, const std::string& name, Tier tier) {
  const OpCase& c = get_case(name);
  Options options = Options::from_env();
  options.max_tier = tier;
  auto session = Session::from_graph(c.graph, options);
  for (int i = 0; i < 3; ++i) session->run(c.inputs);
  session->wait_for_compiles();
  NamedTensors out;
  for (int i = 0; i <= options.validate_calls; ++i) out = session->run(c.inputs);
  Comparison cmp = compare_tensors(c.expected, out.at(0).second, Tolerance::for_dtype(DType::Float32));
  if (!cmp.equal) {
    state.SkipWithError(("result differs from the double-precision reference: " + cmp.message).c_str());
    return;
  }
  auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) benchmark::DoNotOptimize(session->run(c.inputs));
  // The fraction of the ceiling is a plain number, so it is computed here rather than as a rate.
  double per_s = double(state.iterations()) /
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const Ceilings& peak = machine_ceilings();
  if (c.flops > 0) {
    state.counters["FLOP/s"] = benchmark::Counter(c.flops, benchmark::Counter::kIsIterationInvariantRate);
    state.counters["of_gemm_peak"] = c.flops * per_s / peak.gemm_flop_per_s;
  } else {
    state.SetBytesProcessed(int64_t(c.bytes) * state.iterations());
    state.counters["of_copy_peak"] = c.bytes * per_s / peak.copy_bytes_per_s;
  }
  CallRecord last = session->last_call();
  std::string tiers;
  for (auto& t : last.tiers) tiers += (tiers.empty() ? "" : "+") + t;
  state.SetLabel("ran on " + tiers);
}

#ifdef TERRACE_HAVE_CUDA
// The device-to-device copy bandwidth (bytes read + written per second) of cuMemcpyDtoDAsync over
// 256 MiB, the GPU's ceiling for memory-bound kernels; measured once.
double gpu_copy_bytes_per_s() {
  static const double bw = [] {
    const size_t bytes = size_t(256) << 20;
    auto stream = std::make_shared<jit::cuda::Stream>();
    jit::cuda::DeviceBuffer a(bytes, stream->get()), b(bytes, stream->get());
    jit::cuda::Event start, end;
    for (int i = 0; i < 3; ++i) TERRACE_CU(cuMemcpyDtoDAsync, b.ptr(), a.ptr(), bytes, stream->get());
    const int reps = 20;
    start.record(*stream);
    for (int i = 0; i < reps; ++i) TERRACE_CU(cuMemcpyDtoDAsync, b.ptr(), a.ptr(), bytes, stream->get());
    end.record(*stream);
    end.synchronize();
    return 2.0 * double(bytes) * reps / (jit::cuda::Event::elapsed_ms(start, end) / 1e3);
  }();
  return bw;
}

// Tier 2: a session per case, warmed up once (google benchmark calls a case's function again for
// each iteration count it tries, and the warm-up, the interpreter and shadow validation over 32M
// elements, takes seconds): calls until the region runs on the GPU, the shadow-validated calls, and
// a check of the result there. The timed calls bind the inputs on the device and keep the output
// there (IoBinding), so that a call is the region's kernels and the session's own work, no transfer.
// They are queued without a synchronisation, so the clock stops after the last output is read back.
struct GpuCase {
  std::unique_ptr<Session> session;
  NamedTensors bound;
  std::string error;  // why the case cannot be timed, empty if it can
};

// Released at the end of main, while the driver is still there (not by a static destructor).
std::map<std::string, GpuCase> gpu_cases;

GpuCase& warmed_gpu_case(const std::string& name) {
  auto& cases = gpu_cases;
  auto it = cases.find(name);
  if (it != cases.end()) return it->second;
  GpuCase& g = cases[name];
  const auto start = std::chrono::steady_clock::now();
  const OpCase& c = get_case(name);
  Options options = Options::from_env();
  options.max_tier = Tier::Gpu;
  // No continuous re-check, whose copies back to the host would land in a timed call (the case
  // checks its results itself).
  options.recheck_budget = 0;
  g.session = Session::from_graph(c.graph, options);
  NamedTensors out;
  for (int i = 0; i < 200; ++i) {
    out = g.session->run(c.inputs);
    g.session->wait_for_compiles();
    const auto tiers = g.session->last_call().tiers;
    if (tiers.size() == 1 && tiers[0] == "gpu") break;
  }
  // The first calls on tier 2 are shadow-validated (each runs the interpreter too): not timed.
  for (int i = 1; i < options.validate_calls; ++i) out = g.session->run(c.inputs);
  if (g.session->last_call().tiers != std::vector<std::string>{"gpu"}) {
    g.error = "the region did not reach tier 2:\n" + g.session->report();
    return g;
  }
  Comparison cmp = compare_tensors(c.expected, out.at(0).second, Tolerance::for_dtype(DType::Float32));
  if (!cmp.equal) {
    g.error = "tier 2's result differs from the double-precision reference: " + cmp.message;
    return g;
  }
  for (const auto& [n, t] : c.inputs) g.bound.emplace_back(n, g.session->to_device(t));
  std::fprintf(stderr, "%s/gpu: case built and warmed up in %.1f s\n", name.c_str(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return g;
}

void run_gpu_case(benchmark::State& state, const std::string& name) {
  const OpCase& c = get_case(name);
  GpuCase& g = warmed_gpu_case(name);
  if (!g.error.empty()) {
    state.SkipWithError(g.error.c_str());
    return;
  }
  RunOptions keep;
  keep.outputs_on_device = true;
  // The clock stops on a read of the output's first element, which waits for the queued calls:
  // reading the whole output back (128 MB into fresh pageable memory, about 80 ms) would add
  // 20 us a call to a run of 4,000 calls. The whole output is checked after the clock.
  auto wait_for = [](const Tensor& t) {
    unsigned char first[16];
    if (t.on_device() && t.numel() > 0) t.device_storage()->read(first, std::min(sizeof first, t.nbytes()));
  };
  NamedTensors out = g.session->run(g.bound, keep);
  wait_for(out.at(0).second);
  auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) out = g.session->run(g.bound, keep);
  // The host's time to queue the calls: near the whole time, the session's own work per call (not
  // the GPU's) sets the pace.
  const double queued = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  wait_for(out.at(0).second);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Tensor last = out.at(0).second.to_host();
  // Manual time adds up what each call of SetIterationTime gives: here once, the whole loop's.
  state.SetIterationTime(s);
  if (g.session->last_call().tiers != std::vector<std::string>{"gpu"}) {  // a timed call left tier 2
    state.SkipWithError(("the timed calls did not stay on tier 2:\n" + g.session->report()).c_str());
    return;
  }
  Comparison cmp = compare_tensors(c.expected, last, Tolerance::for_dtype(DType::Float32));
  if (!cmp.equal) {
    state.SkipWithError(("timed calls' result differs: " + cmp.message).c_str());
    return;
  }
  const double per_s = double(state.iterations()) / s;
  state.SetBytesProcessed(int64_t(c.bytes) * state.iterations());
  state.counters["of_d2d_copy"] = c.bytes * per_s / gpu_copy_bytes_per_s();
  state.counters["us_per_call"] = 1e6 / per_s;
  state.counters["host_us_per_call"] = 1e6 * queued / double(state.iterations());
  state.SetLabel("ran on gpu, " + std::to_string(g.session->last_call().transfers) + " transfers per timed call");
}
#endif

void register_all() {
  for (const char* name : {"softmax", "layernorm", "gemm_bias_gelu", "conv_bias_relu", "softmax_attention",
                           "layernorm_bert", "softmax_attention_b1", "layernorm_bert_b1", "reducemean_rows64", "global_avgpool_1280x7x7",
                           "global_avgpool_32x256x56x56"})
    for (Tier tier : {Tier::Interp, Tier::Cpu})
      benchmark::RegisterBenchmark((std::string(name) + "/" + tier_name(tier)).c_str(),
                                   [name = std::string(name), tier](benchmark::State& s) { run_case(s, name, tier); })
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
#ifdef TERRACE_HAVE_CUDA
  // Tier 2 where there is a GPU (the H100 host), against torch.compile's kernels (bench/gpu_ops.py).
  if (jit::cuda::gpu_available())
    for (const char* name : {"softmax_8192x4096", "layernorm_8192x4096", "chain_16M", "softmax_attention", "layernorm_bert"})
      benchmark::RegisterBenchmark((std::string(name) + "/gpu").c_str(),
                                   [name = std::string(name)](benchmark::State& s) { run_gpu_case(s, name); })
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
#endif
}

}  // namespace
}  // namespace terrace::bench

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  terrace::bench::register_all();
  const auto& peak = terrace::bench::machine_ceilings();
  benchmark::AddCustomContext("copy_GBps", std::to_string(peak.copy_bytes_per_s / 1e9));
  benchmark::AddCustomContext("dnnl_sgemm_GFLOPs", std::to_string(peak.gemm_flop_per_s / 1e9));
  benchmark::RunSpecifiedBenchmarks();
#ifdef TERRACE_HAVE_CUDA
  terrace::bench::gpu_cases.clear();
#endif
  benchmark::Shutdown();
  return 0;
}
