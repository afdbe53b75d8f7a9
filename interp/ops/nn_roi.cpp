// Region-of-interest reference kernels: RoiAlign (avg/max, both coordinate modes) and MaxRoiPool.
#include <algorithm>
#include <cmath>

#include "interp/ops/nn.h"

namespace terrace::ops {
namespace {

// One bilinear sample point: four input positions in a plane and their weights (all zero when
// the point lies outside the feature map).
struct Sample {
  int64_t pos[4] = {0, 0, 0, 0};
  double w[4] = {0, 0, 0, 0};
};

// Bilinear sample at (y, x) on an height x width plane, clamped as ONNX Runtime and Detectron do.
Sample bilinear_sample(double y, double x, int64_t height, int64_t width) {
  Sample s;
  if (!(y >= -1.0 && y <= double(height) && x >= -1.0 && x <= double(width))) return s;  // NaN too
  y = std::max(y, 0.0);
  x = std::max(x, 0.0);
  int64_t y_low = int64_t(y), x_low = int64_t(x), y_high, x_high;
  if (y_low >= height - 1) {
    y_high = y_low = height - 1;
    y = double(y_low);
  } else
    y_high = y_low + 1;
  if (x_low >= width - 1) {
    x_high = x_low = width - 1;
    x = double(x_low);
  } else
    x_high = x_low + 1;
  double ly = y - double(y_low), lx = x - double(x_low), hy = 1 - ly, hx = 1 - lx;
  s.pos[0] = y_low * width + x_low;
  s.pos[1] = y_low * width + x_high;
  s.pos[2] = y_high * width + x_low;
  s.pos[3] = y_high * width + x_high;
  s.w[0] = hy * hx;
  s.w[1] = hy * lx;
  s.w[2] = ly * hx;
  s.w[3] = ly * lx;
  return s;
}

struct RoiAlignParams {
  int64_t out_h = 1, out_w = 1, sampling_ratio = 0;
  double scale = 1;
  bool half_pixel = true, max_mode = false;
};

// RoI coordinates (columns first.. of each row) scaled to the feature map: finite and within
// +-2^31 (no pixel lies beyond, and the integer conversions after would overflow), or
// InvalidArgument naming the RoI.
void check_roi_coordinates(const Node& node, const std::vector<double>& rois, int64_t cols, int64_t first,
                           double scale) {
  constexpr double kLimit = 2147483648.0;
  for (size_t i = 0; i < rois.size(); ++i) {
    if (int64_t(i) % cols < first) continue;
    const double v = rois[i] * scale;
    TERRACE_CHECK(v >= -kLimit && v <= kLimit, InvalidArgument, node.describe(), ": RoI ", int64_t(i) / cols,
                  " has coordinate ", rois[i], " (times spatial_scale ", scale,
                  "): RoI coordinates must be finite and within +-2^31 of the feature map");
  }
}

// Where one RoI's samples lie: its corner, bin size and the sampling grid per bin.
struct RoiGrid {
  double x0 = 0, y0 = 0, bin_h = 0, bin_w = 0;
  int64_t grid_h = 0, grid_w = 0;
};

// The grid of RoI `n` (coordinates checked by check_roi_coordinates); InvalidArgument when its
// samples would exceed kMaxSamples (a RoI far larger than its bins without a sampling_ratio).
RoiGrid roi_grid(const Node& node, const RoiAlignParams& a, const double* roi, int64_t n) {
  constexpr double kMaxSamples = double(int64_t(1) << 22);
  RoiGrid g;
  double offset = a.half_pixel ? 0.5 : 0.0;
  g.x0 = roi[0] * a.scale - offset;
  g.y0 = roi[1] * a.scale - offset;
  double roi_w = roi[2] * a.scale - offset - g.x0, roi_h = roi[3] * a.scale - offset - g.y0;
  if (!a.half_pixel) {  // the legacy mode forces RoIs to be at least 1x1
    roi_w = std::max(roi_w, 1.0);
    roi_h = std::max(roi_h, 1.0);
  }
  g.bin_h = roi_h / double(a.out_h);
  g.bin_w = roi_w / double(a.out_w);
  // A RoI of negative extent (x1 < x0) samples nothing, as in ONNX Runtime's loop.
  const double gh = a.sampling_ratio > 0 ? double(a.sampling_ratio) : std::max(std::ceil(g.bin_h), 0.0);
  const double gw = a.sampling_ratio > 0 ? double(a.sampling_ratio) : std::max(std::ceil(g.bin_w), 0.0);
  TERRACE_CHECK(gh * gw * double(a.out_h) * double(a.out_w) <= kMaxSamples, InvalidArgument, node.describe(),
                ": RoI ", n, " needs ", gh, " x ", gw, " sampling points in each of ", a.out_h, " x ", a.out_w,
                " bins, over the limit of ", int64_t(kMaxSamples), " points per RoI (set sampling_ratio)");
  g.grid_h = int64_t(gh);
  g.grid_w = int64_t(gw);
  return g;
}

// The sample points of every output bin of one RoI, bin by bin (same for all channels).
std::vector<std::vector<Sample>> roi_samples(const RoiAlignParams& a, const RoiGrid& g, int64_t height,
                                             int64_t width) {
  const double x0 = g.x0, y0 = g.y0, bin_h = g.bin_h, bin_w = g.bin_w;
  const int64_t grid_h = g.grid_h, grid_w = g.grid_w;
  std::vector<std::vector<Sample>> bins(size_t(a.out_h * a.out_w));
  for (int64_t ph = 0; ph < a.out_h; ++ph)
    for (int64_t pw = 0; pw < a.out_w; ++pw)
      for (int64_t iy = 0; iy < grid_h; ++iy)
        for (int64_t ix = 0; ix < grid_w; ++ix) {
          double y = y0 + double(ph) * bin_h + (double(iy) + 0.5) * bin_h / double(grid_h);
          double x = x0 + double(pw) * bin_w + (double(ix) + 0.5) * bin_w / double(grid_w);
          bins[size_t(ph * a.out_w + pw)].push_back(bilinear_sample(y, x, height, width));
        }
  return bins;
}

// A bin's value: the mean of its samples, or (max mode, as ONNX Runtime defines it) the largest
// weighted corner value over all samples.
double bin_value(const RoiAlignParams& a, const std::vector<Sample>& samples, const double* plane) {
  if (a.max_mode) {
    double best = 0;
    for (size_t k = 0; k < samples.size(); ++k)
      for (int q = 0; q < 4; ++q) {
        double v = samples[k].w[q] * plane[samples[k].pos[q]];
        if ((k == 0 && q == 0) || v > best) best = v;
      }
    return best;
  }
  double sum = 0;
  for (const Sample& s : samples)
    for (int q = 0; q < 4; ++q) sum += s.w[q] * plane[s.pos[q]];
  return sum / double(std::max<size_t>(samples.size(), 1));
}

// Validates RoIs [num_rois, cols] and their batch indices; returns the RoI values as doubles.
std::vector<double> checked_rois(const Node& node, const Tensor& rois, int64_t cols,
                                 const std::vector<int64_t>& batch_index, int64_t batch) {
  TERRACE_CHECK(rois.rank() == 2 && rois.dim(1) == cols, InvalidArgument, node.describe(),
                ": input rois must have shape [num_rois, ", cols, "], got ",
                shape_str(rois.shape()));
  for (int64_t b : batch_index)
    TERRACE_CHECK(b >= 0 && b < batch, InvalidArgument, node.describe(), ": batch index ", b,
                  " is outside [0, ", batch, ")");
  return tensor_to_doubles(rois);
}

void roi_align_kernel(KernelContext& ctx) {
  const Node& node = ctx.node;
  const Tensor& x = ctx.input(0);
  TERRACE_CHECK(x.rank() == 4, InvalidArgument, node.describe(), ": input X must have rank 4");
  RoiAlignParams a;
  a.out_h = node.attr_int("output_height", 1);
  a.out_w = node.attr_int("output_width", 1);
  a.sampling_ratio = node.attr_int("sampling_ratio", 0);
  a.scale = node.attr_float("spatial_scale", 1.0f);
  std::string mode = node.attr_string("mode", "avg");
  std::string ctm = node.attr_string("coordinate_transformation_mode", "half_pixel");
  TERRACE_CHECK(mode == "avg" || mode == "max", InvalidModel, node.describe(), ": unknown mode '",
                mode, "'");
  TERRACE_CHECK(ctm == "half_pixel" || ctm == "output_half_pixel", InvalidModel, node.describe(),
                ": unknown coordinate_transformation_mode '", ctm, "'");
  TERRACE_CHECK(a.out_h >= 1 && a.out_w >= 1, InvalidModel, node.describe(),
                ": output size must be >= 1");
  a.max_mode = mode == "max";
  a.half_pixel = ctm == "half_pixel";
  std::vector<int64_t> batch_index = ctx.input(2).to_int64_vector();
  std::vector<double> rois = checked_rois(node, ctx.input(1), 4, batch_index, x.dim(0));
  int64_t num = ctx.input(1).dim(0), channels = x.dim(1), height = x.dim(2), width = x.dim(3);
  TERRACE_CHECK(int64_t(batch_index.size()) == num, InvalidArgument, node.describe(),
                ": batch_indices must hold one index per RoI");
  std::vector<double> xv = tensor_to_doubles(x);
  checked_numel(node, {num, channels, a.out_h, a.out_w}, "output_height x output_width");
  std::vector<double> y(static_cast<size_t>(num * channels * a.out_h * a.out_w));
  int64_t bins = a.out_h * a.out_w;
  check_roi_coordinates(node, rois, 4, 0, a.scale);
  std::vector<RoiGrid> grids;
  for (int64_t n = 0; n < num; ++n) grids.push_back(roi_grid(node, a, &rois[size_t(n * 4)], n));
  parallel_for(num, [&](int64_t n) {
    std::vector<std::vector<Sample>> samples = roi_samples(a, grids[size_t(n)], height, width);
    for (int64_t c = 0; c < channels; ++c) {
      const double* plane = &xv[size_t((batch_index[size_t(n)] * channels + c) * height * width)];
      for (int64_t b = 0; b < bins; ++b)
        y[size_t((n * channels + c) * bins + b)] = bin_value(a, samples[size_t(b)], plane);
    }
  });
  ctx.set_output(0, tensor_from_doubles(node, x.dtype(), {num, channels, a.out_h, a.out_w}, y));
}

// MaxRoiPool (Caffe's RoI pooling): the max over each bin of a rounded RoI; empty bins give 0.
void max_roi_pool_kernel(KernelContext& ctx) {
  const Node& node = ctx.node;
  const Tensor& x = ctx.input(0);
  TERRACE_CHECK(x.rank() == 4, InvalidArgument, node.describe(), ": input X must have rank 4");
  std::vector<int64_t> pooled = node.attr_ints("pooled_shape");
  TERRACE_CHECK(pooled.size() == 2 && pooled[0] >= 1 && pooled[1] >= 1, InvalidModel,
                node.describe(), ": attribute 'pooled_shape' must hold two positive values");
  double scale = node.attr_float("spatial_scale", 1.0f);
  const Tensor& rois_t = ctx.input(1);
  TERRACE_CHECK(rois_t.rank() == 2 && rois_t.dim(1) == 5, InvalidArgument, node.describe(),
                ": input rois must have shape [num_rois, 5], got ", shape_str(rois_t.shape()));
  const int64_t num = rois_t.dim(0);
  std::vector<int64_t> batch_index(static_cast<size_t>(num));
  for (int64_t n = 0; n < num; ++n) {
    const double b = rois_t.get_as_double(n * 5);  // a float: checked before it becomes an index
    TERRACE_CHECK(b >= 0 && b < double(x.dim(0)), InvalidArgument, node.describe(), ": RoI ", n,
                  " has batch index ", b, ", outside [0, ", x.dim(0), ")");
    batch_index[size_t(n)] = int64_t(b);
  }
  std::vector<double> rois = checked_rois(node, rois_t, 5, batch_index, x.dim(0));
  check_roi_coordinates(node, rois, 5, 1, scale);
  int64_t channels = x.dim(1), height = x.dim(2), width = x.dim(3), ph = pooled[0], pw = pooled[1];
  std::vector<double> xv = tensor_to_doubles(x);
  checked_numel(node, {num, channels, ph, pw}, "attribute pooled_shape");
  std::vector<double> y(static_cast<size_t>(num * channels * ph * pw));
  parallel_for(num * channels, [&](int64_t nc) {
    int64_t n = nc / channels, c = nc % channels;
    const double* roi = &rois[size_t(n * 5)];
    int64_t x0 = int64_t(std::round(roi[1] * scale)), y0 = int64_t(std::round(roi[2] * scale));
    int64_t x1 = int64_t(std::round(roi[3] * scale)), y1 = int64_t(std::round(roi[4] * scale));
    double bin_h = double(std::max<int64_t>(y1 - y0 + 1, 1)) / double(ph);
    double bin_w = double(std::max<int64_t>(x1 - x0 + 1, 1)) / double(pw);
    const double* plane = &xv[size_t((batch_index[size_t(n)] * channels + c) * height * width)];
    for (int64_t i = 0; i < ph; ++i)
      for (int64_t j = 0; j < pw; ++j) {
        auto edge = [](double v, int64_t start, int64_t limit) {
          return std::clamp(int64_t(v) + start, int64_t(0), limit);
        };
        int64_t hs = edge(std::floor(double(i) * bin_h), y0, height);
        int64_t he = edge(std::ceil(double(i + 1) * bin_h), y0, height);
        int64_t ws = edge(std::floor(double(j) * bin_w), x0, width);
        int64_t we = edge(std::ceil(double(j + 1) * bin_w), x0, width);
        double best = (he <= hs || we <= ws) ? 0.0 : -INFINITY;
        for (int64_t h = hs; h < he; ++h)
          for (int64_t w = ws; w < we; ++w) best = std::max(best, plane[h * width + w]);
        y[size_t((nc * ph + i) * pw + j)] = best;
      }
  });
  ctx.set_output(0, tensor_from_doubles(node, x.dtype(), {num, channels, ph, pw}, y));
}

}  // namespace

void register_nn_roi_kernels(KernelTable& t) {
  t.add(Op::RoiAlign, roi_align_kernel);
  t.add(Op::MaxRoiPool, max_roi_pool_kernel);
}

}  // namespace terrace::ops
