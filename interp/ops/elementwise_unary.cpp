// Unary math kernels: trig, exp/log, rounding, sign and magnitude, predicates, logical/bitwise not.
#include <cmath>

#include "interp/ops/elementwise_common.h"

namespace terrace::ops {
namespace {

// Ops defined on floating-point types only, as (Name, expression in x), computed in the
// compute type (float for float/float16/bfloat16, double for double).
#define TERRACE_FLOAT_UNARY_OPS(X)       \
  X(Acos, std::acos(x))                  \
  X(Acosh, std::acosh(x))                \
  X(Asin, std::asin(x))                  \
  X(Asinh, std::asinh(x))                \
  X(Atan, std::atan(x))                  \
  X(Atanh, std::atanh(x))                \
  X(Ceil, std::ceil(x))                  \
  X(Cos, std::cos(x))                    \
  X(Cosh, std::cosh(x))                  \
  X(Exp, std::exp(x))                    \
  X(Floor, std::floor(x))                \
  X(Log, std::log(x))                    \
  X(Reciprocal, C(1) / x)                \
  X(Round, std::nearbyint(x)) /* the default rounding mode: half to even */ \
  X(Sin, std::sin(x))                    \
  X(Sinh, std::sinh(x))                  \
  X(Sqrt, std::sqrt(x))                  \
  X(Tan, std::tan(x))                    \
  X(Tanh, std::tanh(x))

#define TERRACE_DEFINE(Name, expr)                                      \
  struct Name {                                                         \
    template <typename T> static constexpr bool accepts = kIsFloat<T>;  \
    template <typename C> C operator()(C x) const { return expr; }      \
  };
TERRACE_FLOAT_UNARY_OPS(TERRACE_DEFINE)
#undef TERRACE_DEFINE

struct Abs {
  template <typename T> static constexpr bool accepts = kIsNumeric<T>;
  template <typename C> C operator()(C x) const {
    if constexpr (std::is_unsigned_v<C>) return x;
    else if constexpr (kIsInt<C>) return x < 0 ? wrapping_neg(x) : x;
    else return std::abs(x);
  }
};

struct Neg {
  template <typename T> static constexpr bool accepts = kIsSignedNumeric<T>;
  template <typename C> C operator()(C x) const {
    if constexpr (kIsInt<C>) return wrapping_neg(x);
    else return -x;
  }
};

struct Sign {
  template <typename T> static constexpr bool accepts = kIsNumeric<T>;
  template <typename C> C operator()(C x) const {
    if constexpr (kIsFloat<C>) {
      if (std::isnan(x)) return x;
    }
    return C((x > C(0)) - (x < C(0)));
  }
};

// Erf takes integers too (computed in double and converted back like Cast).
struct Erf {
  template <typename T> static constexpr bool accepts = kIsNumeric<T>;
  template <typename C> auto operator()(C x) const {
    if constexpr (kIsFloat<C>) return std::erf(x);
    else return std::erf(double(x));
  }
};

struct IsNaN {
  template <typename T> static constexpr bool accepts = kIsFloat<T>;
  template <typename C> bool operator()(C x) const { return std::isnan(x); }
};

struct IsInf {
  bool positive, negative;
  explicit IsInf(const Node& n)
      : positive(n.attr_int("detect_positive", 1) != 0),
        negative(n.attr_int("detect_negative", 1) != 0) {}
  template <typename T> static constexpr bool accepts = kIsFloat<T>;
  template <typename C> bool operator()(C x) const {
    return std::isinf(x) && (x > 0 ? positive : negative);
  }
};

// IsNaN and IsInf also take the float8 types (opset 20): on each element's value.
template <typename Fn>
void float8_or_unary(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (!is_narrow(x.dtype())) return unary_kernel<Fn>(ctx);
  const Fn fn = make_functor<Fn>(ctx.node);
  dispatch_dtype<false, true>(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (kIsNarrowFloat<T> && !std::is_same_v<T, Float4E2M1>) {
      Tensor y = Tensor::empty(DType::Bool, x.shape());
      const T* src = x.data<T>();
      bool* dst = y.data<bool>();
      for (int64_t i = 0; i < x.numel(); ++i) dst[i] = fn(narrow_to_double(src[i]));
      ctx.set_output(0, std::move(y));
    } else {
      unsupported_dtype(ctx.node, x.dtype());
    }
  });
}

struct Not {
  template <typename T> static constexpr bool accepts = kIsBool<T>;
  bool operator()(bool x) const { return !x; }
};

struct BitwiseNot {
  template <typename T> static constexpr bool accepts = kIsInt<T>;
  template <typename C> C operator()(C x) const { return C(~x); }
};

}  // namespace

void register_unary_math(KernelTable& t) {
#define TERRACE_REGISTER(Name, expr) t.add(Op::Name, unary_kernel<Name>);
  TERRACE_FLOAT_UNARY_OPS(TERRACE_REGISTER)
#undef TERRACE_REGISTER
  t.add(Op::Abs, unary_kernel<Abs>);
  t.add(Op::Neg, unary_kernel<Neg>);
  t.add(Op::Sign, unary_kernel<Sign>);
  t.add(Op::Erf, unary_kernel<Erf>);
  t.add(Op::IsNaN, float8_or_unary<IsNaN>);
  t.add(Op::IsInf, float8_or_unary<IsInf>);
  t.add(Op::Not, unary_kernel<Not>);
  t.add(Op::BitwiseNot, unary_kernel<BitwiseNot>);
}

}  // namespace terrace::ops
