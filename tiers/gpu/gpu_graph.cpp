// Whole call plans as CUDA graphs (tiers/gpu/gpu_graph.h).
#include "tiers/gpu/gpu_graph.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>

#include "interp/log.h"
#include "jit/cuda/cuda_memory.h"

namespace terrace {

// Device memory a graph owns for its life: buffers by size, each handed out again once the tensor
// over it is gone (during the capture: a dead value's buffer serves a later one), never to anyone
// outside the graph. Plain cuMemAlloc, not the stream-ordered pool, which a capture would record.
class GraphMemory {
 public:
  explicit GraphMemory(std::shared_ptr<jit::cuda::Stream> stream) : stream_(std::move(stream)) {}
  ~GraphMemory() {
    for (CUdeviceptr p : all_) jit::cuda::driver().cuMemFree(p);
  }
  static size_t rounded(size_t bytes) { return (std::max<size_t>(bytes, 1) + 255) / 256 * 256; }
  CUdeviceptr take(size_t bytes) {
    bytes = rounded(bytes);
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = free_.find(bytes); it != free_.end()) {
      const CUdeviceptr p = it->second;
      free_.erase(it);
      return p;
    }
    CUdeviceptr p = 0;
    TERRACE_CU(cuMemAlloc, &p, bytes);
    all_.push_back(p);
    total_ += bytes;
    return p;
  }
  void give(CUdeviceptr p, size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    free_.emplace(rounded(bytes), p);
  }
  size_t bytes() const { return total_; }
  const jit::cuda::Stream& stream() const { return *stream_; }

 private:
  std::shared_ptr<jit::cuda::Stream> stream_;
  std::mutex mu_;
  std::multimap<size_t, CUdeviceptr> free_;
  std::vector<CUdeviceptr> all_;
  size_t total_ = 0;
};

// Host buffers for a plan's outputs, recycled once the caller drops a call's tensors: a large
// output freshly allocated on every call (GPT-2's 25.7 MB of logits) faulted in every page
// whenever glibc had handed the last one's pages back, several times the copy itself (figures:
// bench/RESULTS.md). At most two free buffers a size are kept.
class HostOutputs : public std::enable_shared_from_this<HostOutputs> {
 public:
  ~HostOutputs() {
    for (auto& [bytes, p] : free_) std::free(p);
  }
  Tensor take(DType dtype, const Shape& shape) {
    const size_t bytes = size_t(shape_numel(shape)) * dtype_size(dtype);
    if (bytes == 0 || dtype == DType::String) return Tensor::empty(dtype, shape);
    const size_t size = (bytes + 63) / 64 * 64;
    void* p = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto it = free_.find(size); it != free_.end()) {
        p = it->second;
        free_.erase(it);
      }
    }
    if (!p && !(p = std::aligned_alloc(64, size)))
      fail(ErrorCode::OutOfMemory, "cannot allocate ", bytes, " bytes for an output of shape ", shape_str(shape));
    std::weak_ptr<HostOutputs> pool = weak_from_this();
    std::shared_ptr<void> owner(p, [pool, size](void* q) {
      if (auto keep = pool.lock(); keep && keep->give(q, size)) return;
      std::free(q);
    });
    return Tensor::adopt(dtype, shape, p, bytes, std::move(owner));
  }

 private:
  bool give(void* p, size_t size) {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.count(size) >= 2) return false;
    free_.emplace(size, p);
    return true;
  }
  std::mutex mu_;
  std::multimap<size_t, void*> free_;
};

namespace {

class GraphStorage final : public DeviceStorage {
 public:
  GraphStorage(std::shared_ptr<GraphMemory> memory, size_t bytes)
      : memory_(std::move(memory)), bytes_(bytes), ptr_(memory_->take(bytes)) {}
  ~GraphStorage() override { memory_->give(ptr_, bytes_); }
  uint64_t address() const override { return ptr_; }
  size_t bytes() const override { return bytes_; }
  void read(void* dst, size_t bytes) const override {
    jit::cuda::copy_to_host(dst, ptr_, bytes, memory_->stream());
    memory_->stream().synchronize();
  }
  std::string where() const override { return "cuda:0"; }

 private:
  std::shared_ptr<GraphMemory> memory_;
  size_t bytes_;
  CUdeviceptr ptr_;
};

class CapturedPlan final : public TakenPlan {
 public:
  explicit CapturedPlan(std::shared_ptr<jit::cuda::Stream> stream)
      : stream_(std::move(stream)), memory_(std::make_shared<GraphMemory>(stream_)) {}
  ~CapturedPlan() override {
    // The last replay's work ends before its memory goes (errors here have no one to go to).
    const jit::cuda::Driver& d = jit::cuda::driver();
    d.cuStreamSynchronize(stream_->get());
    if (exec_) d.cuGraphExecDestroy(exec_);
    if (graph_) d.cuGraphDestroy(graph_);
  }

  std::optional<std::vector<Tensor>> run(const std::vector<Tensor>& inputs, bool on_device,
                                         CallTally& tally) override {
    std::lock_guard<std::mutex> lock(mu_);  // one set of static buffers
    jit::cuda::device();
    const jit::cuda::Stream& s = *stream_;
    size_t staged = 0;
    for (const Tensor& t : inputs) staged += t.on_device() ? 0 : t.nbytes();
    staged = (staged + 7) / 8 * 8;
    char* stage = static_cast<char*>(staging_.reserve(staged + 2 * sizeof(int64_t) * checks_.size() + 8));
    size_t off = 0;
    for (size_t i = 0; i < inputs.size(); ++i) copy_in(inputs[i], inputs_[i], stage, off, tally);
    TERRACE_CU(cuGraphLaunch, exec_, s.get());
    auto* words = reinterpret_cast<int64_t*>(stage + staged);
    for (size_t c = 0; c < checks_.size(); ++c)
      jit::cuda::copy_to_host(words + 2 * c, checks_[c].word, 2 * sizeof(int64_t), s);
    // Outputs straight into their tensors: a host tensor's copy waits for the graph (a pageable
    // copy is synchronous), a device tensor's is ordered after it on the stream.
    std::vector<Tensor> out;
    for (const Tensor& t : outputs_) {
      out.push_back(on_device ? jit::cuda::device_tensor(t.dtype(), t.shape(), stream_)
                              : host_outputs_->take(t.dtype(), t.shape()));
      if (t.nbytes() == 0) continue;
      if (on_device) {
        TERRACE_CU(cuMemcpyDtoDAsync, out.back().device_address(), t.device_address(), t.nbytes(), s.get());
      } else {
        jit::cuda::copy_to_host(out.back().raw(), t.device_address(), t.nbytes(), s);
        ++tally.transfers;
      }
    }
    s.synchronize();
    for (size_t c = 0; c < checks_.size(); ++c)
      if (words[2 * c] != 0) return std::nullopt;  // the step-by-step run raises it, naming the node
    return out;
  }

  size_t device_bytes() const override { return memory_->bytes(); }
  std::string describe() const override {
    return "CUDA graph of " + std::to_string(nodes_) + " nodes over " + std::to_string(steps_) + " regions, " +
           std::to_string(memory_->bytes() >> 10) + " KiB of device memory";
  }

 private:
  // Input `t` into its static buffer `dst`: a host tensor through pinned staging; a device tensor
  // on the device, or through the host when it is ordered on another stream.
  void copy_in(const Tensor& t, const Tensor& dst, char* stage, size_t& off, CallTally& tally) {
    const size_t n = t.nbytes();
    if (n == 0) return;
    if (t.on_device()) {
      const auto* st = dynamic_cast<const jit::cuda::StreamStorage*>(t.device_storage());
      if (st && st->stream() == stream_) {
        TERRACE_CU(cuMemcpyDtoDAsync, dst.device_address(), t.device_address(), n, stream_->get());
        return;
      }
      const Tensor h = t.to_host();
      staging_other_ = h;  // kept until the copy out of it is done (the next call's synchronize)
      jit::cuda::copy_to_device(dst.device_address(), h.raw(), n, *stream_);
      tally.transfers += 2;
      return;
    }
    std::memcpy(stage + off, t.raw(), n);
    jit::cuda::copy_to_device(dst.device_address(), stage + off, n, *stream_);
    off += n;
    ++tally.transfers;
  }


 public:  // filled by capture_whole_plan
  std::shared_ptr<jit::cuda::Stream> stream_;
  std::shared_ptr<GraphMemory> memory_;
  std::shared_ptr<HostOutputs> host_outputs_ = std::make_shared<HostOutputs>();
  CUgraph graph_ = nullptr;
  CUgraphExec exec_ = nullptr;
  size_t nodes_ = 0, steps_ = 0;
  std::vector<Tensor> inputs_, outputs_;  // the static buffers, graph order
  std::vector<GraphCapture::Check> checks_;
  std::vector<Tensor> held_;

 private:
  std::mutex mu_;
  jit::cuda::PinnedBuffer staging_;
  Tensor staging_other_;
};

// Per value, the last step reading it (the graph's outputs: never released).
std::vector<int> last_reads(const WholePlan& plan) {
  std::vector<int> last(plan.values, -1);
  for (size_t k = 0; k < plan.steps.size(); ++k)
    for (int v : plan.steps[k].inputs) last[size_t(v)] = int(k);
  for (int v : plan.outputs) last[size_t(v)] = INT_MAX;
  for (int v : plan.inputs) last[size_t(v)] = INT_MAX;  // static buffers
  return last;
}

}  // namespace

Tensor GraphCapture::tensor(DType dtype, const Shape& shape) {
  const size_t bytes = size_t(shape_numel(shape)) * dtype_size(dtype);
  return Tensor::on_device(dtype, shape, std::make_shared<GraphStorage>(memory, bytes));
}

void GraphCapture::check(CUdeviceptr word, std::string node, std::string message) {
  Tensor kept = tensor(DType::Int64, {2});
  TERRACE_CU(cuMemcpyDtoDAsync, kept.device_address(), word, 2 * sizeof(int64_t), stream.get());
  checks.push_back({kept.device_address(), std::move(node), std::move(message)});
  held.push_back(std::move(kept));
}

// The steps enqueued in order on a private capturing stream (relaxed mode: the allocations of
// the graph's memory happen meanwhile), each dead value's buffer back in the graph's pool.
static void capture_steps(const WholePlan& plan, const std::vector<CapturableRegion*>& regions, std::vector<Tensor>& env,
                          GraphCapture& cx) {
  const std::vector<int> last = last_reads(plan);
  std::vector<Tensor> in;
  for (size_t k = 0; k < plan.steps.size(); ++k) {
    const WholePlan::Step& step = plan.steps[k];
    in.clear();
    for (int v : step.inputs) in.push_back(env[size_t(v)]);
    std::vector<Tensor> out = regions[k]->capture(in, cx);
    for (size_t i = 0; i < step.outputs.size(); ++i) env[size_t(step.outputs[i])] = std::move(out[i]);
    in.clear();
    for (int v : step.inputs)
      if (last[size_t(v)] == int(k)) env[size_t(v)] = Tensor();
  }
}

std::unique_ptr<TakenPlan> capture_whole_plan(const WholePlan& plan, const std::shared_ptr<jit::cuda::Stream>& stream,
                                              std::string& why) {
  std::vector<CapturableRegion*> regions;
  size_t scratch = 0;
  for (const WholePlan::Step& step : plan.steps) {
    auto* r = dynamic_cast<CapturableRegion*>(step.code.get());
    if (!r) {
      why = "a step is not a tier-2 region";
      return nullptr;
    }
    regions.push_back(r);
    scratch = std::max(scratch, r->arena_bytes());
  }
  jit::cuda::device();
  auto cp = std::make_unique<CapturedPlan>(stream);
  jit::cuda::Stream capturing;
  GraphCapture cx{capturing, cp->memory_};
  if (scratch) cx.scratch = cp->memory_->take(scratch);  // the regions run one after another
  std::vector<Tensor> env(plan.values);
  for (size_t i = 0; i < plan.inputs.size(); ++i) {
    const Tensor& example = plan.example_inputs[i];
    env[size_t(plan.inputs[i])] = cx.tensor(example.dtype(), example.shape());
    cp->inputs_.push_back(env[size_t(plan.inputs[i])]);
  }
  for (const auto& [v, t] : plan.constants) env[size_t(v)] = t;
  const jit::cuda::Driver& d = jit::cuda::driver();
  TERRACE_CU(cuStreamBeginCapture, capturing.get(), CU_STREAM_CAPTURE_MODE_RELAXED);
  CUgraph graph = nullptr;
  try {
    capture_steps(plan, regions, env, cx);
  } catch (const std::exception& e) {
    d.cuStreamEndCapture(capturing.get(), &graph);
    if (graph) d.cuGraphDestroy(graph);
    why = std::string("capture failed: ") + e.what();
    return nullptr;
  }
  TERRACE_CU(cuStreamEndCapture, capturing.get(), &graph);
  cp->graph_ = graph;
  TERRACE_CU(cuGraphInstantiateWithFlags, &cp->exec_, graph, 0);
  TERRACE_CU(cuGraphGetNodes, graph, nullptr, &cp->nodes_);
  for (int v : plan.outputs) {
    const Tensor& t = env[size_t(v)];
    if (!t.defined() || !t.on_device() || !dynamic_cast<const GraphStorage*>(t.device_storage())) {
      why = "graph output " + std::to_string(v) + " is not made by a step";
      return nullptr;
    }
    cp->outputs_.push_back(t);
  }
  cp->steps_ = plan.steps.size();
  cp->checks_ = std::move(cx.checks);
  cp->held_ = std::move(cx.held);
  return cp;
}

}  // namespace terrace
