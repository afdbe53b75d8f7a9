// Pad: constant, reflect, edge and wrap modes, with pads as an input (opset 11+) or attribute.
#include "interp/ops/shape_common.h"

namespace terrace::ops {
namespace {

enum class PadMode { Constant, Reflect, Edge, Wrap };

PadMode pad_mode(const Node& node) {
  std::string m = node.attr_string("mode", "constant");
  if (m == "constant") return PadMode::Constant;
  if (m == "reflect") return PadMode::Reflect;
  if (m == "edge") return PadMode::Edge;
  if (m == "wrap") return PadMode::Wrap;
  fail(ErrorCode::InvalidModel, node.describe(), ": unknown mode '", m, "'");
}

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

// Pads, as [begin_0, ..., begin_n, end_0, ..., end_n].
std::vector<int64_t> pads_operand(const KernelContext& ctx, int64_t rank) {
  std::vector<int64_t> pads = ctx.has_input(1) ? int_list_input(ctx, 1, "pads")
                                               : ctx.node.attr_ints("pads");
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

}  // namespace

void register_shape_pad_kernels(KernelTable& t) { t.add(Op::Pad, pad_kernel); }

}  // namespace terrace::ops
