// Convolution geometry (attributes, auto_pad, output sizes) and the im2col + GEMM forward pass
// shared by Conv, ConvInteger and QLinearConv.
#pragma once
#include <array>

#include "interp/graph.h"
#include "interp/ops/linalg_gemm.h"

namespace terrace::ops {

// Spatial coordinates; conv_geometry rejects more than kMaxSpatial spatial dims, so the
// per-row walks below allocate nothing (they run inside parallel regions).
inline constexpr size_t kMaxSpatial = 8;
using Coords = std::array<int64_t, kMaxSpatial>;

struct ConvGeometry {
  int64_t batch = 0, cin = 0, cout = 0, group = 1;
  Shape in, kernel, out;  // spatial sizes
  std::vector<int64_t> strides, dilations, pads_begin, pads_end;
  int64_t cin_g() const { return cin / group; }
  int64_t cout_g() const { return cout / group; }
  int64_t in_size() const { return shape_numel(in); }
  int64_t kernel_size() const { return shape_numel(kernel); }
  int64_t out_size() const { return shape_numel(out); }
  Shape out_shape() const;  // [batch, cout, out...]
};

// Reads strides/dilations/pads/auto_pad/group/kernel_shape of a Conv-like node for input x
// [N, C, D...] and weights w [M, C/group, k...]; InvalidArgument/InvalidModel naming the node.
ConvGeometry conv_geometry(const Node& node, const Shape& x, const Shape& w);

// The geometry of a ConvTranspose node for input x [N, C, D...] and weights w [C, M/group, k...]:
// `in` is x's spatial size, `out` the result's, `pads_begin`/`pads_end` the pads the output is
// cut by from the full transposed convolution (strides * (in - 1) + output_padding + (k - 1) *
// dilations + 1), negative where output_shape asks for more than that; as the interpreter runs it.
ConvGeometry conv_transpose_geometry(const Node& node, const Shape& x, const Shape& w);

// The strides/dilations/pads attributes of a conv-like node with `rank` spatial dims, checked.
struct ConvAttrs {
  std::vector<int64_t> strides, dilations, pads_begin, pads_end;
  std::string auto_pad;
};
ConvAttrs conv_attrs(const Node& node, size_t rank);

// Visits the points a of grid `from` in row-major order and calls f(b) with the row-major offset
// in grid `to` of the point b = a * stride + offset (per dim), or -1 where b falls outside `to`.
// im2col (from = output, to = input) and col2im (from = input, to = output) both walk this way.
template <typename F>
void walk_strided_grid(const Shape& from, const Shape& to, const std::vector<int64_t>& stride,
                       const int64_t* offset, F&& f) {
  const int64_t D = int64_t(from.size()), last = D - 1;
  const int64_t from_last = from[size_t(last)], to_last = to[size_t(last)];
  const int64_t s_last = stride[size_t(last)], b_first = offset[last];
  const int64_t rows = from_last ? shape_numel(from) / from_last : 0;
  Coords a{};
  for (int64_t r = 0; r < rows; ++r) {
    int64_t base = 0;  // offset of the row in `to`, or -1 when the row is outside
    for (int64_t d = 0; d < last && base >= 0; ++d) {
      const int64_t b = a[size_t(d)] * stride[size_t(d)] + offset[d];
      base = (b < 0 || b >= to[size_t(d)]) ? -1 : base * to[size_t(d)] + b;
    }
    // Along the last dim, b = b_first + al * s_last lies inside `to` for al in [lo, hi).
    int64_t lo = 0, hi = 0;
    if (base >= 0) {
      lo = b_first >= 0 ? 0 : (-b_first + s_last - 1) / s_last;
      hi = b_first >= to_last ? 0 : std::min(from_last, (to_last - 1 - b_first) / s_last + 1);
      lo = std::min(lo, from_last);
      hi = std::max(hi, lo);
    }
    for (int64_t al = 0; al < lo; ++al) f(int64_t(-1));
    for (int64_t al = lo, b = base * to_last + b_first + lo * s_last; al < hi; ++al, b += s_last) f(b);
    for (int64_t al = hi; al < from_last; ++al) f(int64_t(-1));
    for (int64_t d = last - 1; d >= 0 && ++a[size_t(d)] == from[size_t(d)]; --d) a[size_t(d)] = 0;
  }
}

// Offsets b = kernel_coord * dilation - pad_begin of kernel position kpos (row-major in kernel).
inline Coords kernel_offsets(const Shape& kernel, const std::vector<int64_t>& dilations,
                             const std::vector<int64_t>& pads_begin, int64_t kpos) {
  Coords off{};
  for (size_t d = kernel.size(); d-- > 0;) {
    off[d] = (kpos % kernel[d]) * dilations[d] - pads_begin[d];
    kpos /= kernel[d];
  }
  return off;
}

// Writes row k = (c, kernel position) of the im2col matrix of one image's channel `xc` straight
// into packed-B layout (K rows, out_size columns); padded positions are zero.
template <typename Acc, typename T>
void im2col_row_packed(const ConvGeometry& g, const T* xc, int64_t kpos, Acc* packed, int64_t K,
                       int64_t k) {
  const Coords off = kernel_offsets(g.kernel, g.dilations, g.pads_begin, kpos);
  Acc* panel = packed + k * kGemmNR;
  int64_t lane = 0;
  walk_strided_grid(g.out, g.in, g.strides, off.data(), [&](int64_t i) {
    panel[lane] = i >= 0 ? to_acc<Acc>(xc[i]) : Acc(0);
    if (++lane == kGemmNR) {
      lane = 0;
      panel += K * kGemmNR;
    }
  });
  for (; lane != 0 && lane < kGemmNR; ++lane) panel[lane] = Acc(0);
}

// Convolution with one input channel per group (depthwise), computed directly: a GEMM would
// have K = kernel size and mostly padding rows. Each output still sums its K products in
// kernel order from zero, padded taps included as w * 0, exactly as the GEMM path does.
template <typename Acc, typename T, typename Emit>
void conv_depthwise(const ConvGeometry& g, const T* x, const T* w, Emit&& emit) {
  const int64_t N = g.out_size(), kernel = g.kernel_size();
  parallel_for_catching(g.batch * g.cout, g.batch * g.cout > 1, [&](int64_t nc) {
    const int64_t n = nc / g.cout, co = nc % g.cout, ci = co / g.cout_g();
    ScratchBuffer<Acc> plane_buf(ScratchSlot::B, size_t(N));
    Acc* plane = plane_buf.data();
    std::fill(plane, plane + N, Acc(0));
    const T* xc = x + (n * g.cin + ci) * g.in_size();
    for (int64_t kpos = 0; kpos < kernel; ++kpos) {
      const Acc wv = to_acc<Acc>(w[co * kernel + kpos]);
      const Coords off = kernel_offsets(g.kernel, g.dilations, g.pads_begin, kpos);
      Acc* dst = plane;
      walk_strided_grid(g.out, g.in, g.strides, off.data(), [&](int64_t i) {
        *dst++ += wv * (i >= 0 ? to_acc<Acc>(xc[i]) : Acc(0));
      });
    }
    emit(n, co, int64_t(0), N, static_cast<const Acc*>(plane));
  });
}

// The forward convolution y = w * x as one GEMM per (image, group): W_g [cout_g, K] times the
// im2col matrix [K, out_size] with K = cin_g * kernel_size, accumulated in Acc.
// emit(n, co, j0, count, const Acc* sums) receives output channel co's sums for positions
// [j0, j0+count) of image n (from worker threads; it must not throw).
template <typename Acc, typename T, typename Emit>
void conv_forward(const ConvGeometry& g, const T* x, const T* w, Emit&& emit) {
  if (g.cin_g() == 1 && g.group > 1) return conv_depthwise<Acc>(g, x, w, emit);
  const int64_t K = g.cin_g() * g.kernel_size(), N = g.out_size(), M = g.cout_g();
  const int64_t kernel = g.kernel_size();
  // Many small groups (depthwise): run groups in parallel, each GEMM on one thread.
  const bool by_group = g.group >= 8;
  ScratchBuffer<Acc> wpack(ScratchSlot::A, size_t(g.group * packed_a_size(M, K)));
  for (int64_t grp = 0; grp < g.group; ++grp)
    pack_a_into(wpack.data() + grp * packed_a_size(M, K), w + grp * M * K, M, K, K, int64_t(1));
  // The im2col matrix: the calling thread's B slot, or each worker's own when groups run apart.
  auto one_gemm = [&](int64_t ng) {
    const int64_t n = ng / g.group, grp = ng % g.group;
    ScratchBuffer<Acc> col_buf(ScratchSlot::B, size_t(packed_b_size(K, N)));
    Acc* cols = col_buf.data();
    const T* xg = x + (n * g.cin + grp * g.cin_g()) * g.in_size();
#pragma omp parallel for schedule(static) if (!by_group && K * N > (1 << 15))
    for (int64_t k = 0; k < K; ++k)
      im2col_row_packed(g, xg + (k / kernel) * g.in_size(), k % kernel, cols, K, k);
    gemm_packed(wpack.data() + grp * packed_a_size(M, K), cols, M, K, N,
                [&](int64_t i, int64_t j0, int64_t cnt, const Acc* s) {
                  emit(n, grp * M + i, j0, cnt, s);
                });
  };
  // Otherwise one GEMM after another, each parallel inside. Not in an if(false) parallel loop:
  // libgomp runs the regions nested in one (even an inactive one) on a single thread.
  if (by_group) {
    parallel_for_catching(g.batch * g.group, true, one_gemm);
  } else {
    for (int64_t ng = 0; ng < g.batch * g.group; ++ng) one_gemm(ng);
  }
}

}  // namespace terrace::ops
