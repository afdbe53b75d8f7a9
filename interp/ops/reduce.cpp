// Reference kernels of the 'reduce' family (see interp/ops.def): the Reduce* ops and
// ArgMax/ArgMin here; Softmax-like ops in reduce_softmax.cpp, CumSum/TopK in reduce_scan.cpp.
#include <limits>

#include "interp/ops/common.h"
#include "interp/ops/linalg_gemm.h"
#include "interp/ops/reduce_parts.h"

namespace terrace {
namespace ops {

AxisLanes axis_lanes(const Shape& shape, int64_t axis, bool coerce_2d) {
  AxisLanes l;
  for (int64_t d = 0; d < int64_t(shape.size()); ++d) {
    if (d < axis) l.outer *= shape[size_t(d)];
    else if (d == axis || coerce_2d) l.len *= shape[size_t(d)];
    else l.inner *= shape[size_t(d)];
  }
  return l;
}

}  // namespace ops

namespace {
using namespace ops;

// A reduction laid out for the loops: the output is [outer (kept dims, merged order), inner]
// where `inner` is the trailing run of kept dims (contiguous in the input), and every output
// element sums over the reduced index combinations at `red_off`, in row-major order.
struct ReducePlan {
  Shape out_shape;
  Shape outer_dims;                  // kept dims before the inner run
  std::vector<int64_t> outer_strides;  // their input strides
  int64_t inner = 1;
  std::vector<int64_t> red_off;
  int64_t outer_count() const { return shape_numel(outer_dims); }
};

// The axes to reduce, from the `axes` input (ReduceSum-13, all at 18) or attribute; empty
// means all axes, unless noop_with_empty_axes, which reduces none.
std::vector<bool> reduced_axes(const KernelContext& ctx, int64_t rank) {
  const Node& node = ctx.node;
  const std::vector<int64_t> axes =
      ctx.has_input(1) ? ctx.input(1).to_int64_vector() : node.attr_ints("axes", {});
  // Empty axes reduce all dims, or none with noop_with_empty_axes.
  if (axes.empty()) return std::vector<bool>(size_t(rank), node.attr_int("noop_with_empty_axes", 0) == 0);
  std::vector<bool> mask(size_t(rank), false);
  for (int64_t a : axes) {
    const int64_t n = normalize_axis(node, a, rank);
    TERRACE_CHECK(!mask[size_t(n)], InvalidModel, node.describe(), ": axis ", a,
                  " is repeated");
    mask[size_t(n)] = true;
  }
  return mask;
}

ReducePlan plan_reduce(const Shape& shape, const std::vector<bool>& reduced, bool keepdims) {
  ReducePlan p;
  const int64_t rank = int64_t(shape.size());
  const auto strides = row_major_strides(shape);
  int64_t inner_from = rank;  // first dim of the trailing kept run
  while (inner_from > 0 && !reduced[size_t(inner_from - 1)]) --inner_from;
  Shape red_dims;
  std::vector<int64_t> red_strides;
  for (int64_t d = 0; d < rank; ++d) {
    const size_t ud = size_t(d);
    if (reduced[ud]) {
      red_dims.push_back(shape[ud]);
      red_strides.push_back(strides[ud]);
      if (keepdims) p.out_shape.push_back(1);
      continue;
    }
    p.out_shape.push_back(shape[ud]);
    if (d >= inner_from) p.inner *= shape[ud];
    else {
      p.outer_dims.push_back(shape[ud]);
      p.outer_strides.push_back(strides[ud]);
    }
  }
  for (StridedIter it(red_dims, {red_strides}); !it.done(); it.next()) p.red_off.push_back(it.offset(0));
  return p;
}

// One reduction: acc = fold(init, map(x)) over the reduced elements, y = finish(acc, count, o).
// Outputs are independent, so they split across threads; each sums in red_off order.
template <typename T, typename Acc, typename Map, typename Finish, typename Fold>
void run_reduce(const ReducePlan& p, const T* x, T* y, Acc init, Map map, Finish finish, Fold fold) {
  constexpr int64_t kBlock = 256;
  const int64_t outer = p.outer_count(), blocks = (p.inner + kBlock - 1) / kBlock;
  const int64_t count = int64_t(p.red_off.size());
#pragma omp parallel for schedule(static) if (outer * p.inner * count > (1 << 15))
  for (int64_t u = 0; u < outer * blocks; ++u) {
    const int64_t o = u / blocks, i0 = (u % blocks) * kBlock, n = std::min(kBlock, p.inner - i0);
    int64_t base = i0, rem = o;
    for (size_t d = p.outer_dims.size(); d-- > 0;) {
      base += (rem % p.outer_dims[d]) * p.outer_strides[d];
      rem /= p.outer_dims[d];
    }
    const int64_t out0 = o * p.inner + i0;
    Acc acc[kBlock];
    for (int64_t i = 0; i < n; ++i) acc[i] = init;
    for (int64_t r : p.red_off) {
      const T* src = x + base + r;
      for (int64_t i = 0; i < n; ++i) acc[i] = fold(acc[i], map(src[i], out0 + i));
    }
    for (int64_t i = 0; i < n; ++i) y[out0 + i] = finish(acc[i], count, out0 + i);
  }
}

constexpr auto fold_sum = [](auto a, auto v) { return a + v; };
constexpr auto fold_prod = [](auto a, auto v) { return a * v; };
// Max/min propagate NaN, as numpy does.
constexpr auto fold_max = [](auto a, auto v) { return (v > a || v != v) && a == a ? v : a; };
constexpr auto fold_min = [](auto a, auto v) { return (v < a || v != v) && a == a ? v : a; };

template <typename Acc> constexpr Acc lowest() {
  return std::numeric_limits<Acc>::has_infinity ? -std::numeric_limits<Acc>::infinity()
                                                : std::numeric_limits<Acc>::lowest();
}
template <typename Acc> constexpr Acc highest() {
  return std::numeric_limits<Acc>::has_infinity ? std::numeric_limits<Acc>::infinity()
                                                : std::numeric_limits<Acc>::max();
}

template <Op op, typename T>
void reduce_typed(const ReducePlan& p, const Tensor& xt, Tensor& yt) {
  using Acc = acc_t<T>;
  const T* x = xt.data<T>();
  T* y = yt.data<T>();
  auto id = [](T v, int64_t) { return to_acc<Acc>(v); };
  auto sq = [](T v, int64_t) { Acc a = to_acc<Acc>(v); return a * a; };
  auto ab = [](T v, int64_t) { Acc a = to_acc<Acc>(v); return a < 0 ? Acc(0) - a : a; };
  auto keep = [](Acc a, int64_t, int64_t) { return round_to<T>(a); };
  auto as_double = [](auto f) {  // finishes computed in double (integers truncate)
    return [f](Acc a, int64_t n, int64_t) { return round_to<T>(f(double(a), n)); };
  };
  if constexpr (op == Op::ReduceSum) run_reduce(p, x, y, Acc(0), id, keep, fold_sum);
  else if constexpr (op == Op::ReduceSumSquare) run_reduce(p, x, y, Acc(0), sq, keep, fold_sum);
  else if constexpr (op == Op::ReduceL1) run_reduce(p, x, y, Acc(0), ab, keep, fold_sum);
  else if constexpr (op == Op::ReduceProd) run_reduce(p, x, y, Acc(1), id, keep, fold_prod);
  else if constexpr (op == Op::ReduceMax) run_reduce(p, x, y, lowest<Acc>(), id, keep, fold_max);
  else if constexpr (op == Op::ReduceMin) run_reduce(p, x, y, highest<Acc>(), id, keep, fold_min);
  else if constexpr (op == Op::ReduceL2)
    run_reduce(p, x, y, Acc(0), sq, as_double([](double a, int64_t) { return std::sqrt(a); }), fold_sum);
  else if constexpr (op == Op::ReduceLogSum)
    run_reduce(p, x, y, Acc(0), id, as_double([](double a, int64_t) { return std::log(a); }), fold_sum);
  else if constexpr (op == Op::ReduceMean)
    run_reduce(p, x, y, Acc(0), id, [](Acc a, int64_t n, int64_t) {
      if constexpr (std::is_integral_v<Acc>) return T(n ? a / Acc(n) : 0);
      else return round_to<T>(a / double(n));
    }, fold_sum);
  else if constexpr (op == Op::ReduceLogSumExp) {
    // log(sum(exp(x - m))) + m with m the maximum, so large inputs do not overflow.
    Tensor mt = Tensor::empty(yt.dtype(), yt.shape());
    run_reduce(p, x, mt.data<T>(), lowest<Acc>(), id, keep, fold_max);
    std::vector<double> m(size_t(mt.numel()));
    for (int64_t i = 0; i < mt.numel(); ++i) {
      const double v = to_acc<double>(mt.data<T>()[i]);
      m[size_t(i)] = std::isfinite(v) ? v : 0.0;
    }
    run_reduce(p, x, y, 0.0, [&](T v, int64_t o) { return std::exp(to_acc<double>(v) - m[size_t(o)]); },
               [&](double a, int64_t, int64_t o) { return round_to<T>(std::log(a) + m[size_t(o)]); },
               fold_sum);
  }
}

template <Op op>
void reduce_kernel(KernelContext& ctx) {
  const Tensor& input = ctx.input(0);
  const Node& node = ctx.node;
  // ReduceMax/Min-20 take bools: max is any, min is all, as on 0/1 bytes.
  const bool bools = input.dtype() == DType::Bool && (op == Op::ReduceMax || op == Op::ReduceMin);
  const Tensor x = bools ? input.cast(DType::UInt8) : input;
  TERRACE_CHECK(is_float(x.dtype()) || is_integer(x.dtype()), InvalidArgument, node.describe(),
                ": needs a numeric input, got ", dtype_name(x.dtype()));
  const ReducePlan p = plan_reduce(x.shape(), reduced_axes(ctx, x.rank()), node.attr_int("keepdims", 1) != 0);
  Tensor y = Tensor::empty(x.dtype(), p.out_shape);
  dispatch_dtype(x.dtype(), [&](auto tag) { reduce_typed<op, decltype(tag)>(p, x, y); });
  ctx.set_output(0, bools ? y.cast(DType::Bool) : std::move(y));
}

// ArgMax/ArgMin: the index of the first (or with select_last_index, last) extreme along axis;
// a NaN counts as the extreme, as in numpy.
template <bool is_max>
void arg_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Node& node = ctx.node;
  TERRACE_CHECK(is_float(x.dtype()) || is_integer(x.dtype()), InvalidArgument, node.describe(),
                ": needs a numeric input, got ", dtype_name(x.dtype()));
  const int64_t axis = normalize_axis(node, node.attr_int("axis", 0), x.rank());
  const bool keepdims = node.attr_int("keepdims", 1) != 0;
  const bool last = node.attr_int("select_last_index", 0) != 0;
  TERRACE_CHECK(x.rank() == 0 || x.dim(axis) > 0, InvalidArgument, node.describe(),
                ": cannot take the arg-extreme of an empty axis");
  Shape out_shape = x.shape();
  if (x.rank() > 0) {
    if (keepdims) out_shape[size_t(axis)] = 1;
    else out_shape.erase(out_shape.begin() + axis);
  }
  const AxisLanes l = axis_lanes(x.shape(), axis);
  Tensor y = Tensor::empty(DType::Int64, out_shape);
  int64_t* yd = y.data<int64_t>();
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using Acc = acc_t<T>;
    const T* xd = x.data<T>();
#pragma omp parallel for schedule(static) if (x.numel() > (1 << 15))
    for (int64_t lane = 0; lane < l.count(); ++lane) {
      const T* src = xd + l.start(lane);
      Acc best = to_acc<Acc>(src[0]);
      int64_t best_k = 0;
      for (int64_t k = 1; k < l.len; ++k) {
        const Acc v = to_acc<Acc>(src[k * l.inner]);
        if (best != best) break;  // a NaN already won
        const bool better = v != v || (is_max ? (last ? v >= best : v > best) : (last ? v <= best : v < best));
        if (better) best = v, best_k = k;
      }
      yd[lane] = best_k;
    }
  });
  ctx.set_output(0, std::move(y));
}

}  // namespace

void register_reduce_kernels(KernelTable& t) {
#define TERRACE_REDUCE(name) t.add(Op::name, reduce_kernel<Op::name>);
  TERRACE_REDUCE(ReduceSum)
  TERRACE_REDUCE(ReduceMean)
  TERRACE_REDUCE(ReduceMax)
  TERRACE_REDUCE(ReduceMin)
  TERRACE_REDUCE(ReduceProd)
  TERRACE_REDUCE(ReduceL1)
  TERRACE_REDUCE(ReduceL2)
  TERRACE_REDUCE(ReduceLogSum)
  TERRACE_REDUCE(ReduceLogSumExp)
  TERRACE_REDUCE(ReduceSumSquare)
#undef TERRACE_REDUCE
  t.add(Op::ArgMax, arg_kernel<true>);
  t.add(Op::ArgMin, arg_kernel<false>);
  ops::register_softmax_kernels(t);
  ops::register_scan_kernels(t);
}

}  // namespace terrace
