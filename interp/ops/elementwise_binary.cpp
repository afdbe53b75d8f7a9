// Broadcasting binary kernels: arithmetic, Pow, Mod, comparisons, logical and bitwise ops, PRelu.
#include <cmath>
#include <functional>

#include "interp/ops/elementwise_common.h"

namespace terrace::ops {
namespace {

// Add, Sub, Mul: integers wrap around (two's complement) instead of overflowing.
template <typename Op>
struct Arithmetic {
  template <typename T> static constexpr bool accepts = kIsNumeric<T>;
  template <typename C> C operator()(C a, C b) const {
    if constexpr (kIsInt<C>) return C(Op{}(wrap_t<C>(a), wrap_t<C>(b)));
    else return Op{}(a, b);
  }
};
using Add = Arithmetic<std::plus<>>;
using Sub = Arithmetic<std::minus<>>;
using Mul = Arithmetic<std::multiplies<>>;

// Integer division truncates toward zero; the kernel rejects integer divisors of 0 up front.
struct Div {
  static constexpr bool kIntegerDivisorMustBeNonzero = true;
  template <typename T> static constexpr bool accepts = kIsNumeric<T>;
  template <typename C> C operator()(C a, C b) const {
    if constexpr (kIsInt<C> && std::is_signed_v<C>) {
      if (b == C(-1)) return wrapping_neg(a);  // INT_MIN / -1 would trap
    }
    return C(a / b);
  }
};

// fmod = 1: the remainder takes the dividend's sign (C fmod / %); fmod = 0: the divisor's
// (Python's %, numpy.mod).
struct Mod {
  static constexpr bool kIntegerDivisorMustBeNonzero = true;
  bool fmod;
  explicit Mod(const Node& n) : fmod(n.attr_int("fmod", 0) != 0) {}
  template <typename T> static constexpr bool accepts = kIsNumeric<T>;
  template <typename C> C operator()(C a, C b) const {
    C r;
    if constexpr (kIsFloat<C>) {
      r = std::fmod(a, b);
    } else {
      if constexpr (std::is_signed_v<C>) {
        if (b == C(-1)) return C(0);  // INT_MIN % -1 would trap
      }
      r = C(a % b);
    }
    if (!fmod && r != C(0) && ((r < C(0)) != (b < C(0)))) r = C(r + b);
    return r;
  }
};

// Equal (AlsoBool) also compares bools.
template <typename Op, bool AlsoBool>
struct Compare {
  template <typename T> static constexpr bool accepts = kIsNumeric<T> || (AlsoBool && kIsBool<T>);
  template <typename C> bool operator()(C a, C b) const { return Op{}(a, b); }
};
using Equal = Compare<std::equal_to<>, true>;
using Greater = Compare<std::greater<>, false>;
using GreaterOrEqual = Compare<std::greater_equal<>, false>;
using Less = Compare<std::less<>, false>;
using LessOrEqual = Compare<std::less_equal<>, false>;

template <typename Op>
struct Logical {
  template <typename T> static constexpr bool accepts = kIsBool<T>;
  bool operator()(bool a, bool b) const { return Op{}(a, b); }
};
using And = Logical<std::logical_and<>>;
using Or = Logical<std::logical_or<>>;
using Xor = Logical<std::not_equal_to<>>;

template <typename Op>
struct Bitwise {
  template <typename T> static constexpr bool accepts = kIsInt<T>;
  template <typename C> C operator()(C a, C b) const { return C(Op{}(a, b)); }
};
using BitwiseAnd = Bitwise<std::bit_and<>>;
using BitwiseOr = Bitwise<std::bit_or<>>;
using BitwiseXor = Bitwise<std::bit_xor<>>;

// Shifts by the bit width or more give 0 (in C++ they would be undefined).
struct BitShift {
  bool left;
  explicit BitShift(const Node& n) {
    std::string dir = n.attr_string("direction", "");
    TERRACE_CHECK(dir == "LEFT" || dir == "RIGHT", InvalidModel, n.describe(),
                  ": attribute 'direction' must be \"LEFT\" or \"RIGHT\", got \"", dir, "\"");
    left = dir == "LEFT";
  }
  template <typename T> static constexpr bool accepts = kIsInt<T> && std::is_unsigned_v<T>;
  template <typename C> C operator()(C a, C b) const {
    if (b >= C(8 * sizeof(C))) return C(0);
    return left ? C(wrap_t<C>(a) << b) : C(a >> b);
  }
};

// The slope broadcasts to X's shape (unidirectionally); the kernel checks it.
struct PRelu {
  static constexpr bool kSecondBroadcastsToFirst = true;
  template <typename T> static constexpr bool accepts = kIsNumeric<T>;
  template <typename C> C operator()(C x, C slope) const {
    if constexpr (std::is_unsigned_v<C>) return x;
    else return x < C(0) ? C(slope * x) : x;
  }
};

template <typename T>
void check_no_zero(const Node& node, const Tensor& divisor) {
  const T* p = divisor.data<T>();
  for (int64_t i = 0; i < divisor.numel(); ++i)
    TERRACE_CHECK(p[i] != T(0), InvalidArgument, node.describe(), ": integer division by zero");
}

// A binary op on two inputs of one dtype, broadcast against each other.
template <typename Fn>
void binary_kernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  TERRACE_CHECK(a.dtype() == b.dtype(), InvalidArgument, ctx.node.describe(),
                ": inputs must have one dtype, got ", dtype_name(a.dtype()), " and ",
                dtype_name(b.dtype()));
  if constexpr (requires { Fn::kSecondBroadcastsToFirst; })
    TERRACE_CHECK(broadcast_all(ctx.node, {a.shape(), b.shape()}) == a.shape(), InvalidArgument,
                  ctx.node.describe(), ": input 1 of shape ", shape_str(b.shape()),
                  " does not broadcast to input 0 of shape ", shape_str(a.shape()));
  const Fn fn = make_functor<Fn>(ctx.node);
  dispatch_dtype(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (Fn::template accepts<T>) {
      if constexpr (requires { Fn::kIntegerDivisorMustBeNonzero; } && kIsInt<T>)
        check_no_zero<T>(ctx.node, b);
      using C = compute_t<T>;
      using Out = result_t<T, decltype(fn(C{}, C{}))>;
      ctx.set_output(0, broadcast_binary<Out, T, T>(ctx.node, a, b, fn));
    } else {
      unsupported_dtype(ctx.node, a.dtype());
    }
  });
}

// Equal: numbers and bools through binary_kernel; strings (opset 19) compared as they are.
void equal_kernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  if (a.dtype() != DType::String) return binary_kernel<Equal>(ctx);
  TERRACE_CHECK(ctx.input(1).dtype() == DType::String, InvalidArgument, ctx.node.describe(),
                ": inputs must have one dtype, got string and ", dtype_name(ctx.input(1).dtype()));
  ctx.set_output(0, broadcast_binary<bool, std::string, std::string>(
                        ctx.node, a, ctx.input(1), [](const std::string& x, const std::string& y) { return x == y; }));
}

// x ** n for integers, exact (with wrap-around) by repeated squaring; negative n truncates 1/x^|n|
// toward zero as integer division would.
template <typename T, typename E>
T integer_pow(T x, E n) {
  if (n < E(0)) return x == T(1) ? T(1) : x == T(-1) ? ((n % E(2)) ? T(-1) : T(1)) : T(0);
  wrap_t<T> result = 1, base = wrap_t<T>(x);
  for (auto e = std::make_unsigned_t<E>(n); e; e >>= 1) {
    if (e & 1) result *= base;
    base *= base;
  }
  return T(result);
}

// Pow(X: T, Y: T1) -> T: the same float type computes in its compute type, integers exactly,
// and mixed types in double, converted to T as Cast would.
template <typename T, typename E>
struct PowFn {
  T operator()(compute_t<T> x, compute_t<E> y) const {
    if constexpr (kIsInt<T> && kIsInt<E>) return integer_pow(x, y);
    else if constexpr (std::is_same_v<T, E>) return T(std::pow(x, y));
    else return cast_value<T>(std::pow(double(x), double(y)));
  }
};

template <typename T>
constexpr bool kIsPowBase = kIsFloat<T> || std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t>;

void pow_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& y = ctx.input(1);
  dispatch_dtype(x.dtype(), [&](auto base_tag) {
    using T = decltype(base_tag);
    if constexpr (kIsPowBase<T>) {
      dispatch_dtype(y.dtype(), [&](auto exp_tag) {
        using E = decltype(exp_tag);
        if constexpr (kIsNumeric<E>)
          ctx.set_output(0, broadcast_binary<T, T, E>(ctx.node, x, y, PowFn<T, E>{}));
        else
          unsupported_dtype(ctx.node, y.dtype(), "exponent");
      });
    } else {
      unsupported_dtype(ctx.node, x.dtype(), "base");
    }
  });
}

}  // namespace

void register_binary(KernelTable& t) {
  t.add(Op::Add, binary_kernel<Add>);
  t.add(Op::Sub, binary_kernel<Sub>);
  t.add(Op::Mul, binary_kernel<Mul>);
  t.add(Op::Div, binary_kernel<Div>);
  t.add(Op::Mod, binary_kernel<Mod>);
  t.add(Op::Pow, pow_kernel);
  t.add(Op::Equal, equal_kernel);
  t.add(Op::Greater, binary_kernel<Greater>);
  t.add(Op::GreaterOrEqual, binary_kernel<GreaterOrEqual>);
  t.add(Op::Less, binary_kernel<Less>);
  t.add(Op::LessOrEqual, binary_kernel<LessOrEqual>);
  t.add(Op::And, binary_kernel<And>);
  t.add(Op::Or, binary_kernel<Or>);
  t.add(Op::Xor, binary_kernel<Xor>);
  t.add(Op::BitwiseAnd, binary_kernel<BitwiseAnd>);
  t.add(Op::BitwiseOr, binary_kernel<BitwiseOr>);
  t.add(Op::BitwiseXor, binary_kernel<BitwiseXor>);
  t.add(Op::BitShift, binary_kernel<BitShift>);
  t.add(Op::PRelu, binary_kernel<PRelu>);
}

}  // namespace terrace::ops
