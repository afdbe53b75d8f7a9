// Kernels that generate tensors from a few parameters: Range, OneHot, EyeLike and Trilu.
#include <cmath>

#include "interp/ops/shape_common.h"

namespace terrace::ops {
namespace {

double scalar_input(const KernelContext& ctx, size_t i, const char* what) {
  const Tensor& t = ctx.input(i);
  TERRACE_CHECK(t.numel() == 1 && t.dtype() != DType::String, InvalidArgument,
                ctx.node.describe(), ": ", what, " must be a numeric scalar, got ",
                dtype_name(t.dtype()), shape_str(t.shape()));
  return t.get_as_double(0);
}

void range_kernel(KernelContext& ctx) {
  const Tensor& start_t = ctx.input(0);
  for (size_t i = 1; i < 3; ++i)
    TERRACE_CHECK(ctx.input(i).dtype() == start_t.dtype(), InvalidArgument, ctx.node.describe(),
                  ": start, limit and delta must share one dtype");
  double start = scalar_input(ctx, 0, "start"), limit = scalar_input(ctx, 1, "limit"),
         delta = scalar_input(ctx, 2, "delta");
  TERRACE_CHECK(delta != 0, InvalidArgument, ctx.node.describe(), ": delta is 0");
  double count = std::ceil((limit - start) / delta);
  TERRACE_CHECK(std::isfinite(count) && count < 4e18, InvalidArgument, ctx.node.describe(),
                ": range of ", count, " elements is too large");
  int64_t n = count > 0 ? int64_t(count) : 0;  // count may be hugely negative: no int64 for it
  Tensor out = Tensor::empty(start_t.dtype(), {n});
  dispatch_dtype(start_t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    // The spec's definition, in the output type: output[i] = start + i * delta.
    T s = start_t.data<T>()[0], d = ctx.input(2).data<T>()[0];
    T* o = out.data<T>();
    for (int64_t i = 0; i < n; ++i) o[i] = T(s + T(i) * d);
  });
  ctx.set_output(0, std::move(out));
}

void one_hot_kernel(KernelContext& ctx) {
  const Tensor& indices = ctx.input(0);
  const Tensor& values = ctx.input(2);
  double depth_v = scalar_input(ctx, 1, "depth");
  TERRACE_CHECK(depth_v >= 1 && depth_v < 9.2e18, InvalidArgument, ctx.node.describe(),
                ": depth must be positive, got ", depth_v);
  TERRACE_CHECK(values.numel() == 2, InvalidArgument, ctx.node.describe(),
                ": values must hold [off, on], got ", values.numel(), " elements");
  int64_t depth = int64_t(depth_v);
  int64_t axis = ctx.node.attr_int("axis", -1), r = indices.rank() + 1;
  TERRACE_CHECK(axis >= -r && axis < r, InvalidArgument, ctx.node.describe(), ": axis ", axis,
                " is out of range for output rank ", r);
  if (axis < 0) axis += r;
  Shape out_shape = indices.shape();
  out_shape.insert(out_shape.begin() + axis, depth);
  int64_t inner = shape_numel(std::span(indices.shape()).subspan(size_t(axis)));
  Tensor out = Tensor::empty(values.dtype(), out_shape);
  fill_from(out, values, 0);
  dispatch_move(values.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* o = elems<T>(out);
    for (int64_t p = 0; p < indices.numel(); ++p) {
      // Indices outside [-depth, depth) leave their row all "off", as the spec says.
      double v = indices.get_as_double(p);
      int64_t i = v < 0 ? int64_t(v) + depth : int64_t(v);
      if (v >= -double(depth) && v < double(depth) && i >= 0 && i < depth)
        o[(p / inner * depth + i) * inner + p % inner] = elems<T>(values)[1];
    }
  });
  ctx.set_output(0, std::move(out));
}

// A tensor of dtype `dtype` holding one element equal to `v`.
Tensor one_element(DType dtype, float v) {
  if (dtype == DType::String) return Tensor::zeros(dtype, {});
  return Tensor::scalar(v).cast(dtype);
}

void eye_like_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  TERRACE_CHECK(x.rank() == 2, InvalidArgument, ctx.node.describe(), ": input must be 2-D, got ",
                shape_str(x.shape()));
  DType dtype = x.dtype();
  if (ctx.node.has_attr("dtype"))
    TERRACE_CHECK(dtype_from_onnx(int(ctx.node.attr_int("dtype")), &dtype), InvalidModel,
                  ctx.node.describe(), ": unsupported dtype ", ctx.node.attr_int("dtype"));
  int64_t rows = x.dim(0), cols = x.dim(1);
  // Beyond [-rows, cols] every k leaves the matrix all zeros; clamping keeps i + k from overflowing.
  int64_t k = std::clamp<int64_t>(ctx.node.attr_int("k", 0), -rows, cols);
  Tensor out = Tensor::empty(dtype, x.shape());
  fill_from(out, one_element(dtype, 0.0f));
  Tensor one = one_element(dtype, 1.0f);
  dispatch_move(dtype, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t i = std::max<int64_t>(0, -k); i < rows && i + k < cols; ++i)
      elems<T>(out)[i * cols + i + k] = elems<T>(one)[0];
  });
  ctx.set_output(0, std::move(out));
}

void trilu_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  TERRACE_CHECK(x.rank() >= 2, InvalidArgument, ctx.node.describe(),
                ": input must have rank >= 2, got ", shape_str(x.shape()));
  int64_t k = 0;
  if (ctx.has_input(1)) {
    std::vector<int64_t> kv = int_list_input(ctx, 1, "k");
    TERRACE_CHECK(kv.size() == 1, InvalidArgument, ctx.node.describe(), ": k must be a scalar");
    k = kv[0];
  }
  bool upper = ctx.node.attr_int("upper", 1) != 0;
  int64_t rows = x.dim(-2), cols = x.dim(-1), mats = rows * cols != 0 ? x.numel() / (rows * cols) : 0;
  k = std::clamp<int64_t>(k, -rows - 1, cols + 1);  // beyond this every k means the same; no overflow
  Tensor out = Tensor::empty(x.dtype(), x.shape());
  Tensor zero = one_element(x.dtype(), 0.0f);
  dispatch_move(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* s = elems<T>(x);
    T* o = elems<T>(out);
    T z = elems<T>(zero)[0];
#pragma omp parallel for schedule(static) if (x.numel() >= (1 << 15))
    for (int64_t r = 0; r < mats * rows; ++r) {
      // Row i keeps columns j with j - i >= k (upper) or j - i <= k (lower).
      int64_t i = r % rows;
      int64_t cut = std::clamp<int64_t>(upper ? i + k : i + k + 1, 0, cols);
      const T* sr = s + r * cols;
      T* orow = o + r * cols;
      if (upper) {
        std::fill_n(orow, cut, z);
        std::copy(sr + cut, sr + cols, orow + cut);
      } else {
        std::copy_n(sr, cut, orow);
        std::fill(orow + cut, orow + cols, z);
      }
    }
  });
  ctx.set_output(0, std::move(out));
}

}  // namespace

void register_shape_gen_kernels(KernelTable& t) {
  t.add(Op::Range, range_kernel);
  t.add(Op::OneHot, one_hot_kernel);
  t.add(Op::EyeLike, eye_like_kernel);
  t.add(Op::Trilu, trilu_kernel);
}

}  // namespace terrace::ops
