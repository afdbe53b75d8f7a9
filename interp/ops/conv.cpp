// Conv, ConvInteger and QLinearConv: N-D convolution as im2col + the packed GEMM (conv.h).
#include "interp/ops/conv.h"

#include "interp/ops/common.h"
#include "interp/ops/linalg_parts.h"

namespace terrace::ops {

Shape ConvGeometry::out_shape() const {
  Shape s{batch, cout};
  s.insert(s.end(), out.begin(), out.end());
  return s;
}

ConvAttrs conv_attrs(const Node& node, size_t rank) {
  ConvAttrs a;
  a.strides = node.attr_ints("strides", std::vector<int64_t>(rank, 1));
  a.dilations = node.attr_ints("dilations", std::vector<int64_t>(rank, 1));
  std::vector<int64_t> pads = node.attr_ints("pads", std::vector<int64_t>(2 * rank, 0));
  a.auto_pad = node.attr_string("auto_pad", "NOTSET");
  TERRACE_CHECK(a.strides.size() == rank && a.dilations.size() == rank && pads.size() == 2 * rank,
                InvalidModel, node.describe(), ": strides, dilations and pads must have ", rank,
                ", ", rank, " and ", 2 * rank, " values for ", rank, " spatial dims");
  for (size_t d = 0; d < rank; ++d)
    TERRACE_CHECK(a.strides[d] > 0 && a.dilations[d] > 0 && pads[d] >= 0 && pads[d + rank] >= 0,
                  InvalidModel, node.describe(), ": strides and dilations must be positive and pads non-negative");
  TERRACE_CHECK(a.auto_pad == "NOTSET" || a.auto_pad == "VALID" || a.auto_pad == "SAME_UPPER" ||
                    a.auto_pad == "SAME_LOWER",
                InvalidModel, node.describe(), ": unknown auto_pad '", a.auto_pad, "'");
  a.pads_begin.assign(pads.begin(), pads.begin() + int64_t(rank));
  a.pads_end.assign(pads.begin() + int64_t(rank), pads.end());
  return a;
}

ConvGeometry conv_geometry(const Node& node, const Shape& x, const Shape& w) {
  TERRACE_CHECK(x.size() >= 3 && x.size() <= 10 && w.size() == x.size(), InvalidArgument,
                node.describe(), ": input ", shape_str(x), " and weights ", shape_str(w),
                " must both be [N, C, D1..Dn] with 1 <= n <= 8");
  const size_t rank = x.size() - 2;
  ConvGeometry g;
  g.batch = x[0];
  g.cin = x[1];
  g.cout = w[0];
  g.group = node.attr_int("group", 1);
  TERRACE_CHECK(g.group > 0 && g.cin % g.group == 0 && g.cout % g.group == 0 &&
                    w[1] * g.group == g.cin,
                InvalidArgument, node.describe(), ": input ", shape_str(x), " and weights ",
                shape_str(w), " do not fit group=", g.group);
  g.in.assign(x.begin() + 2, x.end());
  g.kernel = node.attr_ints("kernel_shape", Shape(w.begin() + 2, w.end()));
  TERRACE_CHECK(g.kernel == Shape(w.begin() + 2, w.end()), InvalidArgument, node.describe(),
                ": kernel_shape ", shape_str(g.kernel), " differs from the weights ", shape_str(w));
  ConvAttrs a = conv_attrs(node, rank);
  g.strides = a.strides;
  g.dilations = a.dilations;
  g.pads_begin = a.pads_begin;
  g.pads_end = a.pads_end;
  g.out.resize(rank);
  for (size_t d = 0; d < rank; ++d) {
    const int64_t span = (g.kernel[d] - 1) * g.dilations[d] + 1;
    if (a.auto_pad == "VALID") {
      g.pads_begin[d] = g.pads_end[d] = 0;
    } else if (a.auto_pad != "NOTSET") {  // SAME_*: out = ceil(in / stride)
      const int64_t out = (g.in[d] + g.strides[d] - 1) / g.strides[d];
      const int64_t total = std::max<int64_t>(0, (out - 1) * g.strides[d] + span - g.in[d]);
      g.pads_begin[d] = a.auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      g.pads_end[d] = total - g.pads_begin[d];
    }
    const int64_t padded = g.in[d] + g.pads_begin[d] + g.pads_end[d];
    TERRACE_CHECK(padded >= span, InvalidArgument, node.describe(), ": kernel ",
                  shape_str(g.kernel), " (dilated) is larger than the padded input ", shape_str(x));
    g.out[d] = (padded - span) / g.strides[d] + 1;
  }
  return g;
}

namespace {

bool is_float_like(DType t) { return is_float(t); }

// Conv: y = w * x + B, summed in double and rounded once.
void conv_kernel(KernelContext& ctx) {
  const Node& node = ctx.node;
  const Tensor &x = ctx.input(0), &w = ctx.input(1);
  TERRACE_CHECK(x.dtype() == w.dtype() && is_float_like(x.dtype()), InvalidArgument,
                node.describe(), ": Conv needs float X and W of one type");
  ConvGeometry g = conv_geometry(node, x.shape(), w.shape());
  const Tensor* bias = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  TERRACE_CHECK(!bias || (bias->numel() == g.cout && bias->dtype() == x.dtype()), InvalidArgument,
                node.describe(), ": bias must hold ", g.cout, " values of X's type");
  Tensor y = Tensor::empty(x.dtype(), g.out_shape());
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_integral_v<T>) {
      const T* b = bias ? bias->data<T>() : nullptr;
      T* yd = y.data<T>();
      const int64_t N = g.out_size();
      conv_forward<double>(g, x.data<T>(), w.data<T>(),
                           [&](int64_t n, int64_t co, int64_t j0, int64_t cnt, const double* s) {
                             const double add = b ? to_acc<double>(b[co]) : 0.0;
                             T* dst = yd + (n * g.cout + co) * N + j0;
                             for (int64_t j = 0; j < cnt; ++j) dst[j] = round_to<T>(s[j] + add);
                           });
    }
  });
  ctx.set_output(0, std::move(y));
}

// Both integer convolutions: the int64 sums of (x - x_zp) * (w - w_zp), handed to emit.
// The input's padding holds x_zp, so it adds nothing to the sums.
template <typename Emit>
ConvGeometry integer_conv(KernelContext& ctx, size_t x_in, size_t xzp_in, size_t w_in, size_t wzp_in,
                          Emit&& emit) {
  const Tensor &x = ctx.input(x_in), &w = ctx.input(w_in);
  ConvGeometry g = conv_geometry(ctx.node, x.shape(), w.shape());
  Tensor xs = subtract_zero_point(ctx, x_in, xzp_in, x.numel(), 1);
  Tensor ws = subtract_zero_point(ctx, w_in, wzp_in, w.numel() / std::max<int64_t>(g.cout, 1), g.cout);
  conv_forward<int64_t>(g, xs.data<int32_t>(), ws.data<int32_t>(), emit);
  return g;
}

void conv_integer_kernel(KernelContext& ctx) {
  const ConvGeometry g0 = conv_geometry(ctx.node, ctx.input(0).shape(), ctx.input(1).shape());
  Tensor y = Tensor::empty(DType::Int32, g0.out_shape());
  int32_t* yd = y.data<int32_t>();
  integer_conv(ctx, 0, 2, 1, 3, [&](int64_t n, int64_t co, int64_t j0, int64_t cnt, const int64_t* s) {
    int32_t* dst = yd + (n * g0.cout + co) * g0.out_size() + j0;
    for (int64_t j = 0; j < cnt; ++j) dst[j] = int32_t(s[j]);
  });
  ctx.set_output(0, std::move(y));
}

void qlinear_conv_kernel(KernelContext& ctx) {
  const Node& node = ctx.node;
  const ConvGeometry g0 = conv_geometry(node, ctx.input(0).shape(), ctx.input(3).shape());
  const Tensor &xs = ctx.input(1), &ws = ctx.input(4), &ys = ctx.input(6), &yzp = ctx.input(7);
  TERRACE_CHECK(xs.dtype() == DType::Float32 && ws.dtype() == DType::Float32 &&
                    ys.dtype() == DType::Float32 && xs.numel() == 1 && ys.numel() == 1 &&
                    (ws.numel() == 1 || ws.numel() == g0.cout) && yzp.numel() == 1,
                InvalidArgument, node.describe(),
                ": scales must be float32 scalars (w_scale may hold one per output channel)");
  std::vector<float> multiplier(size_t(g0.cout));
  for (int64_t c = 0; c < g0.cout; ++c)
    multiplier[size_t(c)] = xs.data<float>()[0] * ws.data<float>()[ws.numel() == 1 ? 0 : c] / ys.data<float>()[0];
  const Tensor* bias = ctx.has_input(8) ? &ctx.input(8) : nullptr;
  TERRACE_CHECK(!bias || (bias->dtype() == DType::Int32 && bias->numel() == g0.cout), InvalidArgument,
                node.describe(), ": B must be int32 with ", g0.cout, " values");
  Tensor y = Tensor::empty(yzp.dtype(), g0.out_shape());
  dispatch_dtype(yzp.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, uint8_t> || std::is_same_v<T, int8_t>) {
      const float zp = float(yzp.data<T>()[0]);
      T* yd = y.data<T>();
      integer_conv(ctx, 0, 2, 3, 5, [&](int64_t n, int64_t co, int64_t j0, int64_t cnt, const int64_t* s) {
        const int64_t add = bias ? bias->data<int32_t>()[co] : 0;
        T* dst = yd + (n * g0.cout + co) * g0.out_size() + j0;
        for (int64_t j = 0; j < cnt; ++j) {
          const float v = std::nearbyint(float(s[j] + add) * multiplier[size_t(co)]) + zp;
          dst[j] = v != v ? T(0)  // a NaN scale: 0, as Cast gives
                   : T(std::clamp(v, float(std::numeric_limits<T>::min()), float(std::numeric_limits<T>::max())));
        }
      });
    } else {
      fail(ErrorCode::InvalidArgument, node.describe(), ": y_zero_point must be uint8 or int8");
    }
  });
  ctx.set_output(0, std::move(y));
}

}  // namespace

void register_conv_kernels(KernelTable& t) {
  t.add(Op::Conv, conv_kernel);
  t.add(Op::ConvInteger, conv_integer_kernel);
  t.add(Op::QLinearConv, qlinear_conv_kernel);
  register_conv_transpose_kernel(t);
}

}  // namespace terrace::ops
