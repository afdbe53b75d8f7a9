// Tier 2 backend: a region of elementwise ops -> the fusion group tier 1 builds (split by iteration
// domain) -> kernel IR -> CUDA C (render_c's Cuda dialect) -> one NVRTC program per region, a cubin
// for the device's arch, kept in the disk cache -> a module whose kernels run on a stream. A
// library region (a Gemm or MatMul, and the Relu it absorbed) -> one cuBLASLt matmul, fp32 without
// TF32, the bias and Relu as its epilogue. Versions take host or device inputs and return device
// tensors; each copy is counted (CompiledRegion::transfers).
#include "tiers/gpu/gpu_backend.h"

#include "interp/env_flag.h"
#include "tiers/gpu/gpu_attention.h"

#include "tiers/cpu/cpu_library.h"
#ifdef TERRACE_HAVE_DNNL
#include "jit/cpu/dnnl_activation.h"
#endif

#ifdef TERRACE_HAVE_CUDA
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>

#include "interp/env_flag.h"
#include "interp/log.h"
#include "jit/code_cache.h"
#include "jit/cpu/cpu_jit.h"
#include "jit/cuda/cublaslt_ops.h"
#include "jit/cuda/cuda_driver.h"
#include "jit/cuda/cuda_memory.h"
#include "jit/cuda/nvrtc.h"
#include "kernels/lower.h"
#include "kernels/printer.h"
#include "kernels/render_c.h"
#include "kernels/schedule_cuda.h"
#include "kernels/split.h"
#include "tiers/cpu/cpu_library.h"
#include "tiers/gpu/gpu_conv.h"
#include "tiers/gpu/gpu_graph.h"
#include "tiers/gpu/gpu_program.h"
#include "tiers/region_lowering.h"
#endif

namespace terrace {

bool gpu_fuses(const Node& last, const Node& next) {
  if (last.op == Op::MatMul && next.op == Op::Add) return false;  // tier 2 runs a MatMul alone or with a Relu
  if (cpu_library::is_pool(last.op) || cpu_library::is_pool(next.op)) return false;  // cuDNN regions hold no pool
  // A cuDNN chain is convolutions each with its epilogue act(y + bias + z): tier 1's channel copies
  // (Concat, Split) are not among its steps.
  if (next.op == Op::Concat || next.op == Op::Split) return false;
#ifdef TERRACE_HAVE_DNNL
  return !jit::dnnl_activation_of(next).has_value();  // Relu and Clip are not among these
#else
  return true;
#endif
}

void gpu_configure_passes(passes::PassConfig& config) {
  if (!env_flag("TERRACE_GPU_ATTENTION", true)) return;  // README: a switch for comparisons
  config.fuse_attention = true;
  config.attention_dtype = DType::Float32;
  config.attention_max_head = kGpuAttentionMaxHead;
}

#ifndef TERRACE_HAVE_CUDA
std::unique_ptr<Backend> make_gpu_backend(const std::string&, std::string* why, bool) {
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
  if (node.op == Op::Attention) return gpu_attention_can_compile(g, node);  // tiers/gpu/gpu_attention.h
  if (node.op == Op::Conv || node.op == Op::MaxPool || node.op == Op::AveragePool)
    return gpu_conv_can_compile(g, node);  // cuDNN and fixed kernels (tiers/gpu/gpu_conv.h)
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

// A kernel's name from its content: a hash of its CUDA C rendered under a placeholder name, so that
// identical kernels of different regions are named alike; a repeat within one program (`earlier`)
// gets a suffix.
std::string content_name(kernels::LoweredFunc& f, const std::vector<kernels::LoweredFunc>& earlier) {
  const std::string given = f.name;
  f.name = "tr_kernel";
  const std::string text = kernels::render_c(f, kernels::Dialect::Cuda);
  f.name = given;
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  std::string name = std::string("tk_") + hex;
  int repeat = 0;
  for (const kernels::LoweredFunc& e : earlier)
    if (e.name.rfind(name, 0) == 0) ++repeat;
  return repeat ? name + "_" + std::to_string(repeat) : name;
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
  std::vector<kernels::CudaSchedule> schedules;  // decided once per kernel: launch, alignment, render
  for (LoweredStep& step : lowered.steps) {
    const bool copy = step.kind == LoweredStep::Kind::Copy;
    std::vector<int> slots = step.slots;
    GpuStep k = GpuStep::lowered(step);
    if (copy) {
      p.steps.push_back(std::move(k));
      continue;
    }
    kernels::LoweredFunc& f = step.func;
    f.name = content_name(f, funcs);
    GpuWork& w = k.work.emplace();
    w.name = f.name;
    k.slots.clear();  // per kernel parameter (LoweredFunc::buffers order): a region slot
    for (const kernels::Buffer& b : f.buffers) k.slots.push_back(slots.at(size_t(b.slot)));
    const kernels::CudaSchedule schedule = kernels::schedule_cuda(f);
    w.aligned = kernels::cuda_aligned_params(f, schedule);
    w.extent = f.parallel_extent;
    // The schedule render_c follows (kernels/schedule_cuda.h) gives the launch; the device's SM
    // count is known only where there is one (0: an H100's).
    const kernels::CudaLaunch launch = kernels::cuda_launch(schedule, 0, f.parallel_extent, sm_count);
    w.grid = launch.grid;
    w.block = launch.block;
    p.steps.push_back(std::move(k));
    p.ir += kernels::to_string(f);
    funcs.push_back(std::move(f));
    schedules.push_back(schedule);
  }
  // No region id in the program: regions that lower alike (a transformer's layers) render the same
  // source, which compile_gpu_cubin finds in the cache instead of running NVRTC again.
  p.source = kernels::render_cuda_program(funcs, schedules, "a region of " + region.ops());
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

std::string cubin_key(const std::string& source, const std::string& arch);  // below compile_gpu_cubin

class GpuRegion : public CompiledRegion, public CapturableRegion {
 public:
  // `constant[i]`: region input i is a graph initializer (weights): copied to the device once and
  // kept there while its host tensor is the same one. The program's alias and constants: views
  // share their source's buffer; constants are copied to the device once. Intermediates live in
  // one device arena laid out by liveness (plan_memory), the same addresses every call. Every
  // call's work runs on `stream`, the backend's one stream, so that a device tensor one region
  // returns is ready for the next region's kernels without a synchronisation, and the arena is
  // rewritten only after the previous call's kernels have read it.
  GpuRegion(std::shared_ptr<jit::cuda::Module> module, GpuProgram program, size_t n_inputs, size_t n_outputs,
            bool perturb, std::vector<bool> constant, std::shared_ptr<jit::cuda::Stream> stream)
      : module_(std::move(module)), steps_(std::move(program.steps)),
        table_(table_of(program, n_inputs, n_outputs)), plan_(plan_memory(table_, steps_, 256)),
        perturb_(perturb), stream_(std::move(stream)), constant_(std::move(constant)), resident_(n_inputs),
        resident_source_(n_inputs, nullptr) {
    for (const GpuStep& k : steps_)
      if (k.check_last) checks_.push_back(&k);
    // Two calls' worth of buffers wait: a caller that keeps the last call's outputs while it makes
    // the next still finds the ones before.
    size_t made = n_inputs + plan_.escaping.size();
    for (size_t slot = n_inputs; slot < n_inputs + n_outputs; ++slot) made += table_.alias[slot] == -1;
    recycler_ = std::make_shared<jit::cuda::BufferRecycler>(stream_, 2 * made);
    output_storage = storage_of_outputs(table_, plan_);
  }

  // Inputs on the host or on the device (a device tensor is used where it is); returns device
  // tensors, ready in stream order: nothing waits for the kernels, but for a region whose run-time
  // index check must be read back.
  using CompiledRegion::run;
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, CallTally& tally) override {
    return run_into(inputs, {}, tally);
  }
  // Outputs into[o] where given (a call plan's block on this stream) and fitting.
  std::vector<Tensor> run_into(const std::vector<Tensor>& inputs, const std::vector<Tensor>& into,
                               CallTally& tally) override {
    std::lock_guard<std::mutex> lock(mu_);  // one staging buffer and arena per region
    jit::cuda::device();
    Bound b{table_.size()};
    int64_t copies = bind_inputs(inputs, b);
    if (plan_.arena_bytes && !arena_.bytes()) arena_ = jit::cuda::DeviceBuffer(plan_.arena_bytes, stream_->get());
    bind_outputs_and_intermediates(
        b,
        [&](size_t slot) {
          const size_t o = slot - table_.n_inputs;
          if (table_.output(slot) && o < into.size() && fits(into[o], table_.sigs[slot], true) &&
              on_this_stream(into[o]))
            return into[o];
          return recycler_->tensor(table_.sigs[slot].dtype, table_.sigs[slot].shape);
        },
        arena_.ptr());
    Device device{*this, b, *stream_};
    if (timing_) timing_->first.record(*stream_);
    run_program(steps_, device);
    if (timing_) time_call();
    if (!checks_.empty()) read_checks(b);
    std::vector<Tensor> out = outputs(b);
    if (perturb_) perturb(out);
    transfers += copies;
    tally.transfers += copies;
    return out;
  }

  // The same work enqueued on a capturing stream, over the graph's memory (tiers/gpu/gpu_graph.h).
  std::vector<Tensor> capture(const std::vector<Tensor>& inputs, GraphCapture& cx) override {
    std::lock_guard<std::mutex> lock(mu_);
    TERRACE_CHECK(!perturb_, NotImplemented, "a region with an injected fault (TERRACE_FAULT) is not captured");
    TERRACE_CHECK(device_constants_.size() == table_.constants.size(), NotImplemented,
                  "a region is captured only after it has run");
    Bound b{table_.size()};
    for (size_t i = 0; i < table_.n_inputs; ++i) {
      if (inputs[i].on_device()) {
        b.at[i] = inputs[i];
        continue;
      }
      TERRACE_CHECK(constant_[i] && resident_source_[i] == inputs[i].raw(), NotImplemented, "region input ", i,
                    " is a host tensor, not a resident initializer");
      b.at[i] = resident_[i];
      cx.held.push_back(b.at[i]);  // a later upload may replace the region's copy; the graph keeps this one
    }
    for (const Tensor& t : device_constants_) cx.held.push_back(t);
    bind_outputs_and_intermediates(
        b, [&](size_t slot) { return cx.tensor(table_.sigs[slot].dtype, table_.sigs[slot].shape); }, cx.scratch);
    Device device{*this, b, cx.stream};
    run_program(steps_, device);
    for (const GpuStep* c : checks_) cx.check(b.ptr[size_t(c->error_slot)], c->node, c->error_message);
    return outputs(b);
  }
  size_t arena_bytes() const override { return plan_.arena_bytes; }

 private:
  // This call's device buffers: a tensor per slot that has one (inputs, outputs, escaping
  // intermediates) and an address per slot (views and constants resolved).
  struct Bound {
    explicit Bound(size_t n) : at(n), ptr(n, 0) {}
    std::vector<Tensor> at;
    std::vector<CUdeviceptr> ptr;
    const Tensor& root_tensor(const GpuRegion& r, size_t slot) const {
      const size_t root = r.plan_.root[slot];
      const int alias = r.table_.alias[root];
      return alias <= -2 ? r.device_constants_[size_t(-2 - alias)] : at[root];
    }
  };

  // Tier 2's side of run_program: launches and copies on the region's stream.
  struct Device {
    GpuRegion& r;
    Bound& b;
    const jit::cuda::Stream& stream;  // the region's, or a capturing one
    std::vector<CUdeviceptr> ptrs;
    std::vector<void*> args;
    CUstream s() const { return stream.get(); }
    CUdeviceptr ptr(int slot) const { return slot < 0 ? CUdeviceptr(0) : b.ptr[size_t(slot)]; }
    void zero_word(int slot) { TERRACE_CU(cuMemsetD8Async, ptr(slot), 0, 2 * sizeof(int64_t), s()); }
    void copy(int from, int to) {
      if (size_t n = r.table_.bytes(size_t(to))) TERRACE_CU(cuMemcpyDtoDAsync, ptr(to), ptr(from), n, s());
    }
    void check(const GpuStep&) {}  // the words are read after the last step (read_checks)
    void run(const GpuStep& k) {
      const GpuWork& w = *k.work;
      ptrs.clear();
      for (int slot : k.slots) ptrs.push_back(ptr(slot));
      if (w.gemm) return w.gemm->run(ptrs[0], ptrs[1], ptrs[2], ptrs[3], ptrs[4], s());
      if (w.library) return w.library(ptrs.data(), s());
      int64_t begin = 0, end = w.extent;
      args.clear();
      for (CUdeviceptr& p : ptrs) args.push_back(&p);
      args.push_back(&begin);
      args.push_back(&end);
      bool aligned = true;  // for a kernel whose rows move by vectors (GpuWork::aligned)
      for (size_t i : w.aligned) aligned = aligned && ptrs[i] % 16 == 0;
      if (w.extent > 0) jit::cuda::launch(aligned ? w.fn : w.element_fn, {w.grid, w.block, 0}, stream, args.data());
    }
  };

  static SlotTable table_of(GpuProgram& p, size_t n_inputs, size_t n_outputs) {
    SlotTable t{std::move(p.slots), std::move(p.alias), std::move(p.constants), n_inputs, n_outputs};
    t.alias.resize(t.sigs.size(), -1);
    return t;
  }

  // The inputs' device tensors: as given, the resident copy of an initializer, or uploaded through
  // pinned memory (asynchronous DMA). Returns the copies made.
  int64_t bind_inputs(const std::vector<Tensor>& inputs, Bound& b) {
    int64_t copies = 0;
    // Initializers already on the device stay; the first call (or a new host tensor) copies them.
    for (size_t i = 0; i < table_.n_inputs; ++i) {
      if (!constant_[i] || inputs[i].on_device() || resident_source_[i] == inputs[i].raw()) continue;
      resident_[i] = jit::cuda::upload(inputs[i], stream_);
      resident_source_[i] = inputs[i].raw();
      inputs[i].drop_resident_pages();  // the device copy serves from now on (Tensor::file_backed)
      ++copies;
    }
    if (device_constants_.size() != table_.constants.size()) {  // values computed at compile time: once
      for (const Tensor& t : table_.constants) device_constants_.push_back(jit::cuda::upload(t, stream_));
      copies += int64_t(table_.constants.size());
    }
    size_t in_bytes = 0;
    for (size_t i = 0; i < table_.n_inputs; ++i) {
      if (inputs[i].on_device() && !on_this_stream(inputs[i])) {
        // Another session's device tensor (another stream, whose frees are not ordered after this
        // one's reads): through the host, which orders both sides.
        b.at[i] = jit::cuda::upload(inputs[i].to_host(), stream_);
        copies += 2;
      } else if (inputs[i].on_device()) b.at[i] = inputs[i];
      else if (constant_[i]) b.at[i] = resident_[i];
      else in_bytes += inputs[i].nbytes();
    }
    // The staging buffer is rewritten only once the previous call's copies out of it are done.
    if (in_bytes) {
      if (staged_) staged_->synchronize();
      auto* staging = static_cast<char*>(pinned_.reserve(in_bytes));
      size_t off = 0;
      for (size_t i = 0; i < table_.n_inputs; ++i) {
        if (b.at[i].defined()) continue;
        b.at[i] = recycler_->tensor(inputs[i].dtype(), inputs[i].shape());
        std::memcpy(staging + off, inputs[i].raw(), inputs[i].nbytes());
        jit::cuda::copy_to_device(b.at[i].device_address(), staging + off, inputs[i].nbytes(), *stream_);
        off += inputs[i].nbytes();
        ++copies;
      }
      if (!staged_) staged_.emplace();
      staged_->record(*stream_);
    }
    return copies;
  }

  // Outputs and escaping intermediates get buffers of their own from `make(slot)` (they leave the
  // region); the other intermediates their place in the arena at `arena`; views and constants
  // their source's address.
  template <class Make>
  void bind_outputs_and_intermediates(Bound& b, const Make& make, CUdeviceptr arena) {
    for (size_t slot = table_.n_inputs; slot < table_.size(); ++slot)
      if (table_.alias[slot] == -1 && (table_.output(slot) || std::binary_search(plan_.escaping.begin(),
                                                                                plan_.escaping.end(), slot)))
        b.at[slot] = make(slot);
    for (size_t s : plan_.planned) b.ptr[s] = arena + plan_.offset[s];
    for (size_t slot = 0; slot < table_.size(); ++slot) {
      const size_t root = plan_.root[slot];
      if (b.ptr[root] == 0) b.ptr[root] = b.root_tensor(*this, root).device_address();
      b.ptr[slot] = b.ptr[root];
    }
  }

  std::vector<Tensor> outputs(const Bound& b) const {
    std::vector<Tensor> out;
    for (size_t j = 0; j < table_.n_outputs; ++j)
      out.push_back(b.root_tensor(*this, table_.n_inputs + j).reshaped(table_.sigs[table_.n_inputs + j].shape));
    return out;
  }

  // TERRACE_DEVICE_TIMING: this call's work between the two events, counted (waits for it).
  void time_call() {
    timing_->second.record(*stream_);
    timing_->second.synchronize();
    device_ns += int64_t(1e6 * double(jit::cuda::Event::elapsed_ms(timing_->first, timing_->second)));
    ++device_calls;
  }

  // The run-time index checks' words: read back, so this call waits (which also surfaces a
  // kernel's fault, an illegal address, as an Error).
  void read_checks(const Bound& b) {
    auto* words = static_cast<int64_t*>(check_words_.reserve(2 * sizeof(int64_t) * checks_.size()));
    for (size_t c = 0; c < checks_.size(); ++c)
      jit::cuda::copy_to_host(words + 2 * c, b.ptr[size_t(checks_[c]->error_slot)], 2 * sizeof(int64_t), *stream_);
    stream_->synchronize();
    for (size_t c = 0; c < checks_.size(); ++c)
      raise_if_set(words + 2 * c, checks_[c]->node, checks_[c]->error_message);
  }

  // True for a device tensor whose storage is ordered on this region's stream.
  bool on_this_stream(const Tensor& t) const {
    const auto* st = dynamic_cast<const jit::cuda::StreamStorage*>(t.device_storage());
    return st && st->stream() == stream_;
  }

  // TERRACE_FAULT=miscompile:gpu: a deliberately wrong result, for testing validation.
  void perturb(std::vector<Tensor>& out) {
    for (Tensor& d : out) {
      if (d.numel() == 0) continue;
      Tensor t = d.to_host();
      perturb_for_fault(t);
      d = jit::cuda::upload(t, stream_);
    }
  }
  std::shared_ptr<jit::cuda::Module> module_;

 public:
  std::filesystem::path cache_file;  // the generated kernels' cubin in the disk cache, if any
  void forget_cached() override {
    std::error_code ec;
    if (!cache_file.empty() && std::filesystem::remove(cache_file, ec))
      log(LogLevel::Info, "code cache: removed ", cache_file.string(), " (failed validation)");
  }

 private:
  std::vector<GpuStep> steps_;
  SlotTable table_;
  MemoryPlan plan_;
  bool perturb_;
  std::mutex mu_;
  std::shared_ptr<jit::cuda::Stream> stream_;
  jit::cuda::PinnedBuffer pinned_, check_words_;
  std::optional<jit::cuda::Event> staged_;  // recorded after the last call's copies out of pinned_
  std::unique_ptr<std::pair<jit::cuda::Event, jit::cuda::Event>> timing_ =
      env_flag("TERRACE_DEVICE_TIMING", false) ? std::make_unique<std::pair<jit::cuda::Event, jit::cuda::Event>>()
                                               : nullptr;
  std::vector<bool> constant_;
  // Per constant input: its device copy and the host data it was copied from.
  std::vector<Tensor> resident_;
  std::vector<const void*> resident_source_;
  std::vector<Tensor> device_constants_;
  std::vector<const GpuStep*> checks_;  // steps whose error word is read after the call
  jit::cuda::DeviceBuffer arena_;       // the planned intermediates (allocated on the first call)
  // This call's outputs, escaping intermediates and uploaded inputs, over the buffers of earlier
  // calls' tensors that are no longer held.
  std::shared_ptr<jit::cuda::BufferRecycler> recycler_;
};

// A call plan's block of device memory (tiers/plan_memory.h), ordered on the backend's stream as
// every region's work is: a value placed where a dead one was is written after the last read of
// that one.
class DeviceBlock final : public MemoryBlock {
 public:
  DeviceBlock(size_t bytes, std::shared_ptr<jit::cuda::Stream> stream)
      : stream_(std::move(stream)), buffer_(std::max<size_t>(bytes, 1), stream_->get()) {}
  Tensor view(size_t offset, DType dtype, const Shape& shape, std::shared_ptr<void> keep) const override {
    TERRACE_CHECK(offset + size_t(shape_numel(shape)) * dtype_size(dtype) <= buffer_.bytes(), Internal,
                  "a placed value at ", offset, " passes the end of its ", buffer_.bytes(), "-byte block");
    return jit::cuda::device_view(buffer_.ptr() + offset, dtype, shape, stream_, std::move(keep));
  }

 private:
  std::shared_ptr<jit::cuda::Stream> stream_;
  jit::cuda::DeviceBuffer buffer_;
};

class GpuBackend : public Backend {
 public:
  GpuBackend(const std::string& cache_dir, std::string arch, bool time_gemms)
      : cache_(cache_dir.empty() ? jit::CodeCache::default_dir() : std::filesystem::path(cache_dir)),
        arch_(std::move(arch)), time_gemms_(time_gemms) {}
  Tier tier() const override { return Tier::Gpu; }
  int promotion_threshold(const Options& o) const override { return o.climb_threshold; }
  bool device_resident() const override { return true; }
  bool fuses(const Node& last, const Node& next) const override { return gpu_fuses(last, next); }
  void configure_passes(passes::PassConfig& config) const override { gpu_configure_passes(config); }

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
    if (is_gpu_conv_region(g, region))  // cuDNN convolutions, pooling kernels (tiers/gpu/gpu_conv.h)
      return make_region(g, region, build_gpu_conv_program(g, region, inputs, cache_, arch_), nullptr);
    if (is_gpu_attention_region(g, region))  // one fused kernel (tiers/gpu/gpu_attention.h)
      return make_region(g, region, build_gpu_attention_program(g, region, inputs, &cache_, arch_), nullptr);
    GpuProgram p = render_gpu_program(g, region, inputs, jit::cuda::device().multiprocessors);
    std::vector<char> cubin = compile_gpu_cubin(p.source, arch_, name + ".cu", cache_);
    auto module = std::make_shared<jit::cuda::Module>(cubin);
    for (GpuStep& k : p.steps) {
      if (!k.work) continue;
      k.work->fn = module->function(k.work->name);
      if (!k.work->aligned.empty()) k.work->element_fn = module->function(kernels::cuda_element_copy_name(k.work->name));
    }
    std::filesystem::path entry = cache_.enabled() ? cache_.path_of(cubin_key(p.source, arch_)) : "";
    std::unique_ptr<CompiledRegion> compiled = make_region(g, region, std::move(p), std::move(module));
    static_cast<GpuRegion&>(*compiled).cache_file = std::move(entry);
    return compiled;
  }

  Tensor to_device(const Tensor& host) override { return jit::cuda::upload(host, stream()); }
  std::unique_ptr<MemoryBlock> memory_block(size_t bytes) override {
    jit::cuda::device();
    return std::make_unique<DeviceBlock>(bytes, stream());
  }

  std::unique_ptr<TakenPlan> take_plan(const WholePlan& plan, std::string& why) override {
    return capture_whole_plan(plan, stream(), why);
  }

 private:
  // The compiled region running `p` (its kernels' functions resolved in `module`, if any).
  std::unique_ptr<CompiledRegion> make_region(const Graph& g, const Region& region, GpuProgram p,
                                              std::shared_ptr<jit::cuda::Module> module) {
    std::string source = std::move(p.source), ir = std::move(p.ir);
    std::vector<int> value_inputs = std::move(p.value_inputs);
    auto compiled = std::make_unique<GpuRegion>(std::move(module), std::move(p), region.inputs.size(),
                                                region.outputs.size(), fault_enabled("miscompile:gpu"),
                                                constant_inputs(g, region), stream());
    compiled->source = std::move(source);
    compiled->ir = std::move(ir);
    compiled->value_inputs = std::move(value_inputs);
    return compiled;
  }

  // The one stream every region's work runs on (created on first use).
  const std::shared_ptr<jit::cuda::Stream>& stream() {
    std::call_once(stream_once_, [this] {
      jit::cuda::device();
      stream_ = std::make_shared<jit::cuda::Stream>();
    });
    return stream_;
  }

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
    GpuProgram p;
    for (const Tensor& t : inputs) p.slots.push_back({t.dtype(), t.shape()});
    p.slots.push_back({DType::Float32, out});
    GpuStep step;
    step.work.emplace().name = spec.describe();
    step.work->gemm = std::make_shared<jit::cuda::CublasLtGemm>(spec, &cache_, time_gemms_);
    step.work->name += " (" + step.work->gemm->algorithm() + ")";
    step.slots = {a, b, c, bias, int(inputs.size())};
    p.steps.push_back(std::move(step));
    p.source = "// a library call, no generated code:\n// cuBLASLt " + spec.describe() + "\n";
    p.ir = "cuBLASLt " + spec.describe() + "\n";
    return make_region(g, region, std::move(p), nullptr);
  }

  jit::CodeCache cache_;
  std::string arch_;
  bool time_gemms_;  // cuBLASLt's candidates timed (max-autotune, TERRACE_GEMM_TUNE)
  std::once_flag stream_once_;
  std::shared_ptr<jit::cuda::Stream> stream_;
};

}  // namespace

GpuRegionCode render_gpu_region(const Graph& graph, const Region& region, const std::vector<Tensor>& inputs) {
  // A convolution or pool region: library calls and gpu_conv's fixed kernels (no GPU, no cuDNN needed).
  if (is_gpu_conv_region(graph, region)) {
    plan_gpu_conv_program(graph, region, inputs);  // refuses what tier 2 would refuse
    return {gpu_conv_kernels_source(), gpu_conv_kernel_names()};
  }
  if (is_gpu_attention_region(graph, region)) {
    // Refuses what tier 2 would refuse; its source is the kernel for the region's head sizes.
    return {build_gpu_attention_program(graph, region, inputs, nullptr, "").source, {kGpuAttentionKernel}};
  }
  GpuProgram p = render_gpu_program(graph, region, inputs);
  GpuRegionCode code;
  code.source = std::move(p.source);
  for (const GpuStep& k : p.steps)
    if (k.work) code.kernels.push_back(k.work->name);
  return code;
}

namespace {
const std::vector<std::string> kNvrtcOptions = {"-default-device"};

// The disk cache key of a cubin: everything it depends on (compile_gpu_cubin's comment).
std::string cubin_key(const std::string& source, const std::string& arch) {
  std::string key = "terrace tier-2 cubin 1\nNVRTC " + jit::nvrtc_version() + "\n" + arch + "\n";
  for (const std::string& o : kNvrtcOptions) key += o + " ";
  return key + "\n" + source;
}
}  // namespace

std::vector<char> compile_gpu_cubin(const std::string& source, const std::string& arch, const std::string& program,
                                    const jit::CodeCache& cache, bool* cached) {
  const std::vector<std::string>& options = kNvrtcOptions;
  const std::string key = cubin_key(source, arch);
  if (cached) *cached = false;
  jit::dump_file(program, source);  // TERRACE_DUMP_DIR: the CUDA source as NVRTC gets it
  if (std::optional<std::string> hit = cache.load(key)) {
    if (cached) *cached = true;
    return std::vector<char>(hit->begin(), hit->end());
  }
  std::vector<char> cubin = jit::nvrtc_compile(source, arch, program, options);
  cache.store(key, std::string_view(cubin.data(), cubin.size()));
  return cubin;
}

std::unique_ptr<Backend> make_gpu_backend(const std::string& cache_dir, std::string* why, bool time_gemms) {
  std::string reason;
  if (!jit::cuda::gpu_available(&reason) || !jit::nvrtc_available(&reason)) {
    if (why) *why = reason;
    return nullptr;
  }
  try {
    return std::make_unique<GpuBackend>(cache_dir, jit::cuda::device().arch(), time_gemms);
  } catch (const Error& e) {  // a driver that loads but cannot open the device
    if (why) *why = e.what();
    return nullptr;
  }
}

#endif

}  // namespace terrace
