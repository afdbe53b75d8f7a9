// Resize (opsets 10, 11, 13, 18, 19) and Upsample: nearest, linear and cubic interpolation over N-D
// tensors, following the ONNX reference implementation (onnx/backend/test/case/node/resize.py).
#include <cmath>
#include <limits>

#include "interp/ops/shape_common.h"

namespace terrace::ops {
namespace {

enum class Mode { Nearest, Linear, Cubic };
enum class Coord { HalfPixel, HalfPixelSymmetric, PytorchHalfPixel, AlignCorners, Asymmetric, TfHalfPixelForNn, TfCropAndResize };
enum class Rounding { RoundPreferFloor, RoundPreferCeil, Floor, Ceil };

struct ResizeAttrs {
  Mode mode = Mode::Nearest;
  Coord coord = Coord::Asymmetric;
  Rounding rounding = Rounding::Floor;
  double cubic_a = -0.75;
  bool exclude_outside = false;
  double extrapolation = 0.0;
  bool antialias = false;  // opset 18: linear and cubic filters widened by 1/scale when shrinking
};

template <typename E>
E pick(const Node& node, const char* attr, const std::string& value,
       std::initializer_list<std::pair<const char*, E>> names) {
  for (auto& [n, e] : names)
    if (value == n) return e;
  fail(ErrorCode::InvalidModel, node.describe(), ": unknown ", attr, " '", value, "'");
}

Mode mode_of(const Node& node) {
  // Upsample spells linear "bilinear" in opset 7.
  return pick<Mode>(node, "mode", node.attr_string("mode", "nearest"),
                    {{"nearest", Mode::Nearest}, {"linear", Mode::Linear},
                     {"bilinear", Mode::Linear}, {"cubic", Mode::Cubic}});
}

// Resize from opset 11 on; opset 10's Resize and Upsample keep the defaults: asymmetric
// coordinates and rounding down, as Upsample always did.
ResizeAttrs resize_attrs(const Node& node) {
  ResizeAttrs a;
  a.mode = mode_of(node);
  a.coord = pick<Coord>(node, "coordinate_transformation_mode",
                        node.attr_string("coordinate_transformation_mode", "half_pixel"),
                        {{"half_pixel", Coord::HalfPixel},
                         {"half_pixel_symmetric", Coord::HalfPixelSymmetric},
                         {"pytorch_half_pixel", Coord::PytorchHalfPixel},
                         {"align_corners", Coord::AlignCorners},
                         {"asymmetric", Coord::Asymmetric},
                         {"tf_half_pixel_for_nn", Coord::TfHalfPixelForNn},
                         {"tf_crop_and_resize", Coord::TfCropAndResize}});
  a.rounding = pick<Rounding>(node, "nearest_mode",
                              node.attr_string("nearest_mode", "round_prefer_floor"),
                              {{"round_prefer_floor", Rounding::RoundPreferFloor},
                               {"round_prefer_ceil", Rounding::RoundPreferCeil},
                               {"floor", Rounding::Floor},
                               {"ceil", Rounding::Ceil}});
  a.cubic_a = node.attr_float("cubic_coeff_a", -0.75f);
  a.exclude_outside = node.attr_int("exclude_outside", 0) != 0;
  a.extrapolation = node.attr_float("extrapolation_value", 0.0f);
  a.antialias = node.attr_int("antialias", 0) != 0 && a.mode != Mode::Nearest;
  return a;
}

// The input coordinate that output coordinate x maps to along one axis. `out_len` is
// scale * in_len, unrounded, as in the reference; `out_size` the output's length.
double source_coord(const ResizeAttrs& a, double x, double scale, int64_t in_len, int64_t out_size,
                    double roi_start, double roi_end) {
  double out_len = scale * double(in_len);
  switch (a.coord) {
    case Coord::HalfPixel: return (x + 0.5) / scale - 0.5;
    case Coord::HalfPixelSymmetric: {  // opset 19: half_pixel, re-centred on the input
      double offset = double(in_len) / 2 * (1 - double(out_size) / out_len);
      return offset + (x + 0.5) / scale - 0.5;
    }
    case Coord::PytorchHalfPixel: return out_len > 1 ? (x + 0.5) / scale - 0.5 : -0.5;
    case Coord::AlignCorners: return out_len == 1 ? 0.0 : x * double(in_len - 1) / (out_len - 1);
    case Coord::Asymmetric: return x / scale;
    case Coord::TfHalfPixelForNn: return (x + 0.5) / scale;
    case Coord::TfCropAndResize:
      return (out_len == 1 ? (roi_end - roi_start) * double(in_len - 1) / 2
                           : x * (roi_end - roi_start) * double(in_len - 1) / (out_len - 1)) +
             roi_start * double(in_len - 1);
  }
  return x;
}

// The cubic convolution kernel of Keys with coefficient A, at distance x.
double cubic_kernel(double A, double x) {
  x = std::abs(x);
  if (x <= 1) return ((A + 2) * x - (A + 3)) * x * x + 1;
  if (x < 2) return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
  return 0;
}

// Antialiased taps (opset 18) when shrinking by `scale` < 1: the linear or cubic kernel stretched
// by 1/scale, over as many taps as it then covers, normalised to sum 1 (ONNX's reference).
std::vector<double> antialias_weights(const ResizeAttrs& a, double r, double scale) {
  scale = std::min(scale, 1.0);
  const double reach = a.mode == Mode::Linear ? 1.0 : 2.0;  // the kernel's support radius
  const int64_t first = int64_t(std::floor(-reach / scale) + 1), n = 2 - 2 * first;
  std::vector<double> w;
  double sum = 0;
  for (int64_t i = first; i < first + n; ++i) {
    double t = scale * (double(i) - r);
    w.push_back(a.mode == Mode::Linear ? std::clamp(1 - std::abs(t), 0.0, 1.0) : cubic_kernel(a.cubic_a, t));
    sum += w.back();
  }
  for (double& v : w) v /= sum;
  return w;
}

// Weights of the taps around a point, for the fraction `r` in (0, 1] past the tap before it.
std::vector<double> tap_weights(const ResizeAttrs& a, double r, double scale) {
  if (a.antialias && scale < 1) return antialias_weights(a, r, scale);
  switch (a.mode) {
    case Mode::Nearest: {
      bool up = r == 1.0 || a.rounding == Rounding::Ceil ||
                (a.rounding == Rounding::RoundPreferFloor && r > 0.5) ||
                (a.rounding == Rounding::RoundPreferCeil && r >= 0.5);
      return {up ? 0.0 : 1.0, up ? 1.0 : 0.0};
    }
    case Mode::Linear: return {1 - r, r};
    case Mode::Cubic: {
      double A = a.cubic_a, s = 1 - r;
      return {((A * (r + 1) - 5 * A) * (r + 1) + 8 * A) * (r + 1) - 4 * A,
              ((A + 2) * r - (A + 3)) * r * r + 1,
              ((A + 2) * s - (A + 3)) * s * s + 1,
              ((A * (s + 1) - 5 * A) * (s + 1) + 8 * A) * (s + 1) - 4 * A};
    }
  }
  return {};
}

// One input element an output element reads, as an offset along one axis, and its weight.
struct Tap {
  int64_t offset;
  double weight;
};

// The taps of output index x along one axis; empty when tf_crop_and_resize lands outside the
// input (the output is then extrapolation_value).
std::vector<Tap> axis_taps(const ResizeAttrs& a, int64_t x, double scale, int64_t in_len, int64_t out_size,
                           int64_t stride, double roi_start, double roi_end) {
  double xo = source_coord(a, double(x), scale, in_len, out_size, roi_start, roi_end);
  if (a.coord == Coord::TfCropAndResize && (xo < 0 || xo > double(in_len - 1))) return {};
  double fl = std::floor(xo);
  std::vector<double> w = tap_weights(a, xo == fl ? 1.0 : xo - fl, scale);
  int64_t n = int64_t(w.size()), half = n / 2;
  // The reference takes the n indices nearest xo (ties to the smaller) within the input padded by
  // n/2 edge copies on each side; clamping the window start reproduces that far from the input.
  double first = std::ceil(xo) - double(half);
  int64_t start = int64_t(std::clamp(first, double(-half), double(in_len + half - n)));
  if (a.exclude_outside) {
    double sum = 0;
    for (int64_t k = 0; k < n; ++k) {
      if (start + k < 0 || start + k >= in_len) w[size_t(k)] = 0;
      sum += w[size_t(k)];
    }
    for (double& v : w) v /= sum;
  }
  std::vector<Tap> taps;
  for (int64_t k = 0; k < n; ++k)
    if (w[size_t(k)] != 0)
      taps.push_back({std::clamp<int64_t>(start + k, 0, in_len - 1) * stride, w[size_t(k)]});
  return taps;
}

template <typename T>
T narrow(double v) {
  if constexpr (std::is_integral_v<T>) {
    double r = std::nearbyint(v);
    if (!(r >= double(std::numeric_limits<T>::lowest()))) return std::numeric_limits<T>::lowest();
    if (r >= double(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
    return T(r);
  } else {
    return T(float(v));
  }
}

template <>
double narrow<double>(double v) { return v; }

// The weighted sum over the taps of axes d.. (inner axes first, as the reference nests them).
template <typename T>
double interpolate(const T* in, const std::vector<const std::vector<Tap>*>& taps, size_t d,
                   int64_t off) {
  if (d == taps.size()) return double(in[off]);
  double sum = 0;
  for (const Tap& t : *taps[d]) sum += t.weight * interpolate(in, taps, d + 1, off + t.offset);
  return sum;
}

// Resamples x to `out_shape` with per-axis scales and (for tf_crop_and_resize) roi.
Tensor resample(const Node& node, const ResizeAttrs& a, const Tensor& x, const Shape& out_shape,
                const std::vector<double>& scales, const std::vector<double>& roi) {
  size_t r = out_shape.size();
  Tensor out = Tensor::empty(x.dtype(), out_shape);  // first, so absurd sizes fail cleanly
  auto strides = dense_view(x.shape()).strides;
  std::vector<std::vector<std::vector<Tap>>> table(r);  // [axis][output index] -> taps
  for (size_t d = 0; d < r; ++d) {
    TERRACE_CHECK(x.shape()[d] > 0 || out_shape[d] == 0, InvalidArgument, node.describe(),
                  ": cannot resize an empty axis ", d, " to ", out_shape[d]);
    double lo = roi.empty() ? 0 : roi[d], hi = roi.empty() ? 1 : roi[d + r];
    for (int64_t i = 0; i < out_shape[d]; ++i)
      table[d].push_back(axis_taps(a, i, scales[d], x.shape()[d], out_shape[d], strides[d], lo, hi));
  }
  int64_t total = out.numel();
  auto run = [&](auto tag, auto&& compute) {
    using T = decltype(tag);
    const T* src = elems<T>(x);
    T* dst = elems<T>(out);
#pragma omp parallel if (total >= (1 << 14))
    {
      std::vector<const std::vector<Tap>*> taps(r);  // per thread: the taps of each axis
#pragma omp for schedule(static)
      for (int64_t p = 0; p < total; ++p) {
        bool outside = false;
        for (int64_t d = int64_t(r) - 1, rest = p; d >= 0; --d) {
          taps[size_t(d)] = &table[size_t(d)][size_t(rest % out_shape[size_t(d)])];
          rest /= out_shape[size_t(d)];
          outside |= taps[size_t(d)]->empty();
        }
        dst[p] = compute(src, taps, outside);
      }
    }
  };
  if (a.mode == Mode::Nearest) {
    // One tap of weight 1 per axis: copy the element itself, bit-exactly, for any dtype.
    dispatch_move(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      T fill = T();
      if constexpr (!std::is_same_v<T, std::string>)
        fill = elems<T>(Tensor::scalar(float(a.extrapolation)).cast(x.dtype()))[0];
      run(tag, [&](const T* src, const auto& taps, bool outside) {
        if (outside) return fill;
        int64_t off = 0;
        for (auto* t : taps) off += t->front().offset;
        return src[off];
      });
    });
  } else {
    TERRACE_CHECK(x.dtype() != DType::Bool, InvalidArgument, node.describe(),
                  ": linear and cubic modes need a numeric input");
    dispatch_dtype(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      run(tag, [&](const T* src, const auto& taps, bool outside) {
        return narrow<T>(outside ? a.extrapolation : interpolate(src, taps, 0, 0));
      });
    });
  }
  return out;
}

std::vector<double> float_list(const Tensor& t) {
  std::vector<double> v(size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[size_t(i)] = t.get_as_double(i);
  return v;
}

// Output shape from scales: floor(in * scale), computed in double as the reference does.
Shape scaled_shape(const Node& node, const Shape& in, const std::vector<double>& scales) {
  TERRACE_CHECK(scales.size() == in.size(), InvalidArgument, node.describe(), ": ",
                scales.size(), " scales for an input of rank ", in.size());
  Shape out;
  for (size_t d = 0; d < in.size(); ++d) {
    TERRACE_CHECK(scales[d] > 0 && std::isfinite(scales[d]), InvalidArgument, node.describe(),
                  ": scale ", scales[d], " on axis ", d, " must be positive");
    double o = std::floor(double(in[d]) * scales[d]);
    TERRACE_CHECK(o < 9e15, InvalidArgument, node.describe(), ": scale ", scales[d],
                  " makes axis ", d, " too large");
    out.push_back(int64_t(o));
  }
  return out;
}

// Opset 18's `axes`: the axes that roi, scales and sizes speak of (all, in order, by default).
std::vector<int64_t> resize_axes(const Node& node, int64_t rank) {
  if (!node.has_attr("axes")) {
    std::vector<int64_t> all(static_cast<size_t>(rank));
    for (int64_t d = 0; d < rank; ++d) all[size_t(d)] = d;
    return all;
  }
  std::vector<int64_t> axes;
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (int64_t v : node.attr_ints("axes")) {
    int64_t d = normalize_axis(node, v, rank);
    TERRACE_CHECK(!seen[size_t(d)], InvalidModel, node.describe(), ": axis ", v, " is listed twice");
    seen[size_t(d)] = true;
    axes.push_back(d);
  }
  return axes;
}

// Values given for `axes` spread over every dim, `fill` (per dim, its pair for roi) elsewhere.
std::vector<double> per_dim(const Node& node, const std::vector<double>& given, const std::vector<int64_t>& axes,
                            int64_t rank, const char* what, std::vector<double> fill) {
  const size_t per = fill.size() / size_t(rank);  // 1, or 2 for roi (starts, then ends)
  TERRACE_CHECK(given.size() == per * axes.size(), InvalidArgument, node.describe(), ": ", what, " has ",
                given.size(), " values for ", axes.size(), " axes");
  for (size_t k = 0; k < per; ++k)
    for (size_t i = 0; i < axes.size(); ++i) fill[k * size_t(rank) + size_t(axes[i])] = given[k * axes.size() + i];
  return fill;
}

void resize_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Node& node = ctx.node;
  const int64_t rank = x.rank();
  TERRACE_CHECK(rank > 0, InvalidArgument, node.describe(), ": input 'X' is a scalar; Resize needs at least one dim");
  // Opset 10 takes (X, scales); opset 11+ takes (X, roi, scales, sizes).
  bool opset10 = ctx.num_inputs() == 2;
  ResizeAttrs a = opset10 ? ResizeAttrs{mode_of(node)} : resize_attrs(node);
  const std::vector<int64_t> axes = resize_axes(node, rank);
  size_t scales_at = opset10 ? 1 : 2;
  bool has_scales = ctx.has_input(scales_at) && ctx.input(scales_at).numel() > 0;
  bool has_sizes = !opset10 && ctx.has_input(3) && ctx.input(3).numel() > 0;
  TERRACE_CHECK(has_scales != has_sizes, InvalidArgument, node.describe(),
                ": exactly one of scales and sizes must be given");
  std::vector<double> roi;
  if (a.coord == Coord::TfCropAndResize) {
    TERRACE_CHECK(ctx.has_input(1), InvalidArgument, node.describe(), ": tf_crop_and_resize needs roi");
    std::vector<double> fill(size_t(2 * rank), 0.0);
    for (int64_t d = 0; d < rank; ++d) fill[size_t(rank + d)] = 1.0;
    roi = per_dim(node, float_list(ctx.input(1)), axes, rank, "roi", fill);
    for (double v : roi) TERRACE_CHECK(std::isfinite(v), InvalidArgument, node.describe(), ": roi holds ", v);
  }
  Shape out;
  std::vector<double> scales;
  if (has_scales) {
    scales = per_dim(node, float_list(ctx.input(scales_at)), axes, rank, "scales",
                     std::vector<double>(size_t(rank), 1.0));
    out = scaled_shape(node, x.shape(), scales);
  } else {
    std::vector<double> given;
    for (int64_t v : int_list_input(ctx, 3, "sizes")) {
      TERRACE_CHECK(v >= 0, InvalidArgument, node.describe(), ": negative size");
      given.push_back(double(v));
    }
    std::vector<double> in_dims(x.shape().begin(), x.shape().end());
    std::vector<double> sizes = per_dim(node, given, axes, rank, "sizes", in_dims);
    const std::string policy = node.attr_string("keep_aspect_ratio_policy", "stretch");
    TERRACE_CHECK(policy == "stretch" || policy == "not_larger" || policy == "not_smaller", InvalidModel,
                  node.describe(), ": unknown keep_aspect_ratio_policy '", policy, "'");
    if (policy != "stretch") {  // one scale for every listed axis, the smallest or largest asked
      double scale = policy == "not_larger" ? std::numeric_limits<double>::infinity() : 0.0;
      for (int64_t d : axes) {
        TERRACE_CHECK(x.shape()[size_t(d)] > 0, InvalidArgument, node.describe(), ": cannot keep the aspect ratio of an empty axis");
        double r = sizes[size_t(d)] / double(x.shape()[size_t(d)]);
        scale = policy == "not_larger" ? std::min(scale, r) : std::max(scale, r);
      }
      scales.assign(size_t(rank), 1.0);
      for (int64_t d : axes) {
        scales[size_t(d)] = scale;
        sizes[size_t(d)] = std::floor(scale * double(x.shape()[size_t(d)]) + 0.5);
      }
    }
    for (int64_t d = 0; d < rank; ++d) {
      out.push_back(int64_t(sizes[size_t(d)]));
      if (policy == "stretch")
        scales.push_back(x.shape()[size_t(d)] ? sizes[size_t(d)] / double(x.shape()[size_t(d)]) : 1.0);
    }
  }
  ctx.set_output(0, resample(node, a, x, out, scales, roi));
}

// Upsample: scales as an attribute (opset 7) or input (opset 9), asymmetric, nearest rounds down.
void upsample_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  std::vector<double> scales;
  if (ctx.has_input(1)) {
    scales = float_list(ctx.input(1));
  } else {
    for (float s : ctx.node.attr_floats("scales")) scales.push_back(s);
  }
  ResizeAttrs a{mode_of(ctx.node)};
  ctx.set_output(0, resample(ctx.node, a, x, scaled_shape(ctx.node, x.shape(), scales), scales, {}));
}

}  // namespace

void register_shape_resize_kernels(KernelTable& t) {
  t.add(Op::Resize, resize_kernel);
  t.add(Op::Upsample, upsample_kernel);
}

}  // namespace terrace::ops
