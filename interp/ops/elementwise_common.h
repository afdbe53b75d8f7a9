// Shared machinery of the elementwise kernels: dtype classes, the unary map, broadcast runs.
#pragma once
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "interp/ops/common.h"

namespace terrace::ops {

// Dtype classes, as compile-time predicates on the storage type.
template <typename T>
constexpr bool kIsFloat = std::is_floating_point_v<T> || std::is_same_v<T, Half> ||
                          std::is_same_v<T, BFloat16>;
template <typename T>
constexpr bool kIsInt = std::is_integral_v<T> && !std::is_same_v<T, bool>;
template <typename T>
constexpr bool kIsNumeric = kIsFloat<T> || kIsInt<T>;
template <typename T>
constexpr bool kIsSignedNumeric = kIsFloat<T> || (kIsInt<T> && std::is_signed_v<T>);
template <typename T>
constexpr bool kIsBool = std::is_same_v<T, bool>;

// double -> float rounding to odd: the float nearest to v toward zero, with its last bit set when
// inexact. Rounding that float once more to a 16-bit float then equals rounding v directly
// (float keeps more than two extra bits), avoiding double rounding.
inline float round_to_odd_float(double v) {
  float f = float(v);
  if (std::isinf(f) || std::isnan(f) || double(f) == v) return f;
  if (std::abs(double(f)) > std::abs(v)) f = std::nextafter(f, 0.0f);
  return bits_to_float(float_to_bits(f) | 1u);
}

// The type arithmetic runs in: 16-bit floats compute in float and round once on store.
template <typename T>
using compute_t = std::conditional_t<std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>,
                                     float, T>;

// -x with two's-complement wrap-around (-INT_MIN stays INT_MIN instead of being undefined).
template <typename C>
C wrapping_neg(C x) {
  using U = std::make_unsigned_t<C>;
  return C(U(0) - U(x));
}

// The unsigned type integer arithmetic wraps in: never narrower than unsigned, so that small
// types do not promote to (overflowing) int.
template <typename C>
using wrap_t = std::conditional_t<(sizeof(C) < sizeof(unsigned)), unsigned, std::make_unsigned_t<C>>;

// Converts one value with ONNX Cast semantics: float to integer truncates toward zero (NaN gives
// 0, out-of-range values saturate, which ONNX leaves undefined); to bool is "!= 0"; 16-bit floats
// round to nearest even.
template <typename To, typename From>
To cast_value(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<To, bool>) {
    return compute_t<From>(v) != compute_t<From>(0);
  } else if constexpr (kIsInt<To> && kIsFloat<From>) {
    double d = double(compute_t<From>(v));
    if (std::isnan(d)) return To(0);
    if (d <= double(std::numeric_limits<To>::lowest())) return std::numeric_limits<To>::lowest();
    if (d >= double(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
    return To(d);
  } else if constexpr (std::is_same_v<To, Half> || std::is_same_v<To, BFloat16>) {
    if constexpr (std::is_same_v<From, double>) return To(round_to_odd_float(v));
    else return To(float(compute_t<From>(v)));
  } else {
    return To(compute_t<From>(v));
  }
}

// The error for a dtype an op does not take.
[[noreturn]] void unsupported_dtype(const Node& node, DType dtype, const char* what = "input");

// The functor of an op, built from the node's attributes where it takes them.
template <typename Fn>
Fn make_functor(const Node& node) {
  if constexpr (std::is_constructible_v<Fn, const Node&>) return Fn(node);
  else return Fn{};
}

// Elements per parallel work item: large enough to amortise scheduling, fixed so that the split
// (and so the result) never depends on the thread count.
inline constexpr int64_t kChunk = 1 << 14;

// Calls body(begin, end) over [0, n) in fixed chunks, in parallel unless `parallel` is false
// (string elements, whose copies may throw). body must not throw when run in parallel.
template <typename Body>
void parallel_chunks(int64_t n, Body&& body, bool parallel = true) {
  int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (parallel && chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) body(c * kChunk, std::min(n, (c + 1) * kChunk));
}

// out[i] = Out(fn(compute_t<In>(in[i]))) for i in [0, n).
template <typename Out, typename In, typename Fn>
void map_unary(const In* in, Out* out, int64_t n, const Fn& fn) {
  parallel_chunks(n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[i] = Out(fn(compute_t<In>(in[i])));
  });
}

// The result dtype of an op whose functor returns R on inputs of storage type T: predicates give
// bool, everything else keeps the input's type.
template <typename T, typename R>
using result_t = std::conditional_t<std::is_same_v<R, bool>, bool, T>;

// A unary kernel: Fn has `template <class T> static constexpr bool accepts` and a call operator
// on compute_t<T>.
template <typename Fn>
void unary_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Fn fn = make_functor<Fn>(ctx.node);
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (Fn::template accepts<T>) {
      using Out = result_t<T, decltype(fn(compute_t<T>{}))>;
      Tensor y = Tensor::empty(dtype_of<Out>::value, x.shape());
      map_unary(x.data<T>(), y.data<Out>(), x.numel(), fn);
      ctx.set_output(0, std::move(y));
    } else {
      unsupported_dtype(ctx.node, x.dtype());
    }
  });
}

// The broadcast of all input shapes; InvalidArgument naming the node if they do not broadcast.
Shape broadcast_all(const Node& node, const std::vector<Shape>& shapes);

// How to walk the broadcast output as contiguous runs: dims that every input reads contiguously
// (or not at all) are merged, leaving `outer` dims and one inner run of `inner` elements.
struct BroadcastPlan {
  Shape outer;                                   // merged dims before the inner run
  int64_t inner = 1;                             // length of the innermost run
  std::vector<std::vector<int64_t>> outer_strides;  // per input, strides over `outer`
  std::vector<int64_t> inner_step;               // per input: 0 (broadcast) or its stride
  int64_t total = 0;
  bool parallel = true;                          // false for string elements
};
BroadcastPlan plan_broadcast(const Shape& out, const std::vector<Shape>& inputs);

// Calls run(out_pos, len, offsets, steps) for contiguous runs covering the output in row-major
// order: elements out_pos + j (j < len) read input k at offsets[k] + j * steps[k]. Runs are split
// in fixed chunks processed in parallel; run must not throw.
template <typename Run>
void for_each_broadcast_run(const BroadcastPlan& p, Run&& run) {
  const size_t k_inputs = p.inner_step.size();
  parallel_chunks(p.total, [&](int64_t begin, int64_t end) {
    if (p.inner == 0) return;
    int64_t pos = begin, col = begin % p.inner;
    StridedIter it(p.outer, p.outer_strides, begin / p.inner);
    std::vector<int64_t> offs(k_inputs);
    while (pos < end) {
      int64_t len = std::min(p.inner - col, end - pos);
      for (size_t k = 0; k < k_inputs; ++k) offs[k] = it.offset(k) + col * p.inner_step[k];
      run(pos, len, offs.data(), p.inner_step.data());
      pos += len;
      col = 0;
      it.next();
    }
  }, p.parallel);
}

// out = fn(a, b) with multidirectional broadcasting; a and b are typed storage pointers of the
// given shapes, computed in compute types and stored as Out.
template <typename Out, typename A, typename B, typename Fn>
Tensor broadcast_binary(const Node& node, const Tensor& a, const Tensor& b, const Fn& fn) {
  Shape shape = broadcast_all(node, {a.shape(), b.shape()});
  Tensor out = Tensor::empty(dtype_of<Out>::value, shape);
  const A* pa = a.data<A>();
  const B* pb = b.data<B>();
  Out* po = out.data<Out>();
  auto apply = [&](auto step_a, auto step_b, int64_t o, int64_t len, int64_t oa, int64_t ob,
                   int64_t sa, int64_t sb) {
    // Constant steps (0 or 1) let the compiler vectorise the common cases.
    if constexpr (decltype(step_a)::value >= 0) sa = decltype(step_a)::value;
    if constexpr (decltype(step_b)::value >= 0) sb = decltype(step_b)::value;
    for (int64_t j = 0; j < len; ++j)
      po[o + j] = Out(fn(compute_t<A>(pa[oa + j * sa]), compute_t<B>(pb[ob + j * sb])));
  };
  using Any = std::integral_constant<int, -1>;
  using Zero = std::integral_constant<int, 0>;
  using One = std::integral_constant<int, 1>;
  for_each_broadcast_run(plan_broadcast(shape, {a.shape(), b.shape()}),
                         [&](int64_t o, int64_t len, const int64_t* off, const int64_t* st) {
    if (st[0] == 1 && st[1] == 1) apply(One{}, One{}, o, len, off[0], off[1], 1, 1);
    else if (st[0] == 0 && st[1] == 1) apply(Zero{}, One{}, o, len, off[0], off[1], 0, 1);
    else if (st[0] == 1 && st[1] == 0) apply(One{}, Zero{}, o, len, off[0], off[1], 1, 0);
    else apply(Any{}, Any{}, o, len, off[0], off[1], st[0], st[1]);
  });
  return out;
}

// Registration of the pieces of the family (one per elementwise_*.cpp / cast.cpp file).
void register_unary_math(KernelTable& t);
void register_activations(KernelTable& t);
void register_binary(KernelTable& t);
void register_nary(KernelTable& t);
void register_casts(KernelTable& t);

}  // namespace terrace::ops
