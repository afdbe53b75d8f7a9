// GridSample (opset 16, 4-D; opset 20, also 5-D): bilinear, nearest and bicubic sampling with zeros,
// border and reflection padding, following PyTorch's grid_sample (which ONNX's test data comes from).
#include <algorithm>
#include <cmath>
#include <string>

#include "interp/ops/misc_kernels.h"

namespace terrace::ops {
namespace {

enum class Mode { Bilinear, Nearest, Bicubic };
enum class Padding { Zeros, Border, Reflection };

struct Sampler {
  Mode mode;
  Padding padding;
  bool align_corners;

  // Grid value in [-1, 1] -> pixel coordinate along a dim of `size`.
  double unnormalize(double g, int64_t size) const {
    return align_corners ? (g + 1) / 2 * double(size - 1) : ((g + 1) * double(size) - 1) / 2;
  }

  // Reflects x into [lo2 / 2, hi2 / 2] (bounds given doubled, as PyTorch does).
  static double reflect(double x, double lo2, double hi2) {
    if (lo2 == hi2) return 0;
    double lo = lo2 / 2, span = (hi2 - lo2) / 2;
    x = std::fabs(x - lo);
    double extra = std::fmod(x, span);
    double flips = std::floor(x / span);  // a double: x may be huge, infinite or NaN
    return std::fmod(flips, 2.0) == 0 ? extra + lo : span - extra + lo;
  }

  // Applies border or reflection padding to a coordinate (zeros padding leaves it alone).
  double pad(double x, int64_t size) const {
    double hi = double(size - 1);
    if (padding == Padding::Border) return std::clamp(x, 0.0, hi);
    if (padding == Padding::Reflection) {
      x = align_corners ? reflect(x, 0, 2 * hi) : reflect(x, -1, 2 * double(size) - 1);
      return std::clamp(x, 0.0, hi);
    }
    return x;
  }
};

// Plane value at integer (y, x), or 0 outside it.
template <typename T>
double at(const T* plane, int64_t h, int64_t w, int64_t y, int64_t x) {
  return y >= 0 && y < h && x >= 0 && x < w ? double(plane[y * w + x]) : 0.0;
}

// A pixel coordinate as an index; NaN and values far outside any plane become -2, outside like
// their neighbour at +1 (converting them to int64 would be undefined).
int64_t to_index(double v) { return v > -1e15 && v < 1e15 ? int64_t(v) : -2; }

// Cubic convolution weights of the 4 taps around a fractional offset t (A = -0.75).
void cubic_weights(double t, double c[4]) {
  constexpr double A = -0.75;
  auto near = [](double x) { return ((A + 2) * x - (A + 3)) * x * x + 1; };
  auto far = [](double x) { return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A; };
  c[0] = far(t + 1);
  c[1] = near(t);
  c[2] = near(1 - t);
  c[3] = far(2 - t);
}

template <typename T>
double sample(const Sampler& s, const T* plane, int64_t h, int64_t w, double gx, double gy) {
  double x = s.unnormalize(gx, w), y = s.unnormalize(gy, h);
  if (s.mode == Mode::Bicubic) {  // padding applies to each tap, not to the coordinate
    double x0 = std::floor(x), y0 = std::floor(y), cx[4], cy[4];
    cubic_weights(x - x0, cx);
    cubic_weights(y - y0, cy);
    double acc = 0;
    for (int i = 0; i < 4; ++i) {
      double row = 0;
      for (int j = 0; j < 4; ++j) {
        double tx = s.pad(x0 - 1 + j, w), ty = s.pad(y0 - 1 + i, h);
        row += cx[j] * at(plane, h, w, to_index(ty), to_index(tx));
      }
      acc += cy[i] * row;
    }
    return acc;
  }
  x = s.pad(x, w);
  y = s.pad(y, h);
  if (s.mode == Mode::Nearest)
    return at(plane, h, w, to_index(std::nearbyint(y)), to_index(std::nearbyint(x)));
  double x0 = std::floor(x), y0 = std::floor(y), fx = x - x0, fy = y - y0;
  int64_t ix = to_index(x0), iy = to_index(y0);
  return at(plane, h, w, iy, ix) * (1 - fx) * (1 - fy) + at(plane, h, w, iy, ix + 1) * fx * (1 - fy) +
         at(plane, h, w, iy + 1, ix) * (1 - fx) * fy + at(plane, h, w, iy + 1, ix + 1) * fx * fy;
}

// Volumetric (opset 20) sampling of a [d, h, w] volume at grid (gx, gy, gz): nearest or
// trilinear, with the same padding rules per coordinate; cubic is 2-D only in ONNX.
template <typename T>
double sample3d(const Sampler& s, const T* vol, int64_t d, int64_t h, int64_t w, double gx, double gy, double gz) {
  const double x = s.pad(s.unnormalize(gx, w), w), y = s.pad(s.unnormalize(gy, h), h), z = s.pad(s.unnormalize(gz, d), d);
  auto at3 = [&](int64_t k, int64_t i, int64_t j) {
    return k >= 0 && k < d ? at(vol + k * h * w, h, w, i, j) : 0.0;
  };
  if (s.mode == Mode::Nearest)
    return at3(to_index(std::nearbyint(z)), to_index(std::nearbyint(y)), to_index(std::nearbyint(x)));
  const double x0 = std::floor(x), y0 = std::floor(y), z0 = std::floor(z);
  const double fx = x - x0, fy = y - y0, fz = z - z0;
  const int64_t ix = to_index(x0), iy = to_index(y0), iz = to_index(z0);
  double acc = 0;
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 2; ++b)
      for (int c = 0; c < 2; ++c)
        acc += at3(iz + a, iy + b, ix + c) * (a ? fz : 1 - fz) * (b ? fy : 1 - fy) * (c ? fx : 1 - fx);
  return acc;
}

void grid_sample_3d(const Node& node, const Sampler& s, const Tensor& x, const Tensor& grid, KernelContext& ctx) {
  TERRACE_CHECK(grid.rank() == 5 && grid.dim(0) == x.dim(0) && grid.dim(4) == 3, InvalidArgument, node.describe(),
                ": X ", shape_str(x.shape()), " and grid ", shape_str(grid.shape()),
                " must be [N, C, D, H, W] and [N, D_out, H_out, W_out, 3]");
  TERRACE_CHECK(s.mode != Mode::Bicubic, NotImplemented, node.describe(), ": cubic sampling is defined for 2-D only");
  const int64_t n = x.dim(0), c = x.dim(1), d = x.dim(2), h = x.dim(3), w = x.dim(4);
  const int64_t points = grid.dim(1) * grid.dim(2) * grid.dim(3);
  const Tensor g = grid.cast(DType::Float64), xd = x.cast(DType::Float64);
  const double *gp = g.data<double>(), *src = xd.data<double>();
  std::vector<double> y(size_t(n * c * points));
  for (int64_t nc = 0; nc < n * c; ++nc)
    for (int64_t p = 0; p < points; ++p) {
      const double* gxyz = gp + ((nc / c) * points + p) * 3;
      y[size_t(nc * points + p)] = sample3d(s, src + nc * d * h * w, d, h, w, gxyz[0], gxyz[1], gxyz[2]);
    }
  ctx.set_output(0, Tensor::from_vector<double>({n, c, grid.dim(1), grid.dim(2), grid.dim(3)}, y).cast(x.dtype()));
}

Sampler read_sampler(const Node& node) {
  Sampler s{};
  std::string mode = node.attr_string("mode", "bilinear");
  std::string padding = node.attr_string("padding_mode", "zeros");
  if (mode == "bilinear" || mode == "linear") s.mode = Mode::Bilinear;
  else if (mode == "nearest") s.mode = Mode::Nearest;
  else if (mode == "bicubic" || mode == "cubic") s.mode = Mode::Bicubic;
  else fail(ErrorCode::InvalidModel, node.describe(), ": unknown mode '", mode, "'");
  if (padding == "zeros") s.padding = Padding::Zeros;
  else if (padding == "border") s.padding = Padding::Border;
  else if (padding == "reflection") s.padding = Padding::Reflection;
  else fail(ErrorCode::InvalidModel, node.describe(), ": unknown padding_mode '", padding, "'");
  s.align_corners = node.attr_int("align_corners", 0) != 0;
  return s;
}

void grid_sample(KernelContext& ctx) {
  const Node& node = ctx.node;
  const Tensor& x = ctx.input(0);
  const Tensor& grid = ctx.input(1);
  TERRACE_CHECK(is_float(x.dtype()) && is_float(grid.dtype()), InvalidArgument, node.describe(),
                ": X and grid must be float tensors");
  if (x.rank() == 5) return grid_sample_3d(node, read_sampler(node), x, grid, ctx);
  TERRACE_CHECK(x.rank() == 4 && grid.rank() == 4 && grid.dim(0) == x.dim(0) && grid.dim(3) == 2,
                InvalidArgument, node.describe(), ": X ", shape_str(x.shape()), " and grid ",
                shape_str(grid.shape()), " must be [N, C, H, W] and [N, H_out, W_out, 2]");
  const Sampler s = read_sampler(node);
  const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3);
  const int64_t ho = grid.dim(1), wo = grid.dim(2);
  const Tensor g = grid.cast(DType::Float64);
  const double* gp = g.data<double>();
  Tensor y = Tensor::empty(x.dtype(), {n, c, ho, wo});
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (is_float_storage<T>) {
      const T* src = x.data<T>();
      T* dst = y.data<T>();
      const int64_t total = n * c * ho * wo;
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < total; ++i) {
        const int64_t p = i % (ho * wo), nc = i / (ho * wo), b = nc / c;
        const double* gxy = gp + (b * ho * wo + p) * 2;
        dst[i] = from_double<T>(sample(s, src + nc * h * w, h, w, gxy[0], gxy[1]));
      }
    }
  });
  ctx.set_output(0, std::move(y));
}

// AffineGrid (opset 20): the sampling grid of theta ([N, 2, 3] or [N, 3, 4]) over an output of
// `size` ([N, C, H, W] or [N, C, D, H, W]): theta times the normalised coordinates (x along W
// first, then y, then z, and 1), which span [-1, 1] at the pixels' corners or centres.
void affine_grid(KernelContext& ctx) {
  const Node& node = ctx.node;
  const Tensor& theta = ctx.input(0);
  const std::vector<int64_t> size = ctx.input(1).to_int64_vector();
  TERRACE_CHECK(size.size() == 4 || size.size() == 5, InvalidArgument, node.describe(),
                ": size must have 4 or 5 values, got ", size.size());
  const int64_t sd = int64_t(size.size()) - 2;  // spatial dims: 2 or 3
  TERRACE_CHECK(is_float(theta.dtype()) && theta.rank() == 3 && theta.dim(0) == size[0] && theta.dim(1) == sd &&
                    theta.dim(2) == sd + 1,
                InvalidArgument, node.describe(), ": theta ", shape_str(theta.shape()), " must be float [", size[0],
                ", ", sd, ", ", sd + 1, "]");
  const bool align = node.attr_int("align_corners", 0) != 0;
  Shape out = {size[0]};
  for (int64_t d = 2; d < int64_t(size.size()); ++d) {
    TERRACE_CHECK(size[size_t(d)] >= 0 && size[size_t(d)] < (int64_t(1) << 31), InvalidArgument, node.describe(),
                  ": size ", size[size_t(d)], " is out of range");
    out.push_back(size[size_t(d)]);
  }
  out.push_back(sd);
  auto coord = [&](int64_t i, int64_t n) {
    if (align) return n == 1 ? -1.0 : -1.0 + 2.0 * double(i) / double(n - 1);
    return -1.0 + (2.0 * double(i) + 1.0) / double(n);
  };
  const Tensor th = theta.cast(DType::Float64);
  const double* tp = th.data<double>();
  const int64_t points = shape_numel(out) / std::max<int64_t>(size[0] * sd, 1);
  std::vector<double> y(size_t(shape_numel(out)));
  for (int64_t b = 0; b < size[0]; ++b)
    for (int64_t p = 0; p < points; ++p) {
      double homo[4];  // x (W), y (H), z (D), then 1
      int64_t rest = p;
      for (int64_t k = 0; k < sd; ++k) {  // the last spatial dim is W, the x coordinate
        const int64_t n = out[size_t(sd - k)];
        homo[k] = coord(rest % n, n);
        rest /= n;
      }
      homo[sd] = 1.0;
      for (int64_t r = 0; r < sd; ++r) {
        double acc = 0;
        for (int64_t c = 0; c <= sd; ++c) acc += tp[(b * sd + r) * (sd + 1) + c] * homo[c];
        y[size_t((b * points + p) * sd + r)] = acc;
      }
    }
  ctx.set_output(0, Tensor::from_vector<double>(out, y).cast(theta.dtype()));
}

}  // namespace

void register_misc_grid_sample_kernel(KernelTable& t) {
  t.add(Op::GridSample, grid_sample);
  t.add(Op::AffineGrid, affine_grid);
}

}  // namespace terrace::ops
