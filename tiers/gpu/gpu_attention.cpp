// Tier 2's attention regions (tiers/gpu/gpu_attention.h).
#include "tiers/gpu/gpu_attention.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "interp/error.h"

#ifdef TERRACE_HAVE_CUDA
#include <map>
#include <mutex>

#include "jit/cuda/cuda_driver.h"
#include "tiers/gpu/gpu_backend.h"
#endif

namespace terrace {
namespace {

// A warp per query row, 8 rows a block; K and V tiles of 32 keys in shared memory (K padded by one
// column so that lane j's reads of key j do not collide; V rows past the keys zeroed, so that a
// full tile's unrolled loop adds 0 for them); the running max m and sum l of each row rescale its
// output as later tiles raise the max. Head sizes are compile-time (TR_HEAD, TR_VHEAD, defined
// before this source per program) so that the loops unroll. Scores are q . k in float (four
// partial sums), times the scale, plus the mask; a masked key's probability is 0, and a row whose
// keys are all masked divides 0 by 0.
const char* const kSource = R"(// Terrace tier 2: fused attention (tiers/gpu/gpu_attention.cpp).
typedef long long i64;
struct AttentionParams {
  i64 batch, heads, kv_heads, rows, keys, head, value_head;
  i64 q[4], k[4], v[4], m[4], y[4];  // element strides over [batch, head, row or key, feature]
  i64 mask_kind;                     // 0 none, 1 additive float, 2 boolean (nonzero: attend)
  i64 causal;
  float scale;
};
#define TR_TILE 32
#define TR_WARPS 8
#define TR_SLOTS ((TR_VHEAD + 31) / 32)
#define TR_NEG_INF __int_as_float(0xff800000)

__device__ __forceinline__ float tr_warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float tr_warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

extern "C" __global__ void __launch_bounds__(TR_WARPS * 32)
terrace_attention(float* y, const float* q, const float* k, const float* v, const void* mask, AttentionParams p) {
  __shared__ float ks[TR_TILE][TR_HEAD + 1];
  __shared__ float vs[TR_TILE][TR_VHEAD];
  __shared__ float qs[TR_WARPS][TR_HEAD];
  __shared__ float ps[TR_WARPS][TR_TILE];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const i64 b = blockIdx.z, h = blockIdx.y, kh = h % p.kv_heads;
  const i64 i = (i64)blockIdx.x * TR_WARPS + warp;
  const bool live = i < p.rows;
  for (int e = lane; e < TR_HEAD; e += 32)
    qs[warp][e] = live ? q[b * p.q[0] + h * p.q[1] + i * p.q[2] + e * p.q[3]] : 0.0f;
  float o[TR_SLOTS];
#pragma unroll
  for (int t = 0; t < TR_SLOTS; ++t) o[t] = 0.0f;
  float m = TR_NEG_INF, l = 0.0f;
  const float* kb = k + b * p.k[0] + kh * p.k[1];
  const float* vb = v + b * p.v[0] + kh * p.v[1];
  for (i64 j0 = 0; j0 < p.keys; j0 += TR_TILE) {
    const int n = (int)min((i64)TR_TILE, p.keys - j0);
    __syncthreads();  // every warp is done with the previous tile
    for (int t = threadIdx.x; t < TR_TILE * TR_HEAD; t += TR_WARPS * 32) {
      const int jj = t / TR_HEAD, e = t % TR_HEAD;
      if (jj < n) ks[jj][e] = kb[(j0 + jj) * p.k[2] + e * p.k[3]];
    }
    for (int t = threadIdx.x; t < TR_TILE * TR_VHEAD; t += TR_WARPS * 32) {
      const int jj = t / TR_VHEAD, e = t % TR_VHEAD;
      vs[jj][e] = jj < n ? vb[(j0 + jj) * p.v[2] + e * p.v[3]] : 0.0f;
    }
    __syncthreads();
    float s = TR_NEG_INF;
    const i64 j = j0 + lane;
    if (live && lane < n) {
      float d0 = 0.0f, d1 = 0.0f, d2 = 0.0f, d3 = 0.0f;
#pragma unroll
      for (int e = 0; e + 3 < TR_HEAD; e += 4) {
        d0 = fmaf(qs[warp][e], ks[lane][e], d0);
        d1 = fmaf(qs[warp][e + 1], ks[lane][e + 1], d1);
        d2 = fmaf(qs[warp][e + 2], ks[lane][e + 2], d2);
        d3 = fmaf(qs[warp][e + 3], ks[lane][e + 3], d3);
      }
#pragma unroll
      for (int e = TR_HEAD & ~3; e < TR_HEAD; ++e) d0 = fmaf(qs[warp][e], ks[lane][e], d0);
      s = ((d0 + d1) + (d2 + d3)) * p.scale;
      const i64 at = b * p.m[0] + h * p.m[1] + i * p.m[2] + j * p.m[3];
      if (p.causal && j > i) s = TR_NEG_INF;
      else if (p.mask_kind == 1) s += ((const float*)mask)[at];
      else if (p.mask_kind == 2 && !((const unsigned char*)mask)[at]) s = TR_NEG_INF;
    }
    const float top = fmaxf(m, tr_warp_max(s));
    const float pj = top == TR_NEG_INF ? 0.0f : expf(s - top);
    const float keep = m == TR_NEG_INF ? 0.0f : expf(m - top);  // o and l are 0 while m is -inf
    l = l * keep + tr_warp_sum(pj);
    m = top;
    ps[warp][lane] = pj;
    __syncwarp();
#pragma unroll
    for (int t = 0; t < TR_SLOTS; ++t) o[t] *= keep;
#pragma unroll 8
    for (int jj = 0; jj < TR_TILE; ++jj) {
      const float w = ps[warp][jj];
#pragma unroll
      for (int t = 0; t < TR_SLOTS; ++t) {
        const int d = lane + 32 * t;
        if (TR_VHEAD % 32 == 0 || d < TR_VHEAD) o[t] = fmaf(w, vs[jj][d], o[t]);
      }
    }
    __syncwarp();
  }
  if (!live) return;
#pragma unroll
  for (int t = 0; t < TR_SLOTS; ++t) {
    const int d = lane + 32 * t;
    if (d < TR_VHEAD) y[b * p.y[0] + h * p.y[1] + i * p.y[2] + d * p.y[3]] = l > 0.0f ? o[t] / l : __int_as_float(0x7fc00000);
  }
}
)";

const Shape* shape_of(const Graph& g, int v) {
  const ValueInfo& info = g.values[size_t(v)].info;
  return info.shape ? &*info.shape : nullptr;
}

}  // namespace

std::string gpu_attention_kernel_source(int64_t head, int64_t value_head) {
  return "#define TR_HEAD " + std::to_string(head) + "\n#define TR_VHEAD " + std::to_string(value_head) + "\n" + kSource;
}

std::string gpu_attention_can_compile(const Graph& g, const Node& node) {
  if (node.op != Op::Attention) return std::string("tier 2's attention regions do not run ") + op_name(node.op);
  if (node.inputs.size() < 3 || node.inputs.size() > 4)
    return "tier 2 runs Attention with Q, K, V and an optional mask (no past key or value)";
  for (size_t j = 1; j < node.outputs.size(); ++j)
    if (node.outputs[j] >= 0) return "tier 2 runs Attention without its present key, value or QK outputs";
  if (node.attr_float("softcap", 0.0f) != 0.0f) return "tier 2 runs Attention without softcap";
  if (node.attr_int("is_causal", 0) != 0 && node.inputs.size() == 4 && node.inputs[3] >= 0)
    return "is_causal and attn_mask exclude each other";
  for (size_t i = 0; i < 3; ++i) {
    const int v = node.inputs[i];
    const Shape* s = v < 0 ? nullptr : shape_of(g, v);
    if (v < 0 || g.values[size_t(v)].info.dtype != DType::Float32 || !s || s->size() != 4)
      return "tier 2 runs Attention on 4-D float32 Q, K and V of known rank";
    if ((*s)[3] > kGpuAttentionMaxHead)
      return "tier 2 runs Attention with head sizes up to " + std::to_string(kGpuAttentionMaxHead);
  }
  if (node.inputs.size() == 4 && node.inputs[3] >= 0) {
    const int v = node.inputs[3];
    const std::optional<DType> t = g.values[size_t(v)].info.dtype;
    const Shape* s = shape_of(g, v);
    if (!t || (*t != DType::Float32 && *t != DType::Bool) || !s || s->size() > 4)
      return "tier 2 runs Attention with a float32 or boolean mask of rank up to 4";
  }
  return "";
}

bool is_gpu_attention_region(const Graph& g, const Region& region) {
  return region.nodes.size() == 1 && g.nodes[size_t(region.nodes[0])].op == Op::Attention;
}

#ifdef TERRACE_HAVE_CUDA
namespace {

struct AttentionParams {  // as the kernel's
  int64_t batch, heads, kv_heads, rows, keys, head, value_head;
  int64_t q[4], k[4], v[4], m[4], y[4];
  int64_t mask_kind, causal;
  float scale;
};

void strides_of(const Shape& s, int64_t out[4]) {
  int64_t step = 1;
  for (int d = 3; d >= 0; --d) {
    out[d] = s[size_t(d)] == 1 ? 0 : step;
    step *= s[size_t(d)];
  }
}

// The mask's strides over the scores [B, H, L, S]: right-aligned, 0 where it broadcasts.
void mask_strides(const Shape& mask, int64_t out[4]) {
  std::fill(out, out + 4, 0);
  int64_t step = 1;
  for (size_t j = mask.size(); j-- > 0;) {
    const size_t d = 4 - mask.size() + j;
    out[d] = mask[j] == 1 ? 0 : step;
    step *= mask[j];
  }
}

// The kernel for these head sizes on `arch`: compiled (or found in the cache) once per process.
CUfunction attention_function(const jit::CodeCache& cache, const std::string& arch, int64_t head, int64_t value_head,
                              std::shared_ptr<jit::cuda::Module>& keep) {
  static std::mutex mu;
  static auto* loaded = new std::map<std::string, std::shared_ptr<jit::cuda::Module>>;  // kept for the process
  std::lock_guard<std::mutex> lock(mu);
  std::shared_ptr<jit::cuda::Module>& m =
      (*loaded)[arch + " " + std::to_string(head) + " " + std::to_string(value_head)];
  if (!m)
    m = std::make_shared<jit::cuda::Module>(
        compile_gpu_cubin(gpu_attention_kernel_source(head, value_head), arch, "terrace_attention.cu", cache));
  keep = m;
  return m->function(kGpuAttentionKernel);
}

}  // namespace

GpuProgram build_gpu_attention_program(const Graph& g, const Region& region, const std::vector<Tensor>& inputs,
                                       const jit::CodeCache* cache, const std::string& arch) {
  TERRACE_CHECK(is_gpu_attention_region(g, region), Internal, "tier 2: region ", region.id, " (", region.ops(),
                ") is not one Attention");
  const Node& node = g.nodes[size_t(region.nodes[0])];
  if (std::string why = gpu_attention_can_compile(g, node); !why.empty())
    fail(ErrorCode::CompileFailed, node.describe(), ": ", why);
  auto slot_of = [&](int v) {
    auto it = std::find(region.inputs.begin(), region.inputs.end(), v);
    TERRACE_CHECK(it != region.inputs.end(), Internal, node.describe(), ": reads a value its region does not take");
    return int(it - region.inputs.begin());
  };
  const int qs = slot_of(node.inputs[0]), ks = slot_of(node.inputs[1]), vs = slot_of(node.inputs[2]);
  const bool has_mask = node.inputs.size() == 4 && node.inputs[3] >= 0;
  const int ms = has_mask ? slot_of(node.inputs[3]) : -1;
  const Shape &q = inputs[size_t(qs)].shape(), &k = inputs[size_t(ks)].shape(), &v = inputs[size_t(vs)].shape();
  TERRACE_CHECK(k[0] == q[0] && v[0] == q[0] && k[3] == q[3] && v[2] == k[2] && v[1] == k[1] && k[1] > 0 &&
                    q[1] % k[1] == 0,
                CompileFailed, node.describe(), ": Q ", shape_str(q), ", K ", shape_str(k), " and V ", shape_str(v),
                " disagree in batch, heads, keys or head size");
  TERRACE_CHECK(q[0] <= 65535 && q[1] <= 65535, CompileFailed, node.describe(), ": tier 2's attention grid takes up to ",
                "65535 batches and heads, not ", shape_str(q));
  AttentionParams p{};
  p.batch = q[0], p.heads = q[1], p.kv_heads = k[1], p.rows = q[2], p.keys = k[2], p.head = q[3], p.value_head = v[3];
  strides_of(q, p.q);
  strides_of(k, p.k);
  strides_of(v, p.v);
  const Shape y = {q[0], q[1], q[2], v[3]};
  strides_of(y, p.y);
  p.causal = node.attr_int("is_causal", 0) != 0;
  p.scale = node.has_attr("scale") ? node.attr_float("scale", 1.0f) : float(1.0 / std::sqrt(double(q[3])));
  if (has_mask) {
    const Tensor& mask = inputs[size_t(ms)];
    TERRACE_CHECK(mask.rank() <= 4, CompileFailed, node.describe(), ": a mask of rank ", mask.rank());
    const Shape scores = {q[0], q[1], q[2], k[2]};
    for (size_t j = 0; j < mask.rank(); ++j) {
      const int64_t want = scores[4 - mask.rank() + j];
      TERRACE_CHECK(mask.shape()[j] == 1 || mask.shape()[j] == want, CompileFailed, node.describe(), ": mask ",
                    shape_str(mask.shape()), " does not broadcast to the scores ", shape_str(scores));
    }
    mask_strides(mask.shape(), p.m);
    p.mask_kind = mask.dtype() == DType::Bool ? 2 : 1;
  }
  GpuProgram prog;
  for (const Tensor& t : inputs) prog.slots.push_back({t.dtype(), t.shape()});
  prog.slots.push_back({DType::Float32, y});
  prog.alias.assign(prog.slots.size(), -1);
  const std::string what = "attention Q " + shape_str(q) + ", K " + shape_str(k) + ", V " + shape_str(v) +
                           (has_mask ? std::string(", ") + (p.mask_kind == 2 ? "boolean" : "additive") + " mask" : "") +
                           (p.causal ? ", causal" : "") + ", scale " + std::to_string(p.scale);
  GpuStep step;
  step.work.emplace().name = what;
  step.node = node.describe();
  step.slots = {qs, ks, vs, ms, int(inputs.size())};
  if (cache) {
    std::shared_ptr<jit::cuda::Module> keep;
    CUfunction f = attention_function(*cache, arch, p.head, p.value_head, keep);
    const unsigned grid_x = unsigned((p.rows + 7) / 8);
    step.work->library = [f, keep, p, grid_x](const CUdeviceptr* a, CUstream s) {
      if (p.batch == 0 || p.heads == 0 || p.rows == 0 || p.value_head == 0) return;
      CUdeviceptr yp = a[4], qp = a[0], kp = a[1], vp = a[2], mp = a[3];
      if (p.keys == 0) {  // a sum over no keys: the interpreter's 0
        TERRACE_CU(cuMemsetD8Async, yp, 0, size_t(p.batch * p.heads * p.rows * p.value_head) * sizeof(float), s);
        return;
      }
      AttentionParams params = p;
      void* args[] = {&yp, &qp, &kp, &vp, &mp, &params};
      TERRACE_CU(cuLaunchKernel, f, std::max(1u, grid_x), unsigned(p.heads), unsigned(p.batch), 256, 1, 1, 0, s, args,
                 nullptr);
    };
  }
  prog.steps.push_back(std::move(step));
  prog.source = gpu_attention_kernel_source(p.head, p.value_head);  // as compiled: terrace compile fills the cache
  prog.ir = what + "\n";
  return prog;
}
#endif

}  // namespace terrace
