// Tier 2 backend: a region of elementwise ops -> the fusion group tier 1 builds (split by iteration
// domain) -> kernel IR -> CUDA C (render_c's Cuda dialect) -> one NVRTC program per region, a cubin
// for the device's arch, kept in the disk cache -> a module whose kernels run on a stream. A
// library region (a Gemm or MatMul, and the Relu it absorbed) -> one cuBLASLt matmul, fp32 without
// TF32, the bias and Relu as its epilogue.
// This first step takes and returns host tensors: the region's inputs are copied in and its
// outputs out on every call, each copy counted (CompiledRegion::transfers).
#include "tiers/backend.h"
#include "tiers/gpu_backend.h"

#ifdef TERRACE_HAVE_CUDA
#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>

#include "interp/log.h"
#include "jit/code_cache.h"
#include "jit/cublaslt_ops.h"
#include "jit/cuda_driver.h"
#include "jit/cuda_memory.h"
#include "jit/nvrtc.h"
#include "kernels/lower.h"
#include "kernels/printer.h"
#include "kernels/render_c.h"
#include "kernels/schedule_cuda.h"
#include "kernels/split.h"
#include "tiers/cpu_library.h"
#include "tiers/gpu_conv.h"
#include "tiers/gpu_program.h"
#include "tiers/region_lowering.h"
#endif

namespace terrace {

#ifndef TERRACE_HAVE_CUDA
std::unique_ptr<Backend> make_gpu_backend(const std::string&, std::string* why) {
  if (why) *why = "this build has no tier 2 (built without TERRACE_WITH_CUDA)";
  return nullptr;
}
GpuRegionCode render_gpu_region(const Graph&, const Region&, const std::vector<Tensor>&) {
  fail(ErrorCode::NotImplemented, "this build has no tier 2 (built without TERRACE_WITH_CUDA)");
}
std::vector<char> compile_gpu_cubin(const std::string&, const std::string&, const std::string&,
                                    const jit::CodeCache&, bool*) {
  fail(ErrorCode::NotImplemented, "this build has no tier 2 (built without TERRACE_WITH_CUDA)");
}
#else

namespace {

// "" when tier 2 compiles the node, else why not.
std::string gpu_can_compile(const Graph& g, const Node& node) {
  if (node.op == Op::Conv || node.op == Op::MaxPool || node.op == Op::AveragePool)
    return gpu_conv_can_compile(g, node);  // cuDNN and fixed kernels (tiers/gpu_conv.h)
  if (node.op == Op::Gemm || node.op == Op::MatMul) {
    std::string why;
    if (!jit::cuda::cublaslt_available(&why)) return "tier 2 runs Gemm and MatMul through cuBLASLt: " + why;
    for (int v : node.inputs)
      if (v >= 0 && g.values[size_t(v)].info.dtype != DType::Float32)
        return "tier 2's Gemm and MatMul are float32; input '" + g.values[size_t(v)].name + "' is not";
    return "";
  }
  if (std::string why = can_lower_node(g, node); !why.empty()) return "tier 2 renders tier 1's kernel IR; " + why;
  return "";
}

// The region as tier 1 lowers it (tiers/region_lowering.h: the same fusion, reductions and data
// movement), every kernel rendered in the Cuda dialect into one program.
GpuProgram render_gpu_program(const Graph& g, const Region& region, const std::vector<Tensor>& inputs,
                              int sm_count = 0) {
  for (int n : region.nodes)
    if (std::string why = gpu_can_compile(g, g.nodes[size_t(n)]); !why.empty())
      fail(ErrorCode::CompileFailed, g.nodes[size_t(n)].describe(), ": ", why);
  LoweredRegion lowered = lower_region(g, region, inputs);
  GpuProgram p;
  p.slots = std::move(lowered.slots);
  p.alias = std::move(lowered.alias);
  p.constants = std::move(lowered.constants);
  p.value_inputs = std::move(lowered.value_inputs);
  std::vector<kernels::LoweredFunc> funcs;
  for (LoweredStep& step : lowered.steps) {
    GpuKernel k;
    k.node = step.node;
    k.error_slot = step.error_slot;
    k.check_first = step.check_first;
    k.check_last = step.check_last;
    k.error_message = step.error_message;
    if (step.kind == LoweredStep::Kind::Copy) {
      k.copy = true;
      k.args = step.slots;
      p.kernels.push_back(std::move(k));
      continue;
    }
    kernels::LoweredFunc& f = step.func;
    k.name = f.name;
    for (const kernels::Buffer& b : f.buffers) k.args.push_back(step.slots.at(size_t(b.slot)));
    k.extent = f.parallel_extent;
    // The schedule render_c follows (kernels/schedule_cuda.h) gives the launch; the device's SM
    // count is known only where there is one (0: an H100's).
    const kernels::CudaLaunch launch =
        kernels::cuda_launch(kernels::schedule_cuda(f), 0, f.parallel_extent, sm_count);
    k.grid = launch.grid;
    k.block = launch.block;
    p.kernels.push_back(std::move(k));
    p.ir += kernels::to_string(f);
    funcs.push_back(std::move(f));
  }
  p.source = kernels::render_cuda_program(funcs, "region " + std::to_string(region.id) + " (" + region.ops() + ")");
  return p;
}

// Per region input: true for a graph initializer that is not also a graph input (its host tensor
// is the graph's, the same in every call).
std::vector<bool> constant_inputs(const Graph& g, const Region& region) {
  std::vector<bool> constant;
  for (int v : region.inputs)
    constant.push_back(g.initializers.count(v) && std::find(g.inputs.begin(), g.inputs.end(), v) == g.inputs.end());
  return constant;
}

class GpuRegion : public CompiledRegion {
 public:
  // `constant[i]`: region input i is a graph initializer (weights): copied to the device once and
  // kept there while its host tensor is the same one. `alias` and `constants` as in GpuProgram
  // (views share their source's buffer; constants are copied to the device once).
  GpuRegion(std::shared_ptr<jit::cuda::Module> module, std::vector<GpuKernel> kernels,
            std::vector<kernels::TensorSig> slots, size_t n_inputs, size_t n_outputs, bool perturb,
            std::vector<bool> constant, std::vector<int> alias = {}, std::vector<Tensor> constants = {})
      : module_(std::move(module)), kernels_(std::move(kernels)), slots_(std::move(slots)), n_inputs_(n_inputs),
        n_outputs_(n_outputs), perturb_(perturb), constant_(std::move(constant)), resident_(n_inputs),
        resident_source_(n_inputs, nullptr), alias_(std::move(alias)), constants_(std::move(constants)) {
    alias_.resize(slots_.size(), -1);
    for (const GpuKernel& k : kernels_)
      if (k.check_last) checks_.push_back(&k);
  }

  std::vector<Tensor> run(const std::vector<Tensor>& inputs) override {
    std::lock_guard<std::mutex> lock(mu_);  // one stream and one staging buffer per region
    jit::cuda::device();
    if (!stream_) stream_.emplace();
    const CUstream s = stream_->get();
    // Initializers already on the device stay; the first call (or a new host tensor) copies them.
    for (size_t i = 0; i < n_inputs_; ++i) {
      if (!constant_[i] || resident_source_[i] == inputs[i].raw()) continue;
      resident_source_[i] = nullptr;
      resident_[i] = jit::cuda::DeviceBuffer(inputs[i].nbytes(), s);
      jit::cuda::copy_to_device(resident_[i].ptr(), inputs[i].raw(), inputs[i].nbytes(), *stream_);
      resident_source_[i] = inputs[i].raw();
      ++transfers;
    }
    if (device_constants_.size() != constants_.size()) {  // values computed at compile time: once
      for (const Tensor& t : constants_) {
        device_constants_.emplace_back(t.nbytes(), s);
        jit::cuda::copy_to_device(device_constants_.back().ptr(), t.raw(), t.nbytes(), *stream_);
        ++transfers;
      }
    }
    std::vector<jit::cuda::DeviceBuffer> buffers;  // this call's: the other inputs, outputs, intermediates
    buffers.reserve(slots_.size());
    for (size_t slot = 0; slot < slots_.size(); ++slot) {
      const kernels::TensorSig& sig = slots_[slot];
      const bool own = !(slot < n_inputs_ && constant_[slot]) && alias_[slot] == -1;
      buffers.emplace_back(own ? size_t(shape_numel(sig.shape)) * dtype_size(sig.dtype) : 0, s);
    }
    auto ptr = [&](size_t slot) {
      while (alias_[slot] >= 0) slot = size_t(alias_[slot]);  // a view: its source's buffer
      if (alias_[slot] <= -2) return device_constants_[size_t(-2 - alias_[slot])].ptr();
      return slot < n_inputs_ && constant_[slot] ? resident_[slot].ptr() : buffers[slot].ptr();
    };
    auto bytes = [&](size_t slot) { return size_t(shape_numel(slots_[slot].shape)) * dtype_size(slots_[slot].dtype); };

    // The other inputs through pinned memory, so that the copies are asynchronous DMA.
    size_t in_bytes = 0, out_bytes = 2 * sizeof(int64_t) * checks_.size();
    for (size_t i = 0; i < n_inputs_; ++i)
      if (!constant_[i]) in_bytes += inputs[i].nbytes();
    for (size_t j = 0; j < n_outputs_; ++j) out_bytes += bytes(n_inputs_ + j);
    auto* staging = static_cast<char*>(pinned_.reserve(std::max(in_bytes, out_bytes)));
    size_t at = 0;
    for (size_t i = 0; i < n_inputs_; ++i) {
      if (constant_[i]) continue;
      std::memcpy(staging + at, inputs[i].raw(), inputs[i].nbytes());
      jit::cuda::copy_to_device(buffers[i].ptr(), staging + at, inputs[i].nbytes(), *stream_);
      at += inputs[i].nbytes();
      ++transfers;
    }

    std::vector<CUdeviceptr> ptrs;
    std::vector<void*> args;
    int64_t begin = 0, end = 0;
    for (const GpuKernel& k : kernels_) {
      if (k.check_first) TERRACE_CU(cuMemsetD8Async, ptr(size_t(k.error_slot)), 0, 2 * sizeof(int64_t), s);
      if (k.gemm) {
        auto at = [&](int i) { return k.args[size_t(i)] < 0 ? CUdeviceptr(0) : ptr(size_t(k.args[size_t(i)])); };
        k.gemm->run(at(0), at(1), at(2), at(3), at(4), s);
        continue;
      }
      if (k.library) {
        ptrs.clear();
        for (int slot : k.args) ptrs.push_back(slot < 0 ? CUdeviceptr(0) : ptr(size_t(slot)));
        k.library(ptrs.data(), s);
        continue;
      }
      if (k.copy) {
        if (size_t n = bytes(size_t(k.args[1])))
          TERRACE_CU(cuMemcpyDtoDAsync, ptr(size_t(k.args[1])), ptr(size_t(k.args[0])), n, s);
        continue;
      }
      ptrs.clear();
      for (int slot : k.args) ptrs.push_back(ptr(size_t(slot)));
      args.clear();
      for (CUdeviceptr& p : ptrs) args.push_back(&p);
      end = k.extent;
      args.push_back(&begin);
      args.push_back(&end);
      if (k.extent > 0) jit::cuda::launch(k.fn, {k.grid, k.block, 0}, *stream_, args.data());
    }

    at = 0;
    for (size_t j = 0; j < n_outputs_; ++j) {
      jit::cuda::copy_to_host(staging + at, ptr(n_inputs_ + j), bytes(n_inputs_ + j), *stream_);
      at += bytes(n_inputs_ + j);
    }
    const size_t words_at = at;
    for (const GpuKernel* k : checks_) {
      jit::cuda::copy_to_host(staging + at, ptr(size_t(k->error_slot)), 2 * sizeof(int64_t), *stream_);
      at += 2 * sizeof(int64_t);
    }
    stream_->synchronize();  // also surfaces a kernel's fault (an illegal address) as an Error
    transfers += int64_t(n_outputs_);
    for (size_t c = 0; c < checks_.size(); ++c) {
      int64_t word[2];
      std::memcpy(word, staging + words_at + c * sizeof(word), sizeof(word));
      if (word[0] != 0) fail(ErrorCode::InvalidArgument, checks_[c]->node, ": ", checks_[c]->error_message, " (got ", word[1], ")");
    }
    std::vector<Tensor> out;
    at = 0;
    for (size_t j = 0; j < n_outputs_; ++j) {
      const kernels::TensorSig& sig = slots_[n_inputs_ + j];
      out.push_back(Tensor::empty(sig.dtype, sig.shape));
      std::memcpy(out.back().raw(), staging + at, out.back().nbytes());
      at += out.back().nbytes();
    }
    if (perturb_) perturb(out);
    return out;
  }

 private:
  // TERRACE_FAULT=miscompile:gpu: a deliberately wrong result, for testing validation.
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
  std::shared_ptr<jit::cuda::Module> module_;
  std::vector<GpuKernel> kernels_;
  std::vector<kernels::TensorSig> slots_;  // the region's inputs, its outputs, then intermediates
  size_t n_inputs_, n_outputs_;
  bool perturb_;
  std::mutex mu_;
  std::optional<jit::cuda::Stream> stream_;
  jit::cuda::PinnedBuffer pinned_;
  std::vector<bool> constant_;
  // Per constant input: its device copy and the host data it was copied from (freed before the
  // stream: declared after it).
  std::vector<jit::cuda::DeviceBuffer> resident_;
  std::vector<const void*> resident_source_;
  std::vector<int> alias_;
  std::vector<Tensor> constants_;
  std::vector<jit::cuda::DeviceBuffer> device_constants_;
  std::vector<const GpuKernel*> checks_;  // kernels whose error word is read after the call
};

class GpuBackend : public Backend {
 public:
  GpuBackend(const std::string& cache_dir, std::string arch)
      : cache_(cache_dir.empty() ? jit::CodeCache::default_dir() : std::filesystem::path(cache_dir)),
        arch_(std::move(arch)) {}
  Tier tier() const override { return Tier::Gpu; }

  std::string can_compile(const Graph& g, const Node& node) const override { return gpu_can_compile(g, node); }
  // fp32 products against the interpreter's: the same bound as tier 1's library regions.
  std::vector<Tensor> error_allowance(const Graph& g, const Region& region,
                                      const std::vector<Tensor>& inputs) const override {
    return cpu_library::error_allowance(g, region, inputs);
  }

  std::unique_ptr<CompiledRegion> compile(const Graph& g, const Region& region,
                                          const std::vector<Tensor>& inputs) override {
    const std::string name = "region" + std::to_string(region.id);
    if (fault_enabled("compile-fail:gpu"))
      fail(ErrorCode::CompileFailed, name, ": injected by TERRACE_FAULT=compile-fail:gpu");

    const Op first = g.nodes[size_t(region.nodes[0])].op;
    if (first == Op::Gemm || first == Op::MatMul) return compile_library(g, region, inputs);
    if (is_gpu_conv_region(g, region)) {  // cuDNN convolutions, pooling kernels (tiers/gpu_conv.h)
      GpuProgram p = build_gpu_conv_program(g, region, inputs, cache_, arch_);
      auto compiled = std::make_unique<GpuRegion>(nullptr, std::move(p.kernels), std::move(p.slots),
                                                  region.inputs.size(), region.outputs.size(),
                                                  fault_enabled("miscompile:gpu"), constant_inputs(g, region),
                                                  std::move(p.alias), std::move(p.constants));
      compiled->source = std::move(p.source);
      compiled->ir = std::move(p.ir);
      return compiled;
    }
    GpuProgram p = render_gpu_program(g, region, inputs, jit::cuda::device().multiprocessors);
    std::vector<char> cubin = compile_gpu_cubin(p.source, arch_, name + ".cu", cache_);
    auto module = std::make_shared<jit::cuda::Module>(cubin);
    for (GpuKernel& k : p.kernels)
      if (!k.copy) k.fn = module->function(k.name);
    auto compiled = std::make_unique<GpuRegion>(std::move(module), std::move(p.kernels), std::move(p.slots),
                                                region.inputs.size(), region.outputs.size(),
                                                fault_enabled("miscompile:gpu"), constant_inputs(g, region),
                                                std::move(p.alias), std::move(p.constants));
    compiled->source = std::move(p.source);
    compiled->ir = std::move(p.ir);
    compiled->value_inputs = std::move(p.value_inputs);
    return compiled;
  }

 private:
  // A Gemm or MatMul region, with the Relu it absorbed: one cuBLASLt matmul. Forms cuBLASLt's
  // epilogues cannot express (a C that is neither a row of N nor [M,N], a bias with beta != 1,
  // broadcast batches) fail the compile: the region keeps its tier-1 version.
  std::unique_ptr<CompiledRegion> compile_library(const Graph& g, const Region& region,
                                                  const std::vector<Tensor>& inputs) {
    const Node& op = g.nodes[size_t(region.nodes[0])];
    const bool relu = region.nodes.size() == 2 && g.nodes[size_t(region.nodes[1])].op == Op::Relu &&
                      g.nodes[size_t(region.nodes[1])].inputs[0] == op.outputs[0];
    TERRACE_CHECK((region.nodes.size() == 1 || relu) && region.outputs.size() == 1 &&
                      region.outputs[0] == g.nodes[size_t(region.nodes.back())].outputs[0],
                  CompileFailed, op.describe(), ": tier 2 runs a Gemm or MatMul alone or with a Relu; its region is ",
                  region.ops());
    auto slot_of = [&](int v) {
      for (size_t i = 0; i < region.inputs.size(); ++i)
        if (region.inputs[i] == v) return int(i);
      fail(ErrorCode::Internal, op.describe(), ": input value ", v, " is not a region input");
    };
    const int a = slot_of(op.inputs[0]), b = slot_of(op.inputs[1]);
    const Shape& sa = inputs[size_t(a)].shape();
    const Shape& sb = inputs[size_t(b)].shape();
    jit::cuda::GemmSpec spec;
    spec.relu = relu;
    Shape out;
    int c = -1, bias = -1;
    if (op.op == Op::Gemm) {
      TERRACE_CHECK(sa.size() == 2 && sb.size() == 2, CompileFailed, op.describe(), ": Gemm of non-2-D operands");
      spec.trans_a = op.attr_int("transA", 0) != 0;
      spec.trans_b = op.attr_int("transB", 0) != 0;
      spec.alpha = op.attr_float("alpha", 1.0f);
      spec.beta = op.attr_float("beta", 1.0f);
      spec.m = spec.trans_a ? sa[1] : sa[0];
      spec.k = spec.trans_a ? sa[0] : sa[1];
      spec.n = spec.trans_b ? sb[0] : sb[1];
      out = {spec.m, spec.n};
      if (op.inputs.size() > 2 && op.inputs[2] >= 0) {
        const int cs = slot_of(op.inputs[2]);
        const Shape& sc = inputs[size_t(cs)].shape();
        if (sc == Shape{spec.m, spec.n}) {
          spec.has_c = true;
          c = cs;
        } else if ((sc == Shape{spec.n} || sc == Shape{1, spec.n}) && spec.beta == 1.0f) {
          spec.has_bias = true;
          bias = cs;
        } else {
          fail(ErrorCode::CompileFailed, op.describe(), ": C of shape ", shape_str(sc), " with beta ", spec.beta,
               " is not a cuBLASLt epilogue");
        }
      }
    } else {
      TERRACE_CHECK(sa.size() >= 2 && sb.size() >= 2, CompileFailed, op.describe(), ": MatMul of a 1-D operand");
      spec.k = sa.back();
      spec.n = sb.back();
      const int64_t rows = sa[sa.size() - 2];
      const Shape batch_a(sa.begin(), sa.end() - 2), batch_b(sb.begin(), sb.end() - 2);
      out = batch_a;
      if (sb.size() == 2) {  // a shared B: A's batches fold into M
        spec.m = rows * shape_numel(batch_a);
      } else {
        TERRACE_CHECK(batch_a == batch_b, CompileFailed, op.describe(), ": broadcast batches ", shape_str(sa), " x ",
                      shape_str(sb));
        spec.m = rows;
        spec.batch = shape_numel(batch_a);
        spec.stride_a = rows * spec.k;
        spec.stride_b = spec.k * spec.n;
      }
      out.push_back(rows);
      out.push_back(spec.n);
    }
    std::vector<kernels::TensorSig> slots;
    for (const Tensor& t : inputs) slots.push_back({t.dtype(), t.shape()});
    slots.push_back({DType::Float32, out});
    GpuKernel step;
    step.name = spec.describe();
    step.gemm = std::make_shared<jit::cuda::CublasLtGemm>(spec);
    step.args = {a, b, c, bias, int(inputs.size())};
    auto compiled = std::make_unique<GpuRegion>(nullptr, std::vector<GpuKernel>{std::move(step)}, std::move(slots),
                                                inputs.size(), 1, fault_enabled("miscompile:gpu"),
                                                constant_inputs(g, region));
    compiled->source = "// a library call, no generated code:\n// cuBLASLt " + spec.describe() + "\n";
    compiled->ir = "cuBLASLt " + spec.describe() + "\n";
    return compiled;
  }

  jit::CodeCache cache_;
  std::string arch_;
};

}  // namespace

GpuRegionCode render_gpu_region(const Graph& graph, const Region& region, const std::vector<Tensor>& inputs) {
  // A convolution or pool region: library calls and gpu_conv's fixed kernels (no GPU, no cuDNN needed).
  if (is_gpu_conv_region(graph, region)) return {gpu_conv_kernels_source(), gpu_conv_kernel_names()};
  GpuProgram p = render_gpu_program(graph, region, inputs);
  GpuRegionCode code;
  code.source = std::move(p.source);
  for (const GpuKernel& k : p.kernels)
    if (!k.copy) code.kernels.push_back(k.name);
  return code;
}

std::vector<char> compile_gpu_cubin(const std::string& source, const std::string& arch, const std::string& program,
                                    const jit::CodeCache& cache, bool* cached) {
  const std::vector<std::string> options = {"-default-device"};
  std::string key = "terrace tier-2 cubin 1\nNVRTC " + jit::nvrtc_version() + "\n" + arch + "\n";
  for (const std::string& o : options) key += o + " ";
  key += "\n" + source;
  if (cached) *cached = false;
  if (std::optional<std::string> hit = cache.load(key)) {
    if (cached) *cached = true;
    return std::vector<char>(hit->begin(), hit->end());
  }
  std::vector<char> cubin = jit::nvrtc_compile(source, arch, program, options);
  cache.store(key, std::string_view(cubin.data(), cubin.size()));
  return cubin;
}

std::unique_ptr<Backend> make_gpu_backend(const std::string& cache_dir, std::string* why) {
  std::string reason;
  if (!jit::cuda::gpu_available(&reason) || !jit::nvrtc_available(&reason)) {
    if (why) *why = reason;
    return nullptr;
  }
  try {
    return std::make_unique<GpuBackend>(cache_dir, jit::cuda::device().arch());
  } catch (const Error& e) {  // a driver that loads but cannot open the device
    if (why) *why = e.what();
    return nullptr;
  }
}

#endif

}  // namespace terrace
