// Normalization reference kernels: BatchNormalization, InstanceNormalization, LayerNormalization,
// MeanVarianceNormalization, LpNormalization (built on one "groups of elements" helper) and LRN.
#include <cmath>

#include "interp/ops/nn.h"

namespace terrace::ops {
namespace {

// The elements of a tensor split into groups that share their indices on the kept axes and
// differ on the reduced ones. Each group is visited as runs of `inner` contiguous elements (the
// reduced trailing axes), one run per index of the other reduced axes (`outer`).
struct AxisGroups {
  Shape kept_shape;
  std::vector<int64_t> kept_strides;
  Shape outer_shape;
  std::vector<int64_t> outer_strides;
  int64_t inner = 1;
  int64_t count = 1;       // number of groups
  int64_t group_size = 1;  // elements per group

  int64_t base(int64_t g) const {
    int64_t off = 0;
    for (int64_t d = int64_t(kept_shape.size()) - 1; d >= 0; --d) {
      off += (g % kept_shape[size_t(d)]) * kept_strides[size_t(d)];
      g /= kept_shape[size_t(d)];
    }
    return off;
  }
  // Calls f(element offset, index within the group) for each element of group g, in a fixed order.
  template <typename F>
  void visit(int64_t g, F&& f) const {
    int64_t b = base(g);
    if (outer_shape.empty()) {  // one contiguous run (LayerNorm, InstanceNorm): the hot case
      for (int64_t j = 0; j < inner; ++j) f(b + j, j);
      return;
    }
    int64_t k = 0;
    for (StridedIter it(outer_shape, {outer_strides}); !it.done(); it.next())
      for (int64_t j = 0; j < inner; ++j) f(b + it.offset(0) + j, k++);
  }
};

AxisGroups split_axes(const Shape& shape, const std::vector<bool>& reduced) {
  AxisGroups s;
  std::vector<int64_t> strides = row_major_strides(shape);
  size_t suffix = shape.size();  // reduced trailing axes form the contiguous inner run
  while (suffix > 0 && reduced[suffix - 1]) s.inner *= shape[--suffix];
  for (size_t d = 0; d < shape.size(); ++d) {
    if (!reduced[d]) {
      s.kept_shape.push_back(shape[d]);
      s.kept_strides.push_back(strides[d]);
      s.count *= shape[d];
    } else {
      s.group_size *= shape[d];
      if (d < suffix) {
        s.outer_shape.push_back(shape[d]);
        s.outer_strides.push_back(strides[d]);
      }
    }
  }
  return s;
}

// Reduced-axis mask from a list of (possibly negative) axes. normalize_axis lets a scalar have
// axis 0; a scalar has no axis to normalize over, so that is refused here.
std::vector<bool> axis_mask(const Node& node, const std::vector<int64_t>& axes, int64_t rank) {
  std::vector<bool> mask(size_t(rank), false);
  for (int64_t a : axes) {
    TERRACE_CHECK(rank > 0, InvalidModel, node.describe(), ": axis ", a, " is out of range for a scalar input");
    mask[size_t(normalize_axis(node, a, rank))] = true;
  }
  return mask;
}

struct Moments {
  double mean = 0, var = 0;  // population variance
};

// Mean and variance of one group in double, in two passes (no cancellation from E[x^2]-E[x]^2).
template <typename T>
Moments group_moments(const AxisGroups& s, const T* x, int64_t g) {
  Moments m;
  if (s.group_size == 0) return m;
  double sum = 0;
  s.visit(g, [&](int64_t i, int64_t) { sum += double(x[i]); });
  m.mean = sum / double(s.group_size);
  double sq = 0;
  s.visit(g, [&](int64_t i, int64_t) {
    double d = double(x[i]) - m.mean;
    sq += d * d;
  });
  m.var = sq / double(s.group_size);
  return m;
}

// Writes y = f(x, group g, index within group) for every element, in parallel over groups.
template <typename T, typename F>
void map_groups(const AxisGroups& s, const T* x, T* y, F&& f) {
  parallel_for(s.count, [&](int64_t g) {
    s.visit(g, [&](int64_t i, int64_t k) { y[i] = T(f(double(x[i]), g, k)); });
  });
}

// A per-channel parameter tensor read as doubles, checked to hold `n` floating-point values.
std::vector<double> param_values(const KernelContext& ctx, size_t input, int64_t n,
                                 const char* what) {
  const Tensor& t = ctx.input(input);
  TERRACE_CHECK(t.numel() == n, InvalidArgument, ctx.node.describe(), ": ", what, " must hold ", n,
                " values, got shape ", shape_str(t.shape()));
  check_float(ctx.node, t.dtype(), what);
  return tensor_to_doubles(t);
}

// Per (n, c) statistics of an [N, C, ...] tensor (InstanceNorm), or per c (BatchNorm training).
AxisGroups channel_groups(const Shape& shape, bool per_sample) {
  std::vector<bool> reduced(shape.size(), true);
  reduced[1] = false;
  if (per_sample) reduced[0] = false;
  return split_axes(shape, reduced);
}

// 1 / sqrt(var + eps) of each group, computed once rather than per element.
std::vector<double> inverse_std(const std::vector<Moments>& m, double eps) {
  std::vector<double> r(m.size());
  for (size_t g = 0; g < m.size(); ++g) r[g] = 1.0 / std::sqrt(m[g].var + eps);
  return r;
}

// y = (x - mean) / sqrt(var + eps) * scale + bias, with (mean, var) per group and scale/bias per
// channel, where channel_of maps a group to its channel.
template <typename ChannelOf>
void normalize_channels(KernelContext& ctx, const AxisGroups& s, const std::vector<Moments>& m,
                        double eps, ChannelOf channel_of) {
  const Tensor& x = ctx.input(0);
  int64_t channels = x.dim(1);
  std::vector<double> scale = param_values(ctx, 1, channels, "input scale");
  std::vector<double> bias = param_values(ctx, 2, channels, "input B");
  std::vector<double> inv_std = inverse_std(m, eps);
  Tensor y = Tensor::empty(x.dtype(), x.shape());
  dispatch_float(ctx.node, x.dtype(), "input X", [&](auto tag) {
    using T = decltype(tag);
    map_groups(s, x.data<T>(), y.data<T>(), [&](double v, int64_t g, int64_t) {
      size_t c = size_t(channel_of(g));
      return (v - m[size_t(g)].mean) * inv_std[size_t(g)] * scale[c] + bias[c];
    });
  });
  ctx.set_output(0, std::move(y));
}

template <typename T>
std::vector<Moments> all_moments(const AxisGroups& s, const T* x) {
  std::vector<Moments> m(size_t(s.count));
  parallel_for(s.count, [&](int64_t g) { m[size_t(g)] = group_moments(s, x, g); });
  return m;
}

std::vector<Moments> moments_of(const Node& node, const AxisGroups& s, const Tensor& x) {
  return dispatch_float(node, x.dtype(), "input X",
                        [&](auto tag) { return all_moments(s, x.data<decltype(tag)>()); });
}

void batch_norm_kernel(KernelContext& ctx) {
  const Node& node = ctx.node;
  const Tensor& x = ctx.input(0);
  check_min_rank(node, x, 2, "input X");
  double eps = node.attr_float("epsilon", 1e-5f);
  int64_t channels = x.dim(1);
  // Opsets 9-13 have no training_mode: asking for the statistics outputs means training.
  bool training = node.attr_int("training_mode", 0) != 0;
  for (size_t i = 1; i < 5; ++i) training = training || ctx.wants_output(i);
  std::vector<double> mean = param_values(ctx, 3, channels, "input mean");
  std::vector<double> var = param_values(ctx, 4, channels, "input var");
  AxisGroups s = channel_groups(x.shape(), /*per_sample=*/true);
  std::vector<Moments> m(size_t(s.count));
  if (!training) {
    for (int64_t g = 0; g < s.count; ++g)
      m[size_t(g)] = {mean[size_t(g % channels)], var[size_t(g % channels)]};
    normalize_channels(ctx, s, m, eps, [channels](int64_t g) { return g % channels; });
    return;
  }
  // Training: normalize with the batch's statistics and update the running ones.
  AxisGroups per_channel = channel_groups(x.shape(), /*per_sample=*/false);
  std::vector<Moments> batch = moments_of(node, per_channel, x);
  normalize_channels(ctx, per_channel, batch, eps, [](int64_t c) { return c; });
  double momentum = node.attr_float("momentum", 0.9f);
  std::vector<double> batch_mean(mean.size()), batch_var(var.size());
  for (size_t c = 0; c < size_t(channels); ++c) {
    batch_mean[c] = batch[c].mean;
    batch_var[c] = batch[c].var;
    mean[c] = mean[c] * momentum + batch[c].mean * (1 - momentum);
    var[c] = var[c] * momentum + batch[c].var * (1 - momentum);
  }
  // Outputs: running mean and variance, then (opsets 9-13 only) the batch's own statistics.
  const std::vector<double>* stats[] = {&mean, &var, &batch_mean, &batch_var};
  for (size_t i = 0; i < 4; ++i) {
    DType dtype = i < 2 ? ctx.input(3 + i).dtype() : x.dtype();  // running stats have type U
    if (ctx.wants_output(i + 1))
      ctx.set_output(i + 1, tensor_from_doubles(node, dtype, {channels}, *stats[i]));
  }
}

void instance_norm_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  check_min_rank(ctx.node, x, 3, "input X");
  AxisGroups s = channel_groups(x.shape(), /*per_sample=*/true);
  int64_t channels = x.dim(1);
  normalize_channels(ctx, s, moments_of(ctx.node, s, x), ctx.node.attr_float("epsilon", 1e-5f),
                     [channels](int64_t g) { return g % channels; });
}

// A LayerNormalization parameter broadcast (unidirectionally) to the normalized shape.
std::vector<double> broadcast_param(const KernelContext& ctx, size_t input, const Shape& norm,
                                    const char* what) {
  const Tensor& t = ctx.input(input);
  TERRACE_CHECK(
      t.rank() <= int64_t(norm.size()) && broadcast_shapes(ctx.node, t.shape(), norm) == norm,
      InvalidArgument, ctx.node.describe(), ": ", what, " of shape ", shape_str(t.shape()),
      " does not broadcast to ", shape_str(norm));
  std::vector<double> v(static_cast<size_t>(shape_numel(norm)));
  for (StridedIter it(norm, {broadcast_strides(t.shape(), norm)}); !it.done(); it.next())
    v[size_t(it.pos())] = t.get_as_double(it.offset(0));
  return v;
}

void layer_norm_kernel(KernelContext& ctx) {
  const Node& node = ctx.node;
  const Tensor& x = ctx.input(0);
  check_min_rank(node, x, 1, "input X");
  int64_t axis = normalize_axis(node, node.attr_int("axis", -1), x.rank());
  double eps = node.attr_float("epsilon", 1e-5f);
  DType stash = DType::Float32;
  TERRACE_CHECK(dtype_from_onnx(int(node.attr_int("stash_type", 1)), &stash) && is_float(stash),
                InvalidModel, node.describe(), ": stash_type must be a floating-point type");
  Shape norm(x.shape().begin() + axis, x.shape().end());
  std::vector<double> scale = broadcast_param(ctx, 1, norm, "input Scale");
  std::vector<double> bias(scale.size(), 0.0);
  if (ctx.has_input(2)) bias = broadcast_param(ctx, 2, norm, "input B");

  std::vector<bool> reduced(size_t(x.rank()), false);
  for (int64_t d = axis; d < x.rank(); ++d) reduced[size_t(d)] = true;
  AxisGroups s = split_axes(x.shape(), reduced);
  std::vector<Moments> m = moments_of(node, s, x);
  std::vector<double> inv_std = inverse_std(m, eps);
  Tensor y = Tensor::empty(x.dtype(), x.shape());
  dispatch_float(node, x.dtype(), "input X", [&](auto tag) {
    using T = decltype(tag);
    map_groups(s, x.data<T>(), y.data<T>(), [&](double v, int64_t g, int64_t k) {
      return (v - m[size_t(g)].mean) * inv_std[size_t(g)] * scale[size_t(k)] + bias[size_t(k)];
    });
  });
  ctx.set_output(0, std::move(y));

  // Mean and InvStdDev keep X's rank, with the normalized dims set to 1.
  Shape stat_shape = x.shape();
  for (int64_t d = axis; d < x.rank(); ++d) stat_shape[size_t(d)] = 1;
  std::vector<double> means(m.size());
  for (size_t g = 0; g < m.size(); ++g) means[g] = m[g].mean;
  if (ctx.wants_output(1)) ctx.set_output(1, tensor_from_doubles(node, stash, stat_shape, means));
  if (ctx.wants_output(2)) ctx.set_output(2, tensor_from_doubles(node, stash, stat_shape, inv_std));
}

void mvn_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  AxisGroups s =
      split_axes(x.shape(), axis_mask(ctx.node, ctx.node.attr_ints("axes", {0, 2, 3}), x.rank()));
  std::vector<Moments> m = moments_of(ctx.node, s, x);
  constexpr double kEpsilon = 1e-9;  // the ONNX function body adds it to the standard deviation
  Tensor y = Tensor::empty(x.dtype(), x.shape());
  dispatch_float(ctx.node, x.dtype(), "input X", [&](auto tag) {
    using T = decltype(tag);
    map_groups(s, x.data<T>(), y.data<T>(), [&](double v, int64_t g, int64_t) {
      return (v - m[size_t(g)].mean) / (std::sqrt(m[size_t(g)].var) + kEpsilon);
    });
  });
  ctx.set_output(0, std::move(y));
}

void lp_norm_kernel(KernelContext& ctx) {
  const Node& node = ctx.node;
  const Tensor& x = ctx.input(0);
  check_min_rank(node, x, 1, "input X");
  int64_t p = node.attr_int("p", 2);
  TERRACE_CHECK(p == 1 || p == 2, InvalidModel, node.describe(),
                ": attribute 'p' must be 1 or 2, got ", p);
  AxisGroups s = split_axes(x.shape(), axis_mask(node, {node.attr_int("axis", -1)}, x.rank()));
  Tensor y = Tensor::empty(x.dtype(), x.shape());
  dispatch_float(node, x.dtype(), "input X", [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    std::vector<double> norms(static_cast<size_t>(s.count));
    parallel_for(s.count, [&](int64_t g) {
      double acc = 0;
      s.visit(g, [&](int64_t i, int64_t) {
        double v = double(xp[i]);
        acc += p == 1 ? std::fabs(v) : v * v;
      });
      norms[size_t(g)] = p == 1 ? acc : std::sqrt(acc);
    });
    // A zero vector stays zero rather than becoming NaN.
    map_groups(s, xp, y.data<T>(), [&](double v, int64_t g, int64_t) {
      return norms[size_t(g)] == 0 ? 0.0 : v / norms[size_t(g)];
    });
  });
  ctx.set_output(0, std::move(y));
}

// LRN: each element divided by a power of the sum of squares over a window of nearby channels.
void lrn_kernel(KernelContext& ctx) {
  const Node& node = ctx.node;
  const Tensor& x = ctx.input(0);
  check_min_rank(node, x, 2, "input X");
  TERRACE_CHECK(node.has_attr("size"), InvalidModel, node.describe(),
                ": attribute 'size' is required");
  int64_t size = node.attr_int("size");
  TERRACE_CHECK(size >= 1, InvalidModel, node.describe(), ": attribute 'size' must be >= 1");
  double alpha = node.attr_float("alpha", 1e-4f), beta = node.attr_float("beta", 0.75f);
  double bias = node.attr_float("bias", 1.0f);
  int64_t channels = x.dim(1), plane = x.numel() / std::max<int64_t>(1, x.dim(0) * channels);
  int64_t before = (size - 1) / 2, after = size - 1 - before;
  Tensor y = Tensor::empty(x.dtype(), x.shape());
  dispatch_float(node, x.dtype(), "input X", [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    parallel_for(x.dim(0) * channels, [&](int64_t nc) {
      int64_t n = nc / channels, c = nc % channels;
      int64_t lo = std::max<int64_t>(0, c - before), hi = std::min(channels - 1, c + after);
      for (int64_t i = 0; i < plane; ++i) {
        double sq = 0;
        for (int64_t k = lo; k <= hi; ++k) {
          double v = double(xp[(n * channels + k) * plane + i]);
          sq += v * v;
        }
        yp[nc * plane + i] =
            T(double(xp[nc * plane + i]) / std::pow(bias + alpha / double(size) * sq, beta));
      }
    });
  });
  ctx.set_output(0, std::move(y));
}

// GroupNormalization: channels in num_groups groups, each normalised over its channels and
// spatial dims. Opset 18 scales and shifts per group, opset 21 per channel.
void group_norm_kernel(KernelContext& ctx) {
  const Node& node = ctx.node;
  const Tensor& x = ctx.input(0);
  TERRACE_CHECK(is_float(x.dtype()) && x.rank() >= 2, InvalidArgument, node.describe(),
                ": X must be a float tensor [N, C, ...]");
  const int64_t groups = node.attr_int("num_groups");
  const int64_t n = x.dim(0), c = x.dim(1);
  TERRACE_CHECK(groups > 0 && c % groups == 0, InvalidArgument, node.describe(), ": num_groups ", groups,
                " must divide the ", c, " channels");
  const bool per_channel = ctx.opset() >= 21;
  const int64_t params = per_channel ? c : groups;
  const Tensor& scale = ctx.input(1);
  const Tensor& bias = ctx.input(2);
  TERRACE_CHECK(scale.numel() == params && bias.numel() == params, InvalidArgument, node.describe(), ": scale and bias need ",
                params, " values (one per ", per_channel ? "channel" : "group", ")");
  const double eps = node.attr_float("epsilon", 1e-5f);
  const int64_t plane = c ? x.numel() / std::max<int64_t>(n * c, 1) : 0, per_group = c / groups * plane;
  const Tensor xd = x.cast(DType::Float64);
  const double* src = xd.data<double>();
  std::vector<double> y(size_t(x.numel()));
  for (int64_t g = 0; g < n * groups; ++g) {
    const double* xs = src + g * per_group;
    double mean = 0, var = 0;
    for (int64_t i = 0; i < per_group; ++i) mean += xs[i];
    mean /= double(std::max<int64_t>(per_group, 1));
    for (int64_t i = 0; i < per_group; ++i) var += (xs[i] - mean) * (xs[i] - mean);
    var /= double(std::max<int64_t>(per_group, 1));
    const double inv = 1 / std::sqrt(var + eps);
    for (int64_t i = 0; i < per_group; ++i) {
      const int64_t ch = (g % groups) * (c / groups) + i / std::max<int64_t>(plane, 1);
      const int64_t p = per_channel ? ch : g % groups;
      y[size_t(g * per_group + i)] = (xs[i] - mean) * inv * scale.get_as_double(p) + bias.get_as_double(p);
    }
  }
  ctx.set_output(0, Tensor::from_vector<double>(x.shape(), y).cast(x.dtype()));
}

}  // namespace

void register_nn_norm_kernels(KernelTable& t) {
  t.add(Op::GroupNormalization, group_norm_kernel);
  t.add(Op::BatchNormalization, batch_norm_kernel);
  t.add(Op::InstanceNormalization, instance_norm_kernel);
  t.add(Op::LayerNormalization, layer_norm_kernel);
  t.add(Op::MeanVarianceNormalization, mvn_kernel);
  t.add(Op::LpNormalization, lp_norm_kernel);
  t.add(Op::LRN, lrn_kernel);
}

}  // namespace terrace::ops
