// Reference kernels of the 'misc' family (see interp/ops.def): quantisation here; NMS, signal
// processing, GridSample and random numbers in the other misc_*.cpp files.
#include <algorithm>
#include <cmath>
#include <limits>

#include "interp/ops/misc_kernels.h"

namespace terrace {
namespace ops {

DType dtype_attr(const Node& node, const char* name, int64_t def) {
  int64_t code = node.attr_int(name, def);
  DType t;
  TERRACE_CHECK(dtype_from_onnx(int(code), &t), InvalidModel, node.describe(), ": attribute '",
                name, "' names data type ", code, ", which Terrace does not support");
  return t;
}

namespace {

// The scale and zero point (inputs 1 and 2) of a Quantize/DequantizeLinear node, as float: one
// pair for the whole tensor, one per index along `axis`, or (opset 21's block_size) one per
// block of block_size indices along `axis`, the scale then having x's rank.
struct QuantParams {
  std::vector<float> scale, zero;
  int64_t axis_dim = 1, inner = 1;
  int64_t block = 0;                            // > 0: blocked
  Shape x_shape;
  std::vector<int64_t> scale_strides;           // blocked: per x dim, the stride into scale
  int64_t axis = 0;
  // The pair that element i of x uses.
  size_t channel(int64_t i) const {
    if (block == 0) return size_t(scale.size() > 1 ? (i / inner) % axis_dim : 0);
    int64_t off = 0;
    for (int64_t d = int64_t(x_shape.size()) - 1; d >= 0; --d) {
      int64_t idx = i % x_shape[size_t(d)];
      i /= x_shape[size_t(d)];
      off += (d == axis ? idx / block : idx) * scale_strides[size_t(d)];
    }
    return size_t(off);
  }
};

// Values of a small float or integer parameter tensor as float.
std::vector<float> param_floats(const Tensor& t) {
  std::vector<float> v(size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[size_t(i)] = float(t.get_as_double(i));
  return v;
}

QuantParams quant_params(KernelContext& ctx, const Tensor& x) {
  const Node& node = ctx.node;
  const Tensor& scale = ctx.input(1);
  QuantParams q;
  q.scale = param_floats(scale);
  q.zero = ctx.has_input(2) ? param_floats(ctx.input(2)) : std::vector<float>(q.scale.size(), 0.f);
  TERRACE_CHECK(q.zero.size() == q.scale.size(), InvalidArgument, node.describe(),
                ": zero point has ", q.zero.size(), " elements, scale has ", q.scale.size());
  const int64_t block = node.attr_int("block_size", 0);
  TERRACE_CHECK(block >= 0, InvalidModel, node.describe(), ": block_size ", block, " is negative");
  if (block == 0 && scale.numel() == 1 && scale.rank() <= 1) return q;
  const int64_t axis = normalize_axis(node, node.attr_int("axis", 1), x.rank());
  if (block > 0) {
    TERRACE_CHECK(scale.rank() == x.rank(), InvalidArgument, node.describe(), ": blocked scale of shape ",
                  shape_str(scale.shape()), " must have the rank of input ", shape_str(x.shape()));
    for (int64_t d = 0; d < x.rank(); ++d) {
      int64_t want = d == axis ? (x.dim(d) + block - 1) / block : x.dim(d);
      TERRACE_CHECK(scale.dim(d) == want, InvalidArgument, node.describe(), ": blocked scale of shape ",
                    shape_str(scale.shape()), " does not match input ", shape_str(x.shape()), " in blocks of ",
                    block, " along axis ", axis);
    }
    q.block = block;
    q.axis = axis;
    q.x_shape = x.shape();
    q.scale_strides = row_major_strides(scale.shape());
    return q;
  }
  TERRACE_CHECK(scale.rank() == 1 && scale.numel() == x.dim(axis), InvalidArgument,
                node.describe(), ": per-axis scale of shape ", shape_str(scale.shape()),
                " does not match axis ", axis, " of input ", shape_str(x.shape()));
  q.axis_dim = x.dim(axis);
  for (int64_t d = axis + 1; d < x.rank(); ++d) q.inner *= x.dim(d);
  return q;
}

// Round half to even, add the zero point, saturate to Q's range; NaN gives 0 (as Cast does).
template <typename Q>
Q saturate_quantize(float scaled, float zero) {
  float r = std::nearbyint(scaled) + zero;
  if (r != r) return Q(0);
  r = std::clamp(r, float(std::numeric_limits<Q>::lowest()), float(std::numeric_limits<Q>::max()));
  return Q(r);
}

void quantize_linear(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const QuantParams q = quant_params(ctx, x);
  // The zero point's type, else opset 21's output_dtype, else uint8.
  const DType out_type = ctx.has_input(2) ? ctx.input(2).dtype()
                         : ctx.node.attr_int("output_dtype", 0) ? dtype_attr(ctx.node, "output_dtype", 0)
                                                                : DType::UInt8;
  TERRACE_CHECK(is_integer(out_type) || is_narrow(out_type), InvalidArgument, ctx.node.describe(),
                ": zero point must be an integer, float8, int4/uint4 or float4 type, got ",
                dtype_name(out_type));
  const bool saturate = ctx.node.attr_int("saturate", 1) != 0;
  TERRACE_CHECK(is_float(x.dtype()) || x.dtype() == DType::Int32, InvalidArgument,
                ctx.node.describe(), ": cannot quantize ", dtype_name(x.dtype()));
  Tensor y = Tensor::empty(out_type, x.shape());
  dispatch_dtype(x.dtype(), [&](auto xt) {
    using X = decltype(xt);
    dispatch_dtype<false, true>(out_type, [&](auto qt) {
      using Q = decltype(qt);
      if constexpr (kIsNarrowInt<Q>) {  // int4/uint4: as the integer types, clamped to 4 bits
        const X* src = x.data<X>();
        Q* dst = y.data<Q>();
        for (int64_t i = 0; i < x.numel(); ++i) {
          size_t c = q.channel(i);
          float r = std::nearbyint(float(src[i]) / q.scale[c]) + q.zero[c];
          dst[i] = r != r ? Q(0) : narrow_int_from_double<Q>(r);
        }
      } else if constexpr (kIsNarrow<Q>) {
        // float8/float4: x / scale + zero point (0 in practice), rounded to nearest even into Q,
        // values beyond Q's range saturating unless `saturate` is 0 (float4 always saturates).
        const X* src = x.data<X>();
        Q* dst = y.data<Q>();
        for (int64_t i = 0; i < x.numel(); ++i) {
          size_t c = q.channel(i);
          dst[i] = narrow_from_double<Q>(double(float(src[i]) / q.scale[c] + q.zero[c]), saturate);
        }
      } else if constexpr (std::is_integral_v<Q> && !std::is_same_v<Q, bool>) {
        const X* src = x.data<X>();
        Q* dst = y.data<Q>();
        const int64_t n = x.numel();
#pragma omp parallel for schedule(static) if (n > 65536)
        for (int64_t i = 0; i < n; ++i) {
          size_t c = q.channel(i);
          dst[i] = saturate_quantize<Q>(float(src[i]) / q.scale[c], q.zero[c]);
        }
      }
    });
  });
  ctx.set_output(0, std::move(y));
}

void dequantize_linear(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& scale = ctx.input(1);
  const QuantParams q = quant_params(ctx, x);
  TERRACE_CHECK(is_integer(x.dtype()) || is_narrow(x.dtype()), InvalidArgument, ctx.node.describe(),
                ": cannot dequantize ", dtype_name(x.dtype()));
  TERRACE_CHECK(is_float(scale.dtype()), InvalidArgument, ctx.node.describe(),
                ": scale must be a float type, got ", dtype_name(scale.dtype()));
  Tensor y = Tensor::empty(DType::Float32, x.shape());
  dispatch_dtype<false, true>(x.dtype(), [&](auto xt) {
    using X = decltype(xt);
    const X* src = x.data<X>();
    float* dst = y.data<float>();
    const int64_t n = x.numel();
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) {
      size_t c = q.channel(i);
      if constexpr (kIsNarrow<X>) dst[i] = (float(narrow_to_double(src[i])) - q.zero[c]) * q.scale[c];
      else dst[i] = (float(src[i]) - q.zero[c]) * q.scale[c];
    }
  });
  // The scale's type, or opset 23's output_dtype.
  const DType out = ctx.node.attr_int("output_dtype", 0) ? dtype_attr(ctx.node, "output_dtype", 0) : scale.dtype();
  ctx.set_output(0, out == DType::Float32 ? std::move(y) : y.cast(out));
}

// uint8 quantisation whose range covers the data and zero: scale = (max - min) / 255.
void dynamic_quantize_linear(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  TERRACE_CHECK(x.dtype() == DType::Float32, InvalidArgument, ctx.node.describe(),
                ": input must be float32, got ", dtype_name(x.dtype()));
  const float* src = x.data<float>();
  float lo = 0.f, hi = 0.f;
  for (int64_t i = 0; i < x.numel(); ++i) {
    // An infinity makes the scale infinite and the zero point NaN.
    TERRACE_CHECK(std::isfinite(src[i]), InvalidArgument, ctx.node.describe(),
                  ": input holds ", src[i], " at element ", i);
    lo = std::min(lo, src[i]);
    hi = std::max(hi, src[i]);
  }
  const float scale = (hi - lo) / 255.f;
  // All-zero input: any scale works; keep 0 and map everything to the zero point 0.
  const float zero = scale > 0 ? std::clamp(std::nearbyint(-lo / scale), 0.f, 255.f) : 0.f;
  Tensor y = Tensor::empty(DType::UInt8, x.shape());
  uint8_t* dst = y.data<uint8_t>();
  const int64_t n = x.numel();
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i)
    dst[i] = scale > 0 ? saturate_quantize<uint8_t>(src[i] / scale, zero) : 0;
  ctx.set_output(0, std::move(y));
  ctx.set_output(1, Tensor::scalar<float>(scale));
  ctx.set_output(2, Tensor::scalar<uint8_t>(uint8_t(zero)));
}

}  // namespace
}  // namespace ops

void register_misc_kernels(KernelTable& t) {
  t.add(Op::QuantizeLinear, ops::quantize_linear);
  t.add(Op::DequantizeLinear, ops::dequantize_linear);
  t.add(Op::DynamicQuantizeLinear, ops::dynamic_quantize_linear);
  ops::register_misc_nms_kernel(t);
  ops::register_misc_signal_kernels(t);
  ops::register_misc_grid_sample_kernel(t);
  ops::register_misc_random_kernels(t);
  ops::register_misc_string_kernels(t);
  ops::register_misc_tfidf_kernel(t);
}

}  // namespace terrace
