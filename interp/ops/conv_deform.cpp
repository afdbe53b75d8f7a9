// DeformConv (opsets 19, 22), 2-D: each kernel tap reads the input at its grid position moved by
// a learnt offset, bilinearly (zero outside the image), times an optional mask, as ONNX's
// reference (GridSample with align_corners and zero padding) does.
#include <cmath>

#include "interp/ops/linalg_parts.h"

namespace terrace::ops {
namespace {

// Bilinear read of plane p ([h, w]) at (y, x); taps outside the plane read 0.
double bilinear(const double* p, int64_t h, int64_t w, double y, double x) {
  const double y0 = std::floor(y), x0 = std::floor(x);
  double sum = 0;
  for (int dy = 0; dy < 2; ++dy)
    for (int dx = 0; dx < 2; ++dx) {
      const int64_t yy = int64_t(y0) + dy, xx = int64_t(x0) + dx;
      if (yy < 0 || yy >= h || xx < 0 || xx >= w) continue;
      const double wy = dy ? y - y0 : 1 - (y - y0), wx = dx ? x - x0 : 1 - (x - x0);
      sum += wy * wx * p[yy * w + xx];
    }
  return sum;
}

void deform_conv_kernel(KernelContext& ctx) {
  const Node& node = ctx.node;
  const Tensor& x = ctx.input(0);
  const Tensor& wt = ctx.input(1);
  const Tensor& off = ctx.input(2);
  TERRACE_CHECK(x.rank() != 3 && x.rank() != 5, NotImplemented, node.describe(),
                ": DeformConv of rank ", x.rank(), " (only 2-D images, rank 4, are implemented)");
  TERRACE_CHECK(x.rank() == 4 && wt.rank() == 4 && off.rank() == 4 && is_float(x.dtype()), InvalidArgument,
                node.describe(), ": X, W and offset must be float [N, C, H, W] tensors");
  const int64_t n = x.dim(0), ic = x.dim(1), ih = x.dim(2), iw = x.dim(3);
  const int64_t oc = wt.dim(0), kh = wt.dim(2), kw = wt.dim(3), oh = off.dim(2), ow = off.dim(3);
  const int64_t group = node.attr_int("group", 1), og = node.attr_int("offset_group", 1);
  auto pair = [&](const char* name, int64_t def, size_t count) {
    std::vector<int64_t> v = node.attr_ints(name, std::vector<int64_t>(count, def));
    TERRACE_CHECK(v.size() == count, InvalidModel, node.describe(), ": ", name, " must have ", count, " values");
    return v;
  };
  const std::vector<int64_t> dil = pair("dilations", 1, 2), st = pair("strides", 1, 2), pads = pair("pads", 0, 4);
  TERRACE_CHECK(group > 0 && og > 0 && ic == wt.dim(1) * group && oc % group == 0 && ic % og == 0, InvalidArgument,
                node.describe(), ": channels of X ", shape_str(x.shape()), " and W ", shape_str(wt.shape()),
                " do not fit group ", group, " and offset_group ", og);
  TERRACE_CHECK(off.dim(0) == n && off.dim(1) == og * kh * kw * 2, InvalidArgument, node.describe(), ": offset ",
                shape_str(off.shape()), " must be [", n, ", ", og * kh * kw * 2, ", H_out, W_out]");
  const bool has_mask = ctx.has_input(4);
  if (has_mask)
    TERRACE_CHECK(ctx.input(4).shape() == Shape({n, og * kh * kw, oh, ow}), InvalidArgument, node.describe(),
                  ": mask must be [", n, ", ", og * kh * kw, ", ", oh, ", ", ow, "]");
  if (ctx.has_input(3))
    TERRACE_CHECK(ctx.input(3).numel() == oc, InvalidArgument, node.describe(), ": B must have ", oc, " values");
  const Tensor xd = x.cast(DType::Float64), wd = wt.cast(DType::Float64), od = off.cast(DType::Float64);
  const Tensor md = has_mask ? ctx.input(4).cast(DType::Float64) : Tensor();
  const double *xp = xd.data<double>(), *wp = wd.data<double>(), *op = od.data<double>();
  const double* mp = has_mask ? md.data<double>() : nullptr;
  const int64_t icg = wt.dim(1), ocg = oc / group, ic_per_og = ic / og;
  std::vector<double> y(size_t(n * oc * oh * ow), 0.0);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t o = 0; o < oc; ++o)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          double acc = ctx.has_input(3) ? ctx.input(3).get_as_double(o) : 0.0;
          const int64_t g = o / ocg;
          for (int64_t cc = 0; cc < icg; ++cc) {
            const int64_t c = g * icg + cc, q = c / ic_per_og;
            const double* plane = xp + (b * ic + c) * ih * iw;
            for (int64_t u = 0; u < kh; ++u)
              for (int64_t v = 0; v < kw; ++v) {
                const int64_t tap = u * kw + v;
                const double dy = op[(((b * og + q) * kh * kw + tap) * 2 + 0) * oh * ow + i * ow + j];
                const double dx = op[(((b * og + q) * kh * kw + tap) * 2 + 1) * oh * ow + i * ow + j];
                const double yy = double(i * st[0] - pads[0] + u * dil[0]) + dy;
                const double xx = double(j * st[1] - pads[1] + v * dil[1]) + dx;
                double val = bilinear(plane, ih, iw, yy, xx) * wp[((o * icg + cc) * kh + u) * kw + v];
                if (mp) val *= mp[((b * og + q) * kh * kw + tap) * oh * ow + i * ow + j];
                acc += val;
              }
          }
          y[size_t(((b * oc + o) * oh + i) * ow + j)] = acc;
        }
  ctx.set_output(0, Tensor::from_vector<double>({n, oc, oh, ow}, y).cast(x.dtype()));
}

}  // namespace

void register_deform_conv_kernel(KernelTable& t) { t.add(Op::DeformConv, deform_conv_kernel); }

}  // namespace terrace::ops
