// ConvTranspose: per (image, group) one GEMM W_g^T · X_g into columns, then col2im into the output.
#include "interp/ops/common.h"
#include "interp/ops/conv.h"
#include "interp/ops/linalg_parts.h"

namespace terrace::ops {
namespace {

// Python-style floor division: the ONNX spec's pad split uses it, and total padding can be
// negative when output_shape asks for more than the natural size.
int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

}  // namespace

// Geometry of ConvTranspose for x [N, C, D...] and w [C, M/group, k...]; `in` is x's spatial size.
ConvGeometry conv_transpose_geometry(const Node& node, const Shape& x, const Shape& w) {
  TERRACE_CHECK(x.size() >= 3 && x.size() - 2 <= kMaxSpatial && w.size() == x.size(), InvalidArgument,
                node.describe(), ": input ", shape_str(x), " and weights ", shape_str(w),
                " must both be [N, C, D1..Dn] with 1 <= n <= ", kMaxSpatial);
  const size_t rank = x.size() - 2;
  ConvGeometry g;
  g.batch = x[0];
  g.cin = x[1];
  g.group = node.attr_int("group", 1);
  g.cout = w[1] * g.group;
  TERRACE_CHECK(g.group > 0 && w[0] == g.cin && g.cin % g.group == 0, InvalidArgument,
                node.describe(), ": input ", shape_str(x), " and weights ", shape_str(w),
                " do not fit group=", g.group);
  g.in.assign(x.begin() + 2, x.end());
  g.kernel = node.attr_ints("kernel_shape", Shape(w.begin() + 2, w.end()));
  TERRACE_CHECK(g.kernel == Shape(w.begin() + 2, w.end()), InvalidArgument, node.describe(),
                ": kernel_shape ", shape_str(g.kernel), " differs from the weights ", shape_str(w));
  ConvAttrs a = conv_attrs(node, rank);
  g.strides = a.strides;
  g.dilations = a.dilations;
  g.pads_begin = a.pads_begin;
  g.pads_end = a.pads_end;
  const auto out_pad = node.attr_ints("output_padding", std::vector<int64_t>(rank, 0));
  auto out_shape = node.attr_ints("output_shape", {});
  if (out_shape.size() == rank + 2) out_shape.erase(out_shape.begin(), out_shape.begin() + 2);
  TERRACE_CHECK(out_pad.size() == rank && (out_shape.empty() || out_shape.size() == rank),
                InvalidModel, node.describe(), ": output_padding and output_shape need ", rank, " values");
  g.out.resize(rank);
  for (size_t d = 0; d < rank; ++d) {
    const int64_t full = g.strides[d] * (g.in[d] - 1) + out_pad[d] + (g.kernel[d] - 1) * g.dilations[d] + 1;
    int64_t target = -1;
    if (!out_shape.empty()) target = out_shape[d];
    else if (a.auto_pad == "SAME_UPPER" || a.auto_pad == "SAME_LOWER") target = g.in[d] * g.strides[d];
    if (a.auto_pad == "VALID") g.pads_begin[d] = g.pads_end[d] = 0;
    if (target >= 0) {
      const int64_t total = full - target;
      g.pads_begin[d] = a.auto_pad == "SAME_UPPER" ? floor_div(total, 2) : total - floor_div(total, 2);
      g.pads_end[d] = total - g.pads_begin[d];
    }
    g.out[d] = full - g.pads_begin[d] - g.pads_end[d];
    TERRACE_CHECK(g.out[d] >= 0, InvalidArgument, node.describe(), ": pads leave a negative output size");
  }
  return g;
}

namespace {

// Adds channel co's columns (kernel_size rows of in_size sums) into its output plane, kernel
// position by kernel position, input point by input point: a fixed order for every element.
void col2im_channel(const ConvGeometry& g, const double* cols, double* plane) {
  const int64_t in_size = g.in_size();
  for (int64_t kpos = 0; kpos < g.kernel_size(); ++kpos) {
    const Coords off = kernel_offsets(g.kernel, g.dilations, g.pads_begin, kpos);
    const double* c = cols + kpos * in_size;
    walk_strided_grid(g.in, g.out, g.strides, off.data(), [&](int64_t o) {
      if (o >= 0) plane[o] += *c;
      ++c;
    });
  }
}

void conv_transpose_kernel(KernelContext& ctx) {
  const Node& node = ctx.node;
  const Tensor &x = ctx.input(0), &w = ctx.input(1);
  TERRACE_CHECK(x.dtype() == w.dtype() && is_float(x.dtype()), InvalidArgument, node.describe(),
                ": ConvTranspose needs float X and W of one type");
  const ConvGeometry g = conv_transpose_geometry(node, x.shape(), w.shape());
  const Tensor* bias = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  TERRACE_CHECK(!bias || (bias->numel() == g.cout && bias->dtype() == x.dtype()), InvalidArgument,
                node.describe(), ": bias must hold ", g.cout, " values of X's type");
  Tensor y = Tensor::empty(x.dtype(), g.out_shape());
  const int64_t M = g.cout_g() * g.kernel_size(), K = g.cin_g(), N = g.in_size();
  const int64_t out_size = g.out_size();
  std::vector<double> cols(size_t(M * N)), acc(size_t(g.cout_g() * out_size));
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_integral_v<T>) {
      const T* xd = x.data<T>();
      const T* wd = w.data<T>();
      T* yd = y.data<T>();
      for (int64_t n = 0; n < g.batch; ++n)
        for (int64_t grp = 0; grp < g.group; ++grp) {
          // A[(co, kpos), ci] = w[grp*K + ci, co, kpos]: W_g read transposed.
          auto A = pack_a<double>(wd + grp * K * M, M, K, int64_t(1), M);
          auto B = pack_b<double>(xd + (n * g.cin + grp * K) * N, K, N, N, int64_t(1));
          gemm_packed(A, B, [&](int64_t i, int64_t j0, int64_t cnt, const double* s) {
            std::copy(s, s + cnt, cols.data() + i * N + j0);
          });
          std::fill(acc.begin(), acc.end(), 0.0);
#pragma omp parallel for schedule(static) if (M * N > (1 << 14))
          for (int64_t co = 0; co < g.cout_g(); ++co) {
            double* plane = acc.data() + co * out_size;
            col2im_channel(g, cols.data() + co * g.kernel_size() * N, plane);
            const int64_t oc = grp * g.cout_g() + co;
            const double add = bias ? to_acc<double>(bias->data<T>()[oc]) : 0.0;
            T* dst = yd + (n * g.cout + oc) * out_size;
            for (int64_t j = 0; j < out_size; ++j) dst[j] = round_to<T>(plane[j] + add);
          }
        }
    }
  });
  ctx.set_output(0, std::move(y));
}

}  // namespace

void register_conv_transpose_kernel(KernelTable& t) { t.add(Op::ConvTranspose, conv_transpose_kernel); }

}  // namespace terrace::ops
