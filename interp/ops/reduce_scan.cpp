// CumSum and TopK: ordered walks along one axis, lane by lane.
#include <algorithm>

#include "interp/ops/common.h"
#include "interp/ops/linalg_gemm.h"
#include "interp/ops/reduce_parts.h"

namespace terrace::ops {
namespace {

// A scalar integer input (CumSum's axis, TopK's k), checked.
int64_t scalar_int_input(const KernelContext& ctx, size_t i, const char* what) {
  const Tensor& t = ctx.input(i);
  TERRACE_CHECK(is_integer(t.dtype()) && t.numel() == 1, InvalidArgument, ctx.node.describe(),
                ": ", what, " must be a single integer, got ", dtype_name(t.dtype()), shape_str(t.shape()));
  return t.get_as_int64(0);
}

// Running sums in the accumulator type; exclusive sums leave the element itself out, reverse
// sums run from the end.
void cumsum_kernel(KernelContext& ctx) {
  const Node& node = ctx.node;
  const Tensor& x = ctx.input(0);
  TERRACE_CHECK(is_float(x.dtype()) || is_integer(x.dtype()), InvalidArgument, node.describe(),
                ": needs a numeric input, got ", dtype_name(x.dtype()));
  const int64_t axis = normalize_axis(node, scalar_int_input(ctx, 1, "axis"), x.rank());
  const bool exclusive = node.attr_int("exclusive", 0) != 0, reverse = node.attr_int("reverse", 0) != 0;
  const AxisLanes l = axis_lanes(x.shape(), axis);
  Tensor y = Tensor::empty(x.dtype(), x.shape());
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using Acc = acc_t<T>;
    const T* xd = x.data<T>();
    T* yd = y.data<T>();
    const int64_t step = reverse ? -l.inner : l.inner;
#pragma omp parallel for schedule(static) if (x.numel() > (1 << 15))
    for (int64_t lane = 0; lane < l.count(); ++lane) {
      const int64_t first = l.start(lane) + (reverse ? (l.len - 1) * l.inner : 0);
      Acc acc = 0;
      for (int64_t k = 0, at = first; k < l.len; ++k, at += step) {
        const Acc v = to_acc<Acc>(xd[at]);
        if (!exclusive) acc += v;
        yd[at] = round_to<T>(acc);
        if (exclusive) acc += v;
      }
    }
  });
  ctx.set_output(0, std::move(y));
}

// TopK's order: larger (or smaller) first, NaN beyond every number, ties by lower index.
template <typename V>
bool ranks_before(const std::pair<V, int64_t>& a, const std::pair<V, int64_t>& b, bool largest) {
  const bool an = a.first != a.first, bn = b.first != b.first;
  if (an != bn) return largest ? an : bn;
  if (!an && a.first != b.first) return largest ? a.first > b.first : a.first < b.first;
  return a.second < b.second;
}

void topk_kernel(KernelContext& ctx) {
  const Node& node = ctx.node;
  const Tensor& x = ctx.input(0);
  TERRACE_CHECK(x.rank() > 0 && (is_float(x.dtype()) || is_integer(x.dtype())), InvalidArgument,
                node.describe(), ": needs a numeric input of rank >= 1");
  const int64_t axis = normalize_axis(node, node.attr_int("axis", -1), x.rank());
  const int64_t k = scalar_int_input(ctx, 1, "K");
  TERRACE_CHECK(k >= 0 && k <= x.dim(axis), InvalidArgument, node.describe(), ": K=", k,
                " is outside [0, ", x.dim(axis), "]");
  const bool largest = node.attr_int("largest", 1) != 0;  // `sorted=0` may return any order: sorted is one
  Shape out_shape = x.shape();
  out_shape[size_t(axis)] = k;
  const AxisLanes l = axis_lanes(x.shape(), axis), lo = axis_lanes(out_shape, axis);
  Tensor values = Tensor::empty(x.dtype(), out_shape), indices = Tensor::empty(DType::Int64, out_shape);
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using V = acc_t<T>;
    const T* xd = x.data<T>();
    T* vd = values.data<T>();
    int64_t* id = indices.data<int64_t>();
    parallel_for_catching(l.count(), x.numel() > (1 << 14), [&](int64_t lane) {
      std::vector<std::pair<V, int64_t>> items(size_t(l.len));
      const T* src = xd + l.start(lane);
      for (int64_t j = 0; j < l.len; ++j) items[size_t(j)] = {to_acc<V>(src[j * l.inner]), j};
      std::partial_sort(items.begin(), items.begin() + k, items.end(),
                        [&](const auto& a, const auto& b) { return ranks_before(a, b, largest); });
      const int64_t out0 = lo.start(lane);
      for (int64_t j = 0; j < k; ++j) {
        vd[out0 + j * lo.inner] = src[items[size_t(j)].second * l.inner];
        id[out0 + j * lo.inner] = items[size_t(j)].second;
      }
    });
  });
  ctx.set_output(0, std::move(values));
  ctx.set_output(1, std::move(indices));
}

}  // namespace

void register_scan_kernels(KernelTable& t) {
  t.add(Op::CumSum, cumsum_kernel);
  t.add(Op::TopK, topk_kernel);
}

}  // namespace terrace::ops
