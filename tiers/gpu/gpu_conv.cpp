// Tier 2's convolution and pooling regions (tiers/gpu/gpu_conv.h): cuDNN convolutions, a generated
// epilogue for bias, residual and activation, and pooling kernels with the interpreter's semantics.
#include "tiers/gpu/gpu_conv.h"

#ifdef TERRACE_HAVE_CUDA
#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <optional>

#include "interp/error.h"
#include "interp/ops/conv.h"
#include "jit/code_cache.h"
#include "jit/cuda/cuda_driver.h"
#include "jit/cuda/cuda_memory.h"
#include "jit/cuda/cudnn_ops.h"
#include "tiers/gpu/gpu_backend.h"

namespace terrace {
namespace {

// The pooling kernel's geometry: spatial dims right-aligned into 3 slots (leading slots size 1,
// kernel 1, stride 1, no pads), as the interpreter's PoolGeometry. Passed by value to the kernel:
// the same layout on both sides (int64 fields only).
struct PoolParams {
  int64_t in[3], out[3], kernel[3], stride[3], dilation[3], pad_begin[3], pad_end[3];
  int64_t planes;  // N * C
  int64_t mode;    // 0 max, 1 average over the taps inside the input, 2 average counting the pads
};

const char* const kKernelsSource = R"(// Terrace tier 2: convolution and pooling regions' kernels (tiers/gpu/gpu_conv.cpp).
typedef long long i64;

struct PoolParams {
  i64 in[3], out[3], kernel[3], stride[3], dilation[3], pad_begin[3], pad_end[3];
  i64 planes, mode;
};

// act: 0 none, 1 Relu (NaN stays, as the interpreter's), 2 Clip(lo, hi) (NaN stays).
__device__ __forceinline__ float terrace_act(float v, int act, float lo, float hi) {
  if (act == 1) return v < 0.0f ? 0.0f : v;
  if (act == 2) {
    v = v < lo ? lo : v;
    return v > hi ? hi : v;
  }
  return v;
}

// y = act(y + bias[c] + z) over NCHW y of n elements: c = (i / spatial) % channels; bias and z
// may be null. Added in the interpreter's order: the convolution with its bias, then the residual.
extern "C" __global__ void terrace_conv_epilogue(float* y, const float* bias, const float* z, i64 n, i64 spatial,
                                                 i64 channels, int act, float lo, float hi) {
  const i64 step = (i64)gridDim.x * blockDim.x;
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
    float v = y[i];
    if (bias) v += bias[(i / spatial) % channels];
    if (z) v += z[i];
    y[i] = terrace_act(v, act, lo, hi);
  }
}

// The same over float4s, where spatial % 4 == 0 (a float4 never spans two channels) and y and z
// are 16-byte aligned: n4 = n / 4, spatial4 = spatial / 4.
extern "C" __global__ void terrace_conv_epilogue4(float4* y, const float* bias, const float4* z, i64 n4,
                                                  i64 spatial4, i64 channels, int act, float lo, float hi) {
  const i64 step = (i64)gridDim.x * blockDim.x;
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += step) {
    float4 v = y[i];
    if (bias) {
      const float b = bias[(i / spatial4) % channels];
      v.x += b; v.y += b; v.z += b; v.w += b;
    }
    if (z) {
      const float4 r = z[i];
      v.x += r.x; v.y += r.y; v.z += r.z; v.w += r.w;
    }
    v.x = terrace_act(v.x, act, lo, hi);
    v.y = terrace_act(v.y, act, lo, hi);
    v.z = terrace_act(v.z, act, lo, hi);
    v.w = terrace_act(v.w, act, lo, hi);
    y[i] = v;
  }
}

// y [planes, o0, o1, o2] = x [planes, i0, i1, i2] placed at offset (b0, b1, b2), zeros around it:
// the part of a convolution's pads that differs between a dim's two ends.
extern "C" __global__ void terrace_conv_pad(float* y, const float* x, i64 n, i64 i0, i64 i1, i64 i2, i64 o0, i64 o1,
                                            i64 o2, i64 b0, i64 b1, i64 b2) {
  const i64 step = (i64)gridDim.x * blockDim.x;
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
    i64 r = i;
    const i64 c2 = r % o2 - b2;
    r /= o2;
    const i64 c1 = r % o1 - b1;
    r /= o1;
    const i64 c0 = r % o0 - b0;
    const i64 p = r / o0;
    const bool inside = c0 >= 0 && c0 < i0 && c1 >= 0 && c1 < i1 && c2 >= 0 && c2 < i2;
    y[i] = inside ? x[((p * i0 + c0) * i1 + c1) * i2 + c2] : 0.0f;
  }
}

__device__ __forceinline__ i64 terrace_ceil_div(i64 a, i64 b) { return (a + b - 1) / b; }

// MaxPool and AveragePool, one thread per output, as the interpreter's nn_pool.cpp: the taps of
// a window that lie inside the input; max keeps the first maximum and passes over NaN (a window
// of NaN only gives NaN, an empty one -inf); the average sums in double and divides by the taps inside the input (mode
// 1) or inside the padded input (mode 2), 0 for none.
extern "C" __global__ void terrace_pool(float* y, const float* x, i64 n, PoolParams g) {
  const i64 step = (i64)gridDim.x * blockDim.x;
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
    i64 o[3], r = i;
    o[2] = r % g.out[2];
    r /= g.out[2];
    o[1] = r % g.out[1];
    r /= g.out[1];
    o[0] = r % g.out[0];
    const i64 plane = r / g.out[0];
    i64 lo[3], hi[3], start[3];
    for (int d = 0; d < 3; ++d) {
      start[d] = o[d] * g.stride[d] - g.pad_begin[d];
      lo[d] = start[d] >= 0 ? 0 : terrace_ceil_div(-start[d], g.dilation[d]);
      i64 h = start[d] >= g.in[d] ? 0 : terrace_ceil_div(g.in[d] - start[d], g.dilation[d]);
      h = h < g.kernel[d] ? h : g.kernel[d];
      hi[d] = h > lo[d] ? h : lo[d];
    }
    const float* xp = x + plane * g.in[0] * g.in[1] * g.in[2];
    if (g.mode == 0) {
      float best = -__int_as_float(0x7f800000);
      bool found = false;
      for (i64 k0 = lo[0]; k0 < hi[0]; ++k0)
        for (i64 k1 = lo[1]; k1 < hi[1]; ++k1)
          for (i64 k2 = lo[2]; k2 < hi[2]; ++k2) {
            const i64 a = start[0] + k0 * g.dilation[0], b = start[1] + k1 * g.dilation[1],
                      c = start[2] + k2 * g.dilation[2];
            const float v = xp[(a * g.in[1] + b) * g.in[2] + c];
            if (!found || v > best || (best != best && v == v)) {
              best = v;
              found = true;
            }
          }
      y[i] = best;
    } else {
      double sum = 0;
      i64 taps = 0;
      for (i64 k0 = lo[0]; k0 < hi[0]; ++k0)
        for (i64 k1 = lo[1]; k1 < hi[1]; ++k1)
          for (i64 k2 = lo[2]; k2 < hi[2]; ++k2) {
            const i64 a = start[0] + k0 * g.dilation[0], b = start[1] + k1 * g.dilation[1],
                      c = start[2] + k2 * g.dilation[2];
            sum += (double)xp[(a * g.in[1] + b) * g.in[2] + c];
            ++taps;
          }
      if (g.mode == 2) {
        taps = 1;
        for (int d = 0; d < 3; ++d) {
          i64 count = 0;
          for (i64 k = 0; k < g.kernel[d]; ++k) {
            const i64 at = start[d] + k * g.dilation[d];
            count += at >= -g.pad_begin[d] && at < g.in[d] + g.pad_end[d];
          }
          taps *= count;
        }
      }
      y[i] = taps ? (float)(sum / (double)taps) : 0.0f;
    }
  }
}
)";

// The kernels' module for an arch: compiled (or found in the cache) once per process.
struct ConvKernels {
  std::shared_ptr<jit::cuda::Module> module;
  CUfunction epilogue = nullptr, epilogue4 = nullptr, pad = nullptr, pool = nullptr;
};

ConvKernels conv_kernels(const jit::CodeCache& cache, const std::string& arch) {
  static std::mutex mu;
  static auto* loaded = new std::map<std::string, ConvKernels>;  // kept for the process
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = loaded->find(arch); it != loaded->end()) return it->second;
  ConvKernels k;
  k.module = std::make_shared<jit::cuda::Module>(compile_gpu_cubin(kKernelsSource, arch, "terrace_conv.cu", cache));
  k.epilogue = k.module->function("terrace_conv_epilogue");
  k.epilogue4 = k.module->function("terrace_conv_epilogue4");
  k.pad = k.module->function("terrace_conv_pad");
  k.pool = k.module->function("terrace_pool");
  return (*loaded)[arch] = k;
}

// A grid-stride launch of `f` over n elements.
void launch(CUfunction f, int64_t n, CUstream stream, void** args) {
  const int64_t blocks = std::clamp<int64_t>((n + 255) / 256, 1, int64_t(1) << 16);
  TERRACE_CU(cuLaunchKernel, f, unsigned(blocks), 1, 1, 256, 1, 1, 0, stream, args, nullptr);
}

// An initializer that no caller can replace (not also a graph input), or nullptr.
const Tensor* constant_of(const Graph& g, int v) {
  if (v < 0) return nullptr;
  auto init = g.initializers.find(v);
  if (init == g.initializers.end() || std::find(g.inputs.begin(), g.inputs.end(), v) != g.inputs.end()) return nullptr;
  return &init->second;
}

struct Activation {
  int kind = 0;  // as the kernels' act: 0 none, 1 Relu, 2 Clip
  float lo = 0, hi = 0;
};

// A Relu, or a Clip whose bounds are constant float32 scalars (opset 11+ inputs) or attributes
// (opset 6); nullopt for anything else.
std::optional<Activation> activation_of(const Graph& g, const Node& n) {
  if (n.op == Op::Relu) return Activation{1};
  if (n.op != Op::Clip) return std::nullopt;
  Activation a{2, n.attr_float("min", -std::numeric_limits<float>::max()),
               n.attr_float("max", std::numeric_limits<float>::max())};
  for (size_t i : {size_t(1), size_t(2)}) {
    if (n.inputs.size() <= i || n.inputs[i] < 0) continue;
    const Tensor* t = constant_of(g, n.inputs[i]);
    if (!t || t->dtype() != DType::Float32 || t->numel() != 1) return std::nullopt;
    (i == 1 ? a.lo : a.hi) = t->data<float>()[0];
  }
  return a;
}

std::string act_name(const Activation& a) {
  if (a.kind == 1) return "relu";
  if (a.kind == 2) return "clip(" + std::to_string(a.lo) + ", " + std::to_string(a.hi) + ")";
  return "";
}

// One Conv and what follows it in the region: [Add] [Relu|Clip].
struct ConvStage {
  std::string node;
  std::shared_ptr<jit::cuda::CudnnConv> conv;  // null where there is nothing to convolve
  int64_t y_numel = 0, channels = 0, spatial = 0;
  bool zero = false;  // an output but no products (no input channels or an empty input): y = 0
  bool bias = false, residual = false;
  Activation act;
  // The asymmetric part of the pads: x [planes, in] copied into [planes, out] at offset begin.
  bool pad = false;
  int64_t planes = 0, pad_in[3] = {1, 1, 1}, pad_out[3] = {1, 1, 1}, pad_begin[3] = {0, 0, 0};
  ConvKernels kernels;

  // args: x, w, bias (0 if none), z (0 if none), y.
  void run(const CUdeviceptr* a, CUstream s) const {
    if (y_numel == 0) return;  // an empty output: nothing to compute, no cuDNN call
    CUdeviceptr y = a[4];
    if (zero) {
      TERRACE_CU(cuMemsetD8Async, y, 0, size_t(y_numel) * sizeof(float), s);
    } else {
      CUdeviceptr x = a[0];
      std::optional<jit::cuda::DeviceBuffer> padded;
      if (pad) {
        int64_t n = planes * pad_out[0] * pad_out[1] * pad_out[2];
        padded.emplace(size_t(n) * sizeof(float), s);  // freed in order on the stream, after the convolution
        CUdeviceptr dst = padded->ptr();
        int64_t i0 = pad_in[0], i1 = pad_in[1], i2 = pad_in[2], o0 = pad_out[0], o1 = pad_out[1], o2 = pad_out[2];
        int64_t b0 = pad_begin[0], b1 = pad_begin[1], b2 = pad_begin[2];
        void* args[] = {&dst, &x, &n, &i0, &i1, &i2, &o0, &o1, &o2, &b0, &b1, &b2};
        launch(kernels.pad, n, s, args);
        x = dst;
      }
      conv->run(x, a[1], y, s);
    }
    if (!bias && !residual && act.kind == 0) return;
    CUdeviceptr b = bias ? a[2] : 0, z = residual ? a[3] : 0;
    int kind = act.kind;
    float lo = act.lo, hi = act.hi;
    int64_t channels_ = channels;
    if (spatial % 4 == 0 && y % 16 == 0 && z % 16 == 0) {
      int64_t n4 = y_numel / 4, spatial4 = spatial / 4;
      void* args[] = {&y, &b, &z, &n4, &spatial4, &channels_, &kind, &lo, &hi};
      launch(kernels.epilogue4, n4, s, args);
    } else {
      int64_t n = y_numel, sp = spatial;
      void* args[] = {&y, &b, &z, &n, &sp, &channels_, &kind, &lo, &hi};
      launch(kernels.epilogue, n, s, args);
    }
  }
};

bool is_float32(const kernels::TensorSig& s) { return s.dtype == DType::Float32; }

std::string shape_text(const Shape& s) { return shape_str(s); }

// The slot table under construction: region inputs, outputs, then intermediates.
struct Slots {
  GpuProgram& p;
  const Region& region;
  std::map<int, int> of;  // value id -> slot

  Slots(GpuProgram& program, const Region& r, const std::vector<Tensor>& inputs) : p(program), region(r) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      p.slots.push_back({inputs[i].dtype(), inputs[i].shape()});
      of[r.inputs[i]] = int(i);
    }
    p.slots.resize(inputs.size() + r.outputs.size());  // signatures set when computed
  }
  int at(const Node& node, int v) const {
    auto it = of.find(v);
    TERRACE_CHECK(it != of.end(), CompileFailed, node.describe(), ": reads a value its region has not computed");
    return it->second;
  }
  // The slot of value v, a result with signature sig: its region output's, or a new intermediate.
  int place(int v, const kernels::TensorSig& sig) {
    int slot = -1;
    for (size_t j = 0; j < region.outputs.size(); ++j)
      if (region.outputs[j] == v) slot = int(region.inputs.size() + j);
    if (slot < 0) {
      slot = int(p.slots.size());
      p.slots.push_back(sig);
    }
    p.slots[size_t(slot)] = sig;
    of[v] = slot;
    return slot;
  }
  bool is_output(int v) const {
    return std::find(region.outputs.begin(), region.outputs.end(), v) != region.outputs.end();
  }
};

// `kernels` null: the plan only (slots and steps, no cuDNN object, no library call).
void build_conv_chain(const Graph& g, const Region& region, Slots& slots, const ConvKernels* kernels,
                      const jit::CodeCache* tuning) {
  GpuProgram& p = slots.p;
  // The chain: each Conv opens a stage; each other node reads the node before it.
  std::vector<std::vector<const Node*>> stages;
  int previous = -1;
  for (int n : region.nodes) {
    const Node& node = g.nodes[size_t(n)];
    TERRACE_CHECK(node.outputs.size() == 1 && node.outputs[0] >= 0, CompileFailed, node.describe(),
                  ": tier 2's convolution regions hold single-output ops");
    if (node.op == Op::Conv) {
      stages.push_back({&node});
    } else {
      TERRACE_CHECK(!stages.empty(), CompileFailed, node.describe(), ": a convolution region starts with a Conv");
      const bool reads_previous = !node.inputs.empty() &&
                                  (node.inputs[0] == previous || (node.op == Op::Add && node.inputs.size() == 2 &&
                                                                  node.inputs[1] == previous));
      TERRACE_CHECK(reads_previous, CompileFailed, node.describe(), ": does not read the result of the op before it");
      stages.back().push_back(&node);
    }
    previous = node.outputs[0];
  }
  for (const std::vector<const Node*>& stage : stages) {
    const Node& conv = *stage[0];
    size_t i = 1;
    const Node* add = nullptr;
    std::optional<Activation> act;
    if (i < stage.size() && stage[i]->op == Op::Add) add = stage[i++];
    if (i < stage.size()) {
      act = activation_of(g, *stage[i]);
      TERRACE_CHECK(act.has_value(), CompileFailed, stage[i]->describe(),
                    ": tier 2 fuses after a Conv a residual Add, then a Relu or a Clip with constant bounds");
      ++i;
    }
    TERRACE_CHECK(i == stage.size(), CompileFailed, stage[i < stage.size() ? i : 0]->describe(),
                  ": tier 2 fuses after a Conv a residual Add, then one Relu or Clip");
    for (size_t k = 0; k + 1 < stage.size(); ++k)
      TERRACE_CHECK(!slots.is_output(stage[k]->outputs[0]), CompileFailed, stage[k]->describe(),
                    ": its result is read outside the region but fused into the convolution's epilogue");

    TERRACE_CHECK(conv.inputs.size() >= 2 && conv.inputs[0] >= 0 && conv.inputs[1] >= 0, CompileFailed,
                  conv.describe(), ": Conv without X or W");
    const int x = slots.at(conv, conv.inputs[0]), w = slots.at(conv, conv.inputs[1]);
    const int b = conv.inputs.size() > 2 && conv.inputs[2] >= 0 ? slots.at(conv, conv.inputs[2]) : -1;
    const kernels::TensorSig xs = p.slots[size_t(x)], ws = p.slots[size_t(w)];
    TERRACE_CHECK(is_float32(xs) && is_float32(ws) && (b < 0 || is_float32(p.slots[size_t(b)])), CompileFailed,
                  conv.describe(), ": tier 2 runs float32 convolutions only");
    TERRACE_CHECK(xs.shape.size() >= 3 && xs.shape.size() <= 5, CompileFailed, conv.describe(),
                  ": tier 2 runs convolutions of 1 to 3 spatial dims, not input ", shape_text(xs.shape));
    const ops::ConvGeometry geo = ops::conv_geometry(conv, xs.shape, ws.shape);
    const Shape y_shape = geo.out_shape();
    TERRACE_CHECK(b < 0 || shape_numel(p.slots[size_t(b)].shape) == geo.cout, CompileFailed, conv.describe(),
                  ": a bias of shape ", shape_text(p.slots[size_t(b)].shape), " for ", geo.cout, " output channels");

    ConvStage st;
    st.node = conv.describe();
    if (kernels) st.kernels = *kernels;
    st.y_numel = shape_numel(y_shape);
    st.channels = geo.cout;
    st.spatial = geo.out_size();
    st.bias = b >= 0;
    st.act = act.value_or(Activation{});
    int z = -1;
    if (add) {
      const int other = add->inputs[0] == conv.outputs[0] ? add->inputs[1] : add->inputs[0];
      z = slots.at(*add, other);
      TERRACE_CHECK(is_float32(p.slots[size_t(z)]) && p.slots[size_t(z)].shape == y_shape, CompileFailed,
                    add->describe(), ": tier 2 fuses a residual Add of the convolution's shape ", shape_text(y_shape),
                    ", not ", shape_text(p.slots[size_t(z)].shape));
      st.residual = true;
    }
    std::string what;
    const int64_t spatial_rank = int64_t(xs.shape.size()) - 2;
    if (st.y_numel > 0 && (shape_numel(xs.shape) == 0 || shape_numel(ws.shape) == 0)) {
      st.zero = true;  // every product is of padding or of no channel: 0
      what = "no products: zeros";
    } else if (st.y_numel > 0) {
      jit::cuda::ConvSpec spec;
      spec.x = xs.shape;
      spec.w = ws.shape;
      spec.group = geo.group;
      spec.strides = geo.strides;
      spec.dilations = geo.dilations;
      for (int64_t d = 0; d < spatial_rank; ++d) {
        const int64_t pb = geo.pads_begin[size_t(d)], pe = geo.pads_end[size_t(d)], common = std::min(pb, pe);
        spec.pads.push_back(common);
        if (pb != pe) st.pad = true;
        const size_t slot3 = size_t(3 - spatial_rank + d);
        st.pad_in[slot3] = xs.shape[size_t(2 + d)];
        st.pad_out[slot3] = xs.shape[size_t(2 + d)] + (pb - common) + (pe - common);
        st.pad_begin[slot3] = pb - common;
        spec.x[size_t(2 + d)] = st.pad_out[slot3];
      }
      st.planes = xs.shape[0] * xs.shape[1];
      if (!st.pad) std::fill(std::begin(st.pad_out), std::end(st.pad_out), 1);
      TERRACE_CHECK(spec.y() == y_shape, Internal, conv.describe(), ": cuDNN's geometry ", shape_text(spec.y()),
                    " differs from ONNX's ", shape_text(y_shape));
      what = "cuDNN " + spec.describe();
      if (kernels) {
        st.conv = std::make_shared<jit::cuda::CudnnConv>(spec, tuning);
        what += " (" + st.conv->algorithm() + ")";
      }
      if (st.pad) what = "pad (asymmetric pads), " + what;
    } else {
      what = "empty output: no call";
    }
    if (st.bias) what += " + bias";
    if (st.residual) what += " + residual";
    if (st.act.kind) what += ", " + act_name(st.act);
    const int y = slots.place(stage.back()->outputs[0], {DType::Float32, y_shape});

    GpuStep k;
    k.work.emplace().name = what;
    k.node = conv.describe();
    k.slots = {x, w, b, z, y};
    if (kernels) k.work->library = [st = std::move(st)](const CUdeviceptr* a, CUstream s) { st.run(a, s); };
    p.steps.push_back(std::move(k));
    p.ir += what + "  [" + region.ops() + "]\n";
  }
}

// One dim of a pool's output and pads, from auto_pad, pads and ceil_mode (nn_pool.cpp's resolve_dim).
void resolve_pool_dim(const Node& node, const std::string& auto_pad, bool ceil_mode, int64_t in, int64_t kernel,
                      int64_t stride, int64_t dilation, int64_t& pb, int64_t& pe, int64_t& out) {
  const int64_t extent = (kernel - 1) * dilation + 1;
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    out = (in + stride - 1) / stride;
    const int64_t total = std::max<int64_t>(0, (out - 1) * stride + extent - in);
    pb = auto_pad == "SAME_LOWER" ? (total + 1) / 2 : total / 2;
    pe = total - pb;
    return;
  }
  if (auto_pad == "VALID") pb = pe = 0;
  else TERRACE_CHECK(auto_pad == "NOTSET", CompileFailed, node.describe(), ": unknown auto_pad '", auto_pad, "'");
  const int64_t span = in + pb + pe - extent;
  TERRACE_CHECK(span >= 0, CompileFailed, node.describe(), ": the pooling window is larger than the padded input");
  out = (ceil_mode ? (span + stride - 1) / stride : span / stride) + 1;
  if (ceil_mode && (out - 1) * stride >= in + pb) --out;  // a last window starting in the end padding
}

// The pool's geometry for input shape xs: its parameter block and output shape.
PoolParams pool_params(const Node& node, const Shape& xs, Shape& y_shape) {
  TERRACE_CHECK(xs.size() >= 3 && xs.size() <= 5, CompileFailed, node.describe(),
                ": tier 2 pools 1 to 3 spatial dims, not input ", shape_text(xs));
  TERRACE_CHECK(node.has_attr("kernel_shape"), CompileFailed, node.describe(), ": no kernel_shape");
  const size_t n = xs.size() - 2;
  auto dims = [&](const char* name, size_t count, int64_t def, int64_t min) {
    std::vector<int64_t> v = node.attr_ints(name, std::vector<int64_t>(count, def));
    TERRACE_CHECK(v.size() == count, CompileFailed, node.describe(), ": '", name, "' has ", v.size(), " values");
    for (int64_t e : v) TERRACE_CHECK(e >= min, CompileFailed, node.describe(), ": '", name, "' value ", e);
    return v;
  };
  const std::vector<int64_t> kernel = dims("kernel_shape", n, 1, 1), strides = dims("strides", n, 1, 1),
                             dilations = dims("dilations", n, 1, 1), pads = dims("pads", 2 * n, 0, 0);
  const std::string auto_pad = node.attr_string("auto_pad", "NOTSET");
  const bool ceil_mode = node.attr_int("ceil_mode", 0) != 0;
  PoolParams pp{};
  for (int d = 0; d < 3; ++d) pp.in[d] = pp.out[d] = pp.kernel[d] = pp.stride[d] = pp.dilation[d] = 1;
  y_shape = {xs[0], xs[1]};
  for (size_t i = 0; i < n; ++i) {
    const size_t s = 3 - n + i;
    pp.in[s] = xs[2 + i];
    pp.kernel[s] = kernel[i];
    pp.stride[s] = strides[i];
    pp.dilation[s] = dilations[i];
    pp.pad_begin[s] = pads[i];
    pp.pad_end[s] = pads[i + n];
    resolve_pool_dim(node, auto_pad, ceil_mode, pp.in[s], pp.kernel[s], pp.stride[s], pp.dilation[s], pp.pad_begin[s],
                     pp.pad_end[s], pp.out[s]);
    y_shape.push_back(pp.out[s]);
  }
  pp.planes = xs[0] * xs[1];
  pp.mode = node.op == Op::MaxPool ? 0 : node.attr_int("count_include_pad", 0) != 0 ? 2 : 1;
  return pp;
}

void build_pool(const Graph& g, const Region& region, Slots& slots, const ConvKernels* kernels) {
  GpuProgram& p = slots.p;
  const Node& node = g.nodes[size_t(region.nodes[0])];
  TERRACE_CHECK(region.nodes.size() == 1, CompileFailed, node.describe(), ": tier 2 runs a pool alone, not ",
                region.ops());
  TERRACE_CHECK(!(node.outputs.size() > 1 && node.outputs[1] >= 0), CompileFailed, node.describe(),
                ": tier 2 runs MaxPool without its Indices output");
  TERRACE_CHECK(!node.inputs.empty() && node.inputs[0] >= 0, CompileFailed, node.describe(), ": no input");
  const int x = slots.at(node, node.inputs[0]);
  const Shape xs = p.slots[size_t(x)].shape;
  TERRACE_CHECK(is_float32(p.slots[size_t(x)]), CompileFailed, node.describe(), ": tier 2 pools float32 only");
  Shape y_shape;
  const PoolParams pp = pool_params(node, xs, y_shape);
  const int y = slots.place(node.outputs[0], {DType::Float32, y_shape});
  const int64_t outputs = shape_numel(y_shape);
  const std::string what = std::string(op_name(node.op)) + " " + shape_text(xs) + " -> " + shape_text(y_shape) +
                           (pp.mode == 0 ? "" : pp.mode == 2 ? " counting pads" : " over the taps inside");
  GpuStep k;
  k.work.emplace().name = what;
  k.node = node.describe();
  k.slots = {x, y};
  if (!kernels) {
    p.steps.push_back(std::move(k));
    p.ir += what + "\n";
    return;
  }
  CUfunction f = kernels->pool;
  std::shared_ptr<jit::cuda::Module> keep = kernels->module;
  k.work->library = [f, keep, pp, outputs](const CUdeviceptr* a, CUstream s) {
    if (outputs == 0) return;
    CUdeviceptr yp = a[1], xp = a[0];
    int64_t count = outputs;
    PoolParams params = pp;
    void* args[] = {&yp, &xp, &count, &params};
    launch(f, count, s, args);
  };
  p.steps.push_back(std::move(k));
  p.ir += what + "\n";
}

}  // namespace

bool is_gpu_conv_region(const Graph& g, const Region& region) {
  if (region.nodes.empty()) return false;
  const Op first = g.nodes[size_t(region.nodes[0])].op;
  return first == Op::Conv || first == Op::MaxPool || first == Op::AveragePool;
}

std::string gpu_conv_can_compile(const Graph& g, const Node& node) {
  if (node.op != Op::Conv && node.op != Op::MaxPool && node.op != Op::AveragePool)
    return std::string("tier 2's convolution regions do not run ") + op_name(node.op);
  if (node.op == Op::Conv) {
    std::string why;
    if (!jit::cuda::cudnn_available(&why)) return "tier 2 runs Conv through cuDNN: " + why;
  }
  if (node.op == Op::MaxPool && node.outputs.size() > 1 && node.outputs[1] >= 0)
    return "tier 2 runs MaxPool without its Indices output";
  for (int v : node.inputs) {
    if (v < 0) continue;
    const ValueInfo& info = g.values[size_t(v)].info;
    if (info.kind != ValueKind::Tensor || info.dtype != DType::Float32)
      return std::string("tier 2 runs ") + op_name(node.op) + " in float32 only; input '" + g.values[size_t(v)].name +
             "' is not";
    if (v == node.inputs[0] && info.shape && (info.shape->size() < 3 || info.shape->size() > 5))
      return std::string("tier 2 runs ") + op_name(node.op) + " with 1 to 3 spatial dims";
  }
  return "";
}

const std::string& gpu_conv_kernels_source() {
  static const std::string source = kKernelsSource;
  return source;
}

std::vector<int64_t> gpu_pool_params(const Node& node, const Shape& x, Shape* y) {
  Shape y_shape;
  const PoolParams pp = pool_params(node, x, y_shape);
  static_assert(sizeof(PoolParams) == 23 * sizeof(int64_t), "PoolParams: 23 int64s, as the kernel's");
  std::vector<int64_t> block(23);
  std::memcpy(block.data(), &pp, sizeof pp);
  if (y) *y = y_shape;
  return block;
}

std::vector<std::string> gpu_conv_kernel_names() {
  return {"terrace_conv_epilogue", "terrace_conv_epilogue4", "terrace_conv_pad", "terrace_pool"};
}

namespace {

// The program, with its library objects and kernels where `kernels` is given (null: the plan
// only, no NVRTC and no cuDNN); `tuning` keeps cuDNN's timed choices.
GpuProgram make_program(const Graph& g, const Region& region, const std::vector<Tensor>& inputs,
                        const ConvKernels* kernels, const jit::CodeCache* tuning = nullptr) {
  TERRACE_CHECK(is_gpu_conv_region(g, region), Internal, "tier 2: region ", region.id, " (", region.ops(),
                ") does not start with a Conv or a pool");
  TERRACE_CHECK(inputs.size() == region.inputs.size(), Internal, "region ", region.id, ": ", inputs.size(),
                " inputs for ", region.inputs.size());
  GpuProgram p;
  Slots slots(p, region, inputs);
  if (g.nodes[size_t(region.nodes[0])].op == Op::Conv) build_conv_chain(g, region, slots, kernels, tuning);
  else build_pool(g, region, slots, kernels);
  for (size_t j = 0; j < region.outputs.size(); ++j) {
    auto it = slots.of.find(region.outputs[j]);
    TERRACE_CHECK(it != slots.of.end() && it->second == int(region.inputs.size() + j), CompileFailed, "region ",
                  region.id, " (", region.ops(), "): output ", j, " is not the result of a fused stage");
  }
  p.alias.assign(p.slots.size(), -1);
  p.source = "// library calls and the fixed kernels of tiers/gpu/gpu_conv.cpp:\n";
  for (const GpuStep& k : p.steps) p.source += "// " + k.work->name + "\n";
  p.source += gpu_conv_kernels_source();
  return p;
}

}  // namespace

GpuProgram plan_gpu_conv_program(const Graph& g, const Region& region, const std::vector<Tensor>& inputs) {
  return make_program(g, region, inputs, nullptr);
}

GpuProgram build_gpu_conv_program(const Graph& g, const Region& region, const std::vector<Tensor>& inputs,
                                  const jit::CodeCache& cache, const std::string& arch) {
  for (int n : region.nodes) {
    const Node& node = g.nodes[size_t(n)];
    if (node.op == Op::Conv || node.op == Op::MaxPool || node.op == Op::AveragePool)
      if (std::string why = gpu_conv_can_compile(g, node); !why.empty())
        fail(ErrorCode::CompileFailed, node.describe(), ": ", why);
  }
  make_program(g, region, inputs, nullptr);  // what it refuses, before any NVRTC or cuDNN work
  const ConvKernels kernels = conv_kernels(cache, arch);
  return make_program(g, region, inputs, &kernels, &cache);
}

}  // namespace terrace
#endif  // TERRACE_HAVE_CUDA
