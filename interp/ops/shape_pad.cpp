// Pad: constant, reflect, edge and wrap modes, with pads as an input (opset 11+) or attribute, and
// opset 18's axes.
#include "interp/ops/shape_common.h"
#include "interp/shape_rules.h"

namespace terrace::ops {
namespace {

// Where output position i of one padded dim reads from: an input index, or -1 for the constant.
std::vector<int64_t> source_indices(const Node& node, PadMode mode, int64_t dim, int64_t before,
                                    int64_t out_dim) {
  TERRACE_CHECK(mode == PadMode::Constant || dim > 0 || out_dim == 0, InvalidArgument,
                node.describe(), ": cannot pad an empty dim in this mode");
  std::vector<int64_t> map(static_cast<size_t>(out_dim));
  for (int64_t i = 0; i < out_dim; ++i) {
    int64_t j = i - before;
    if (j >= 0 && j < dim) {
      map[size_t(i)] = j;
    } else if (mode == PadMode::Constant) {
      map[size_t(i)] = -1;
    } else if (mode == PadMode::Edge) {
      map[size_t(i)] = std::clamp<int64_t>(j, 0, dim - 1);
    } else if (mode == PadMode::Wrap) {
      map[size_t(i)] = ((j % dim) + dim) % dim;
    } else {  // reflect about the edge elements: period 2 * (dim - 1)
      int64_t period = 2 * (dim - 1);
      int64_t k = period ? ((j % period) + period) % period : 0;
      map[size_t(i)] = k < dim ? k : period - k;
    }
  }
  return map;
}

// Pads, as [begin_0, ..., begin_n, end_0, ..., end_n]. From opset 18 an `axes` input (3) says
// which dims the pads speak of; the others are not padded.
std::vector<int64_t> pads_operand(const KernelContext& ctx, int64_t rank) {
  std::vector<int64_t> pads = ctx.has_input(1) ? int_list_input(ctx, 1, "pads")
                                               : ctx.node.attr_ints("pads");
  if (ctx.has_input(3)) {
    std::vector<int64_t> axes = int_list_input(ctx, 3, "axes");
    TERRACE_CHECK(pads.size() == 2 * axes.size(), InvalidArgument, ctx.node.describe(), ": ", pads.size(),
                  " pads for ", axes.size(), " axes (need ", 2 * axes.size(), ")");
    std::vector<int64_t> all(size_t(2 * rank), 0);
    std::vector<bool> seen(size_t(rank), false);
    for (size_t i = 0; i < axes.size(); ++i) {
      int64_t d = normalize_axis(ctx.node, axes[i], rank);
      TERRACE_CHECK(!seen[size_t(d)], InvalidArgument, ctx.node.describe(), ": axis ", axes[i], " is listed twice");
      seen[size_t(d)] = true;
      all[size_t(d)] = pads[i];
      all[size_t(rank + d)] = pads[axes.size() + i];
    }
    pads = std::move(all);
  }
  TERRACE_CHECK(int64_t(pads.size()) == 2 * rank, InvalidArgument, ctx.node.describe(), ": ",
                pads.size(), " pads for an input of rank ", rank, " (need ", 2 * rank, ")");
  for (int64_t p : pads)  // bounded so that dim + pads cannot overflow
    TERRACE_CHECK(p > -(int64_t(1) << 48) && p < (int64_t(1) << 48), InvalidArgument,
                  ctx.node.describe(), ": pad ", p, " is too large");
  return pads;
}

// The constant fill, in the input's dtype: input 2 from opset 11, the float `value` before.
Tensor pad_constant(const KernelContext& ctx, DType dtype) {
  if (ctx.has_input(2)) {
    const Tensor& c = ctx.input(2);
    TERRACE_CHECK(c.dtype() == dtype && c.numel() == 1, InvalidArgument, ctx.node.describe(),
                  ": constant_value must be one ", dtype_name(dtype), " element");
    return c;
  }
  if (dtype == DType::String) return Tensor::zeros(dtype, {});
  return Tensor::scalar(ctx.node.attr_float("value", 0.0f)).cast(dtype);
}

template <typename T>
void pad_rows(const T* src, T* dst, const T& fill, const Shape& in, const Shape& out,
              const std::vector<std::vector<int64_t>>& maps) {
  size_t r = out.size();  // >= 1
  int64_t inner = out[r - 1];
  if (inner == 0) return;
  int64_t rows = shape_numel(out) / inner;
  auto in_strides = dense_view(in).strides;
  const std::vector<int64_t>& m = maps[r - 1];
#pragma omp parallel for schedule(static) if (rows * inner >= (1 << 15))
  for (int64_t row = 0; row < rows; ++row) {
    T* d = dst + row * inner;
    int64_t off = 0, rest = row;
    bool constant_row = false;
    for (int64_t k = int64_t(r) - 2; k >= 0; --k) {
      int64_t j = maps[size_t(k)][size_t(rest % out[size_t(k)])];
      rest /= out[size_t(k)];
      constant_row |= j < 0;
      off += j * in_strides[size_t(k)];
    }
    if (constant_row) {
      std::fill_n(d, inner, fill);
      continue;
    }
    for (int64_t i = 0; i < inner; ++i) d[i] = m[size_t(i)] < 0 ? fill : src[off + m[size_t(i)]];
  }
}

void pad_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  int64_t r = x.rank();
  PadMode mode = pad_mode(ctx.node);
  std::vector<int64_t> pads = pads_operand(ctx, r);
  if (r == 0) return ctx.set_output(0, x);  // nothing to pad
  Shape out(size_t(r), 0);
  for (int64_t d = 0; d < r; ++d) {
    out[size_t(d)] = x.dim(d) + pads[size_t(d)] + pads[size_t(d + r)];
    TERRACE_CHECK(out[size_t(d)] >= 0, InvalidArgument, ctx.node.describe(), ": pads ",
                  shape_str(pads), " remove more than dim ", d, " of ", shape_str(x.shape()));
  }
  Tensor result = Tensor::empty(x.dtype(), out);  // first, so absurd pads fail before the maps
  std::vector<std::vector<int64_t>> maps;
  for (int64_t d = 0; d < r; ++d)
    maps.push_back(source_indices(ctx.node, mode, x.dim(d), pads[size_t(d)], out[size_t(d)]));
  Tensor fill = pad_constant(ctx, x.dtype());
  dispatch_move(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    pad_rows(elems<T>(x), elems<T>(result), elems<T>(fill)[0], x.shape(), out, maps);
  });
  ctx.set_output(0, std::move(result));
}

// CenterCropPad (opset 18): each listed axis cropped or zero-padded to its size in `shape`,
// centred (an odd difference puts the extra element at the end), as ONNX's reference does.
void center_crop_pad_kernel(KernelContext& ctx) {
  const Node& node = ctx.node;
  const Tensor& x = ctx.input(0);
  const int64_t rank = x.rank();
  std::vector<int64_t> sizes = int_list_input(ctx, 1, "shape");
  std::vector<int64_t> axes;
  if (node.has_attr("axes")) {
    for (int64_t a : node.attr_ints("axes")) axes.push_back(normalize_axis(node, a, rank));
  } else {
    for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
  }
  TERRACE_CHECK(sizes.size() == axes.size(), InvalidArgument, node.describe(), ": shape has ", sizes.size(),
                " values for ", axes.size(), " axes");
  Shape out = x.shape();
  std::vector<std::vector<int64_t>> maps(static_cast<size_t>(rank));  // per axis: source index or -1
  for (int64_t d = 0; d < rank; ++d) {
    maps[size_t(d)].resize(size_t(x.dim(d)));
    for (int64_t i = 0; i < x.dim(d); ++i) maps[size_t(d)][size_t(i)] = i;
  }
  for (size_t k = 0; k < axes.size(); ++k) {
    const int64_t d = axes[k], dim = x.dim(d), want = sizes[k];
    TERRACE_CHECK(want >= 0 && want < (int64_t(1) << 40), InvalidArgument, node.describe(), ": size ", want,
                  " for axis ", d, " is out of range");
    const int64_t shift = (dim - want) / 2;  // crop: skip shift; pad: start -shift in
    out[size_t(d)] = want;
    maps[size_t(d)].assign(size_t(want), -1);
    for (int64_t o = 0; o < want; ++o)
      if (o + shift >= 0 && o + shift < dim) maps[size_t(d)][size_t(o)] = o + shift;
  }
  Tensor y = Tensor::zeros(x.dtype(), out);
  const std::vector<int64_t> in_strides = row_major_strides(x.shape());
  dispatch_move(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* src = elems<T>(x);
    T* dst = elems<T>(y);
    for (int64_t p = 0; p < y.numel(); ++p) {
      int64_t off = 0, rest = p;
      bool inside = true;
      for (int64_t d = rank - 1; d >= 0; --d) {
        const int64_t from = maps[size_t(d)][size_t(rest % out[size_t(d)])];
        rest /= out[size_t(d)];
        inside = inside && from >= 0;
        off += from * in_strides[size_t(d)];
      }
      if (inside) dst[p] = src[off];
    }
  });
  ctx.set_output(0, std::move(y));
}

}  // namespace

void register_shape_pad_kernels(KernelTable& t) {
  t.add(Op::Pad, pad_kernel);
  t.add(Op::CenterCropPad, center_crop_pad_kernel);
}

}  // namespace terrace::ops
