// Variadic and ternary elementwise kernels: Max, Min, Sum, Mean (folded in input order), Where, Clip.
#include <cmath>
#include <limits>

#include "interp/ops/elementwise_common.h"

namespace terrace::ops {
namespace {

// Folds acc = step(acc, next input's value) in input order, then finish(acc, count): one rounding
// per element for 16-bit floats, and numpy's left-to-right order for float and double.
struct MaxFold {
  template <typename T> static constexpr bool accepts = kIsNumeric<T>;
  template <typename C> C step(C acc, C v) const {
    if constexpr (kIsFloat<C>) {
      if (std::isnan(v)) return v;  // NaN propagates, as numpy.maximum
    }
    return v > acc ? v : acc;
  }
  template <typename C> C finish(C acc, size_t) const { return acc; }
};

struct MinFold {
  template <typename T> static constexpr bool accepts = kIsNumeric<T>;
  template <typename C> C step(C acc, C v) const {
    if constexpr (kIsFloat<C>) {
      if (std::isnan(v)) return v;
    }
    return v < acc ? v : acc;
  }
  template <typename C> C finish(C acc, size_t) const { return acc; }
};

struct SumFold {
  template <typename T> static constexpr bool accepts = kIsFloat<T>;
  template <typename C> C step(C acc, C v) const { return acc + v; }
  template <typename C> C finish(C acc, size_t) const { return acc; }
};

struct MeanFold : SumFold {
  template <typename C> C finish(C acc, size_t n) const { return acc / C(n); }
};

std::vector<Shape> input_shapes(const KernelContext& ctx) {
  std::vector<Shape> shapes;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) shapes.push_back(ctx.input(i).shape());
  return shapes;
}

template <typename Fold>
void variadic_kernel(KernelContext& ctx) {
  TERRACE_CHECK(ctx.num_inputs() >= 1, InvalidModel, ctx.node.describe(), ": needs at least one input");
  const DType dtype = ctx.input(0).dtype();
  for (size_t i = 1; i < ctx.num_inputs(); ++i)
    TERRACE_CHECK(ctx.input(i).dtype() == dtype, InvalidArgument, ctx.node.describe(),
                  ": all inputs must have one dtype; input 0 is ", dtype_name(dtype), ", input ",
                  i, " is ", dtype_name(ctx.input(i).dtype()));
  std::vector<Shape> shapes = input_shapes(ctx);
  Shape shape = broadcast_all(ctx.node, shapes);
  const Fold fold;
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    if constexpr (Fold::template accepts<T>) {
      const size_t n = ctx.num_inputs();
      std::vector<const T*> in;
      for (size_t i = 0; i < n; ++i) in.push_back(ctx.input(i).data<T>());
      Tensor out = Tensor::empty(dtype, shape);
      T* po = out.data<T>();
      for_each_broadcast_run(plan_broadcast(shape, shapes),
                             [&](int64_t o, int64_t len, const int64_t* off, const int64_t* st) {
        for (int64_t j = 0; j < len; ++j) {
          C acc = C(in[0][off[0] + j * st[0]]);
          for (size_t k = 1; k < n; ++k) acc = fold.step(acc, C(in[k][off[k] + j * st[k]]));
          po[o + j] = T(fold.finish(acc, n));
        }
      });
      ctx.set_output(0, std::move(out));
    } else {
      unsupported_dtype(ctx.node, dtype);
    }
  });
}

void where_kernel(KernelContext& ctx) {
  const Tensor& cond = ctx.input(0);
  const Tensor& x = ctx.input(1);
  const Tensor& y = ctx.input(2);
  TERRACE_CHECK(cond.dtype() == DType::Bool, InvalidArgument, ctx.node.describe(),
                ": condition must be bool, got ", dtype_name(cond.dtype()));
  TERRACE_CHECK(x.dtype() == y.dtype(), InvalidArgument, ctx.node.describe(),
                ": X and Y must have one dtype, got ", dtype_name(x.dtype()), " and ",
                dtype_name(y.dtype()));
  std::vector<Shape> shapes = input_shapes(ctx);
  Shape shape = broadcast_all(ctx.node, shapes);
  BroadcastPlan plan = plan_broadcast(shape, shapes);
  plan.parallel = x.dtype() != DType::String;
  dispatch_dtype<true, true>(x.dtype(), [&](auto tag) {  // copies elements: any type
    using T = decltype(tag);
    const bool* pc = cond.data<bool>();
    const T* px = x.data<T>();
    const T* py = y.data<T>();
    Tensor out = Tensor::empty(x.dtype(), shape);
    T* po = out.data<T>();
    for_each_broadcast_run(plan, [&](int64_t o, int64_t len, const int64_t* off, const int64_t* st) {
      for (int64_t j = 0; j < len; ++j)
        po[o + j] = pc[off[0] + j * st[0]] ? px[off[1] + j * st[1]] : py[off[2] + j * st[2]];
    });
    ctx.set_output(0, std::move(out));
  });
}

// One bound of Clip: input `index` (opset 11+, an optional scalar of X's dtype) or attribute
// `name` (opset 6); absent: no bound (the dtype's extreme value).
template <typename T>
compute_t<T> clip_bound(const KernelContext& ctx, size_t index, const char* name, bool upper) {
  using C = compute_t<T>;
  if (ctx.has_input(index)) {
    const Tensor& b = ctx.input(index);
    TERRACE_CHECK(b.dtype() == ctx.input(0).dtype() && b.numel() == 1, InvalidArgument,
                  ctx.node.describe(), ": '", name, "' must be a scalar of the input's dtype, got ",
                  dtype_name(b.dtype()), shape_str(b.shape()));
    return C(b.data<T>()[0]);
  }
  C extreme = upper ? std::numeric_limits<C>::max() : std::numeric_limits<C>::lowest();
  if (ctx.node.has_attr(name)) return C(ctx.node.attr_float(name, 0.0f));
  return extreme;
}

// y = min(max(x, lo), hi): when lo > hi every element becomes hi, as ONNX specifies; NaN stays.
void clip_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    if constexpr (kIsNumeric<T>) {
      const C lo = clip_bound<T>(ctx, 1, "min", false);
      const C hi = clip_bound<T>(ctx, 2, "max", true);
      Tensor y = Tensor::empty(x.dtype(), x.shape());
      map_unary(x.data<T>(), y.data<T>(), x.numel(), [lo, hi](C v) {
        C r = v < lo ? lo : v;
        return r > hi ? hi : r;
      });
      ctx.set_output(0, std::move(y));
    } else {
      unsupported_dtype(ctx.node, x.dtype());
    }
  });
}

}  // namespace

void register_nary(KernelTable& t) {
  t.add(Op::Max, variadic_kernel<MaxFold>);
  t.add(Op::Min, variadic_kernel<MinFold>);
  t.add(Op::Sum, variadic_kernel<SumFold>);
  t.add(Op::Mean, variadic_kernel<MeanFold>);
  t.add(Op::Where, where_kernel);
  t.add(Op::Clip, clip_kernel);
}

}  // namespace terrace::ops
