// Pooling reference kernels: MaxPool (with Indices), AveragePool, LpPool, the Global pools,
// MaxUnpool.
#include <array>
#include <cmath>
#include <limits>
#include <span>
#include <utility>

#include "interp/ops/nn.h"

namespace terrace::ops {
namespace {

constexpr int kMaxSpatial = 3;
using Dims3 = std::array<int64_t, kMaxSpatial>;

// A windowed pool's layout. The spatial dims are right-aligned into 3 slots (leading slots have
// size 1, kernel 1, stride 1 and no pads) so that one triple loop serves 1D, 2D and 3D.
struct PoolGeometry {
  int64_t planes = 0;  // N * C
  int spatial = 0;     // number of real spatial dims
  bool global = false;  // one window over all spatial dims, folded into the last slot
  Dims3 in{1, 1, 1}, out{1, 1, 1}, kernel{1, 1, 1}, stride{1, 1, 1}, dilation{1, 1, 1};
  Dims3 pad_begin{0, 0, 0}, pad_end{0, 0, 0};

  int64_t in_size() const { return in[0] * in[1] * in[2]; }
  int64_t out_size() const { return out[0] * out[1] * out[2]; }
  Shape out_shape(const Shape& x) const {
    Shape s{x[0], x[1]};
    if (global) s.resize(x.size(), 1);
    for (int i = kMaxSpatial - spatial; !global && i < kMaxSpatial; ++i)
      s.push_back(out[size_t(i)]);
    return s;
  }
};

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A per-spatial-dim attribute: `count` values, each >= min_value; `def` fills an absent one.
std::vector<int64_t> dims_attr(const Node& node, const char* name, size_t count, int64_t def,
                               int64_t min_value) {
  std::vector<int64_t> v = node.attr_ints(name, std::vector<int64_t>(count, def));
  TERRACE_CHECK(v.size() == count, InvalidModel, node.describe(), ": attribute '", name, "' has ",
                v.size(), " values, expected ", count);
  for (int64_t e : v)
    TERRACE_CHECK(e >= min_value, InvalidModel, node.describe(), ": attribute '", name,
                  "' values must be >= ", min_value, ", got ", e);
  return v;
}

// The number of spatial dims of a pooled input, checked against what the kernels support.
int spatial_rank(const Node& node, const Tensor& x) {
  check_min_rank(node, x, 3, "input X");
  int spatial = int(x.rank()) - 2;
  TERRACE_CHECK(spatial <= kMaxSpatial, NotImplemented, node.describe(), ": ", spatial,
                " spatial dims (at most ", kMaxSpatial, " are supported)");
  return spatial;
}

// Output size and pads of one spatial dim, from auto_pad / pads / ceil_mode (ONNX pooling rules).
void resolve_dim(const Node& node, const std::string& auto_pad, bool ceil_mode, int64_t in,
                 int64_t kernel, int64_t stride, int64_t dilation, int64_t& pb, int64_t& pe,
                 int64_t& out) {
  int64_t extent = (kernel - 1) * dilation + 1;
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    out = ceil_div(in, stride);
    int64_t total = std::max<int64_t>(0, (out - 1) * stride + extent - in);
    pb = auto_pad == "SAME_LOWER" ? (total + 1) / 2 : total / 2;
    pe = total - pb;
    return;
  }
  if (auto_pad == "VALID")
    pb = pe = 0;
  else
    TERRACE_CHECK(auto_pad == "NOTSET", InvalidModel, node.describe(), ": unknown auto_pad '",
                  auto_pad, "'");
  int64_t span = in + pb + pe - extent;
  TERRACE_CHECK(span >= 0, InvalidArgument, node.describe(), ": the pooling window (extent ",
                extent, ") is larger than the padded input (", in + pb + pe, ")");
  out = (ceil_mode ? ceil_div(span, stride) : span / stride) + 1;
  // A last window starting in the end padding would see no input; ceil mode drops it.
  if (ceil_mode && (out - 1) * stride >= in + pb) --out;
}

// Global pools of any rank: X seen as [N, C, S] with S the product of the spatial dims.
PoolGeometry global_geometry(const Node& node, const Tensor& x) {
  check_min_rank(node, x, 3, "input X");
  PoolGeometry g;
  g.global = true;
  g.spatial = int(x.rank()) - 2;
  g.planes = x.dim(0) * x.dim(1);
  g.in[2] = g.kernel[2] = shape_numel(std::span<const int64_t>(x.shape()).subspan(2));
  return g;
}

PoolGeometry pool_geometry(const Node& node, const Tensor& x, bool global = false) {
  if (global) return global_geometry(node, x);
  PoolGeometry g;
  g.spatial = spatial_rank(node, x);
  size_t n = size_t(g.spatial);
  g.planes = x.dim(0) * x.dim(1);
  TERRACE_CHECK(node.has_attr("kernel_shape"), InvalidModel, node.describe(),
                ": attribute 'kernel_shape' is required");
  std::vector<int64_t> kernel = dims_attr(node, "kernel_shape", n, 1, 1);
  std::vector<int64_t> strides = dims_attr(node, "strides", n, 1, 1);
  std::vector<int64_t> dilations = dims_attr(node, "dilations", n, 1, 1);
  std::vector<int64_t> pads = dims_attr(node, "pads", 2 * n, 0, 0);
  std::string auto_pad = node.attr_string("auto_pad", "NOTSET");
  bool ceil_mode = node.attr_int("ceil_mode", 0) != 0;
  for (size_t i = 0; i < n; ++i) {
    size_t s = size_t(kMaxSpatial) - n + i;
    g.in[s] = x.dim(int64_t(i) + 2);
    g.kernel[s] = kernel[i];
    g.stride[s] = strides[i];
    g.dilation[s] = dilations[i];
    g.pad_begin[s] = pads[i];
    g.pad_end[s] = pads[i + n];
    resolve_dim(node, auto_pad, ceil_mode, g.in[s], g.kernel[s], g.stride[s], g.dilation[s],
                g.pad_begin[s], g.pad_end[s], g.out[s]);
  }
  return g;
}

// Input coordinate of tap k of output position o along slot d (may fall in the padding).
inline int64_t tap_coord(const PoolGeometry& g, int d, int64_t o, int64_t k) {
  return o * g.stride[size_t(d)] - g.pad_begin[size_t(d)] + k * g.dilation[size_t(d)];
}

// The taps [lo, hi) of slot d's window at output o whose coordinates lie inside the input.
inline std::pair<int64_t, int64_t> inside_taps(const PoolGeometry& g, int d, int64_t o) {
  size_t u = size_t(d);
  int64_t start = tap_coord(g, d, o, 0), dil = g.dilation[u];
  int64_t lo = start >= 0 ? 0 : ceil_div(-start, dil);
  int64_t hi = start >= g.in[u] ? 0 : std::min(g.kernel[u], ceil_div(g.in[u] - start, dil));
  return {lo, std::max(lo, hi)};
}

// Calls f(i0, i1, i2) for each tap of the window at output (o0, o1, o2) that lies inside the input.
template <typename F>
inline void for_each_tap(const PoolGeometry& g, int64_t o0, int64_t o1, int64_t o2, F&& f) {
  auto [lo0, hi0] = inside_taps(g, 0, o0);
  auto [lo1, hi1] = inside_taps(g, 1, o1);
  auto [lo2, hi2] = inside_taps(g, 2, o2);
  for (int64_t k0 = lo0; k0 < hi0; ++k0)
    for (int64_t k1 = lo1; k1 < hi1; ++k1)
      for (int64_t k2 = lo2; k2 < hi2; ++k2)
        f(tap_coord(g, 0, o0, k0), tap_coord(g, 1, o1, k1), tap_coord(g, 2, o2, k2));
}

// The number of taps of a window that lie inside the padded input (count_include_pad divisor).
int64_t padded_taps(const PoolGeometry& g, const Dims3& o) {
  int64_t n = 1;
  for (int d = 0; d < kMaxSpatial; ++d) {
    int64_t c = 0;
    for (int64_t k = 0; k < g.kernel[size_t(d)]; ++k) {
      int64_t i = tap_coord(g, d, o[size_t(d)], k);
      c += i >= -g.pad_begin[size_t(d)] && i < g.in[size_t(d)] + g.pad_end[size_t(d)];
    }
    n *= c;
  }
  return n;
}

// Calls f(plane, flat output index, o0, o1, o2) for every output, in parallel over planes.
template <typename F>
void for_each_output(const PoolGeometry& g, F&& f) {
  parallel_for(g.planes, [&](int64_t p) {
    int64_t o = p * g.out_size();
    for (int64_t o0 = 0; o0 < g.out[0]; ++o0)
      for (int64_t o1 = 0; o1 < g.out[1]; ++o1)
        for (int64_t o2 = 0; o2 < g.out[2]; ++o2) f(p, o++, o0, o1, o2);
  });
}

template <typename T>
T lowest_value() {
  if constexpr (std::is_integral_v<T>)
    return std::numeric_limits<T>::lowest();
  else
    return T(-std::numeric_limits<float>::infinity());
}

// MaxPool's max, as ONNX's reference (which drops a window's NaN before np.max) and ONNX Runtime
// (whose scan compares with >): NaN taps are passed over, a window of NaN only gives NaN.
// GlobalMaxPool's (the reference's np.max over the plane) propagates NaN. The first maximum is
// kept on ties.
template <typename T>
inline bool takes_max(T v, T best, bool skip_nan) {
  if constexpr (std::is_integral_v<T>)
    return v > best;
  else
    return v > best || (skip_nan ? best != best && v == v : v != v && best == best);
}

template <typename T>
void max_pool(const PoolGeometry& g, const T* x, T* y, int64_t* indices, bool column_major, bool skip_nan = true) {
  // Indices are flat over the whole input; storage_order 1 numbers the spatial dims column-major.
  Dims3 row{g.in[1] * g.in[2], g.in[2], 1}, col{1, g.in[0], g.in[0] * g.in[1]};
  const Dims3& istride = column_major ? col : row;
  for_each_output(g, [&](int64_t p, int64_t o, int64_t o0, int64_t o1, int64_t o2) {
    const T* xp = x + p * g.in_size();
    T best = lowest_value<T>();
    int64_t arg = 0;
    bool found = false;
    for_each_tap(g, o0, o1, o2, [&](int64_t i0, int64_t i1, int64_t i2) {
      T v = xp[i0 * row[0] + i1 * row[1] + i2];
      if (!found || takes_max(v, best, skip_nan)) {
        best = v;
        arg = i0 * istride[0] + i1 * istride[1] + i2 * istride[2];
        found = true;
      }
    });
    y[o] = best;
    if (indices) indices[o] = p * g.in_size() + arg;
  });
}

void max_pool_kernel(KernelContext& ctx) {
  const Node& node = ctx.node;
  const Tensor& x = ctx.input(0);
  PoolGeometry g = pool_geometry(node, x);
  int64_t order = node.attr_int("storage_order", 0);
  TERRACE_CHECK(order == 0 || order == 1, InvalidModel, node.describe(),
                ": storage_order must be 0 or 1, got ", order);
  Tensor y = Tensor::empty(x.dtype(), g.out_shape(x.shape()));
  Tensor idx;
  if (ctx.wants_output(1)) idx = Tensor::empty(DType::Int64, y.shape());
  int64_t* ip = idx.defined() ? idx.data<int64_t>() : nullptr;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    max_pool<T>(g, x.data<T>(), y.data<T>(), ip, order == 1);
  };
  if (x.dtype() == DType::Int8)
    run(int8_t{});
  else if (x.dtype() == DType::UInt8)
    run(uint8_t{});
  else
    dispatch_float(node, x.dtype(), "input X", run);
  ctx.set_output(0, std::move(y));
  if (idx.defined()) ctx.set_output(1, std::move(idx));
}

// AveragePool and LpPool: a double sum of f(x) over the window, then finish(sum, taps).
template <typename T, typename Term, typename Finish>
void sum_pool(const PoolGeometry& g, const T* x, T* y, bool count_include_pad, Term term,
              Finish finish) {
  for_each_output(g, [&](int64_t p, int64_t o, int64_t o0, int64_t o1, int64_t o2) {
    const T* xp = x + p * g.in_size();
    double sum = 0;
    int64_t taps = 0;
    for_each_tap(g, o0, o1, o2, [&](int64_t i0, int64_t i1, int64_t i2) {
      sum += term(double(xp[(i0 * g.in[1] + i1) * g.in[2] + i2]));
      ++taps;
    });
    if (count_include_pad) taps = padded_taps(g, {o0, o1, o2});
    y[o] = T(finish(sum, taps));
  });
}

// Runs sum_pool with the given term/finish on input 0 and sets output 0.
template <typename Term, typename Finish>
void run_sum_pool(KernelContext& ctx, const PoolGeometry& g, bool count_include_pad, Term term,
                  Finish finish) {
  const Tensor& x = ctx.input(0);
  Tensor y = Tensor::empty(x.dtype(), g.out_shape(x.shape()));
  dispatch_float(ctx.node, x.dtype(), "input X", [&](auto tag) {
    using T = decltype(tag);
    sum_pool<T>(g, x.data<T>(), y.data<T>(), count_include_pad, term, finish);
  });
  ctx.set_output(0, std::move(y));
}

double identity_term(double v) { return v; }
double mean_finish(double sum, int64_t taps) { return taps ? sum / double(taps) : 0.0; }

void average_pool_kernel(KernelContext& ctx, bool global) {
  PoolGeometry g = pool_geometry(ctx.node, ctx.input(0), global);
  bool include_pad = !global && ctx.node.attr_int("count_include_pad", 0) != 0;
  run_sum_pool(ctx, g, include_pad, identity_term, mean_finish);
}

void lp_pool_kernel(KernelContext& ctx, bool global) {
  PoolGeometry g = pool_geometry(ctx.node, ctx.input(0), global);
  double p = double(ctx.node.attr_int("p", 2));
  TERRACE_CHECK(p > 0, InvalidModel, ctx.node.describe(), ": attribute 'p' must be > 0, got ", p);
  run_sum_pool(
      ctx, g, false, [p](double v) { return std::pow(std::fabs(v), p); },
      [p](double sum, int64_t) { return std::pow(sum, 1.0 / p); });
}

void global_max_pool_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  PoolGeometry g = pool_geometry(ctx.node, x, true);
  Tensor y = Tensor::empty(x.dtype(), g.out_shape(x.shape()));
  dispatch_float(ctx.node, x.dtype(), "input X", [&](auto tag) {
    using T = decltype(tag);
    max_pool<T>(g, x.data<T>(), y.data<T>(), nullptr, false, /*skip_nan=*/false);
  });
  ctx.set_output(0, std::move(y));
}

// MaxUnpool: scatters X into zeros at the positions Indices names (MaxPool's second output). The
// indices are flat over the default output shape; a larger output_shape adds zeros at the end of
// each spatial dim (as the ONNX node tests expect) without moving the scattered values.
void max_unpool_kernel(KernelContext& ctx) {
  const Node& node = ctx.node;
  const Tensor& x = ctx.input(0);
  const Tensor& indices = ctx.input(1);
  size_t n = size_t(spatial_rank(node, x));
  check_shape(node, indices, x.shape(), "input I");
  TERRACE_CHECK(indices.dtype() == DType::Int64, InvalidArgument, node.describe(),
                ": input I must be int64, got ", dtype_name(indices.dtype()));
  TERRACE_CHECK(node.has_attr("kernel_shape"), InvalidModel, node.describe(),
                ": attribute 'kernel_shape' is required");
  std::vector<int64_t> kernel = dims_attr(node, "kernel_shape", n, 1, 1);
  std::vector<int64_t> strides = dims_attr(node, "strides", n, 1, 1);
  std::vector<int64_t> pads = dims_attr(node, "pads", 2 * n, 0, 0);
  Shape inferred = {x.dim(0), x.dim(1)};
  for (size_t i = 0; i < n; ++i)
    inferred.push_back((x.dim(int64_t(i) + 2) - 1) * strides[i] + kernel[i] - pads[i] -
                       pads[i + n]);
  Shape out_shape = inferred;
  if (ctx.has_input(2)) {
    out_shape = ctx.input(2).to_int64_vector();
    bool fits = out_shape.size() == inferred.size();
    for (size_t d = 0; fits && d < out_shape.size(); ++d)
      fits = d < 2 ? out_shape[d] == inferred[d] : out_shape[d] >= inferred[d];
    TERRACE_CHECK(fits, InvalidArgument, node.describe(), ": output_shape ", shape_str(out_shape),
                  " cannot hold the unpooled shape ", shape_str(inferred));
  }
  const int64_t* ip = indices.data<int64_t>();
  int64_t total = shape_numel(inferred);
  for (int64_t i = 0; i < x.numel(); ++i)
    TERRACE_CHECK(ip[i] >= 0 && ip[i] < total, InvalidArgument, node.describe(), ": index ", ip[i],
                  " is outside the unpooled shape ", shape_str(inferred));
  // Maps a flat index of the inferred shape to the same coordinates in the output shape.
  std::vector<int64_t> out_strides = row_major_strides(out_shape);
  auto target = [&](int64_t flat) {
    int64_t off = 0;
    for (size_t d = inferred.size(); d-- > 0;) {
      off += (flat % inferred[d]) * out_strides[d];
      flat /= inferred[d];
    }
    return off;
  };
  Tensor y = Tensor::zeros(x.dtype(), out_shape);
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    for (int64_t i = 0; i < x.numel(); ++i) yp[target(ip[i])] = xp[i];  // serial: last write wins
  });
  ctx.set_output(0, std::move(y));
}

}  // namespace

void register_nn_pool_kernels(KernelTable& t) {
  t.add(Op::MaxPool, max_pool_kernel);
  t.add(Op::AveragePool, [](KernelContext& c) { average_pool_kernel(c, false); });
  t.add(Op::GlobalAveragePool, [](KernelContext& c) { average_pool_kernel(c, true); });
  t.add(Op::LpPool, [](KernelContext& c) { lp_pool_kernel(c, false); });
  t.add(Op::GlobalLpPool, [](KernelContext& c) { lp_pool_kernel(c, true); });
  t.add(Op::GlobalMaxPool, global_max_pool_kernel);
  t.add(Op::MaxUnpool, max_unpool_kernel);
}

}  // namespace terrace::ops
