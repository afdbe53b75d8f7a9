// The narrow storage types of ONNX 19 to 23: float8 (E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ), int4,
// uint4 and float4 (E2M1). Each element takes one byte in memory (4-bit types are unpacked when a
// TensorProto is read and packed when one is written, low nibble first). They are storage types
// only: no arithmetic, no implicit conversions; Cast, CastLike, QuantizeLinear, DequantizeLinear
// and the data-movement ops take them, everything else refuses them (dispatch_dtype skips them
// unless asked: tensor.h).
//
// Conversions follow the ONNX Cast specification (opsets 19 to 23):
//  - to a float8 or float4 type: round to nearest, ties to even, on the exact value (a double;
//    every source type converts to double exactly except int64/uint64 beyond 2^53, far outside
//    every narrow range). A result beyond the largest finite value (after rounding) becomes that
//    value with its sign when `saturate` (ONNX's default), else Inf where the type has one (E5M2)
//    and NaN otherwise. Inf in saturates the same way. NaN in gives NaN (E4M3FN, E5M2: sign kept;
//    the FNUZ types' one NaN is 0x80). The FNUZ types have no -0: -0 and negative values rounding
//    to zero give +0. FLOAT4E2M1 has neither Inf nor NaN: it always saturates, NaN gives +6 (0x7),
//    as ONNX's reference does. (ONNX 1.18's Python reference, onnx.helper.float32_to_float8e4m3,
//    gives 448 rather than NaN for E4M3FN inputs in [480, 496) with saturate=0, an artefact of its
//    bit manipulation; Terrace follows the spec there: beyond 448 after rounding is NaN.)
//  - to int4/uint4: rounded to nearest even, then clamped to [-8, 7] / [0, 15] (NaN gives 0), as
//    QuantizeLinear and ONNX's reference Cast do.
//  - from any of them: exact (every value is a float32 value).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace terrace {

// One element of a narrow type: its code in the low bits of a byte (4-bit types: the low nibble,
// int4 sign-extended to the whole byte so the byte reads as an int8).
#define TERRACE_NARROW_TYPE(Name)                          \
  struct Name {                                            \
    uint8_t bits = 0;                                      \
    Name() = default;                                      \
    constexpr explicit Name(uint8_t b) : bits(b) {}        \
    friend bool operator==(Name a, Name b) = default;      \
  };
TERRACE_NARROW_TYPE(Float8E4M3FN)
TERRACE_NARROW_TYPE(Float8E4M3FNUZ)
TERRACE_NARROW_TYPE(Float8E5M2)
TERRACE_NARROW_TYPE(Float8E5M2FNUZ)
TERRACE_NARROW_TYPE(UInt4)
TERRACE_NARROW_TYPE(Int4)
TERRACE_NARROW_TYPE(Float4E2M1)
#undef TERRACE_NARROW_TYPE

template <typename T>
inline constexpr bool kIsNarrow =
    std::is_same_v<T, Float8E4M3FN> || std::is_same_v<T, Float8E4M3FNUZ> ||
    std::is_same_v<T, Float8E5M2> || std::is_same_v<T, Float8E5M2FNUZ> || std::is_same_v<T, UInt4> ||
    std::is_same_v<T, Int4> || std::is_same_v<T, Float4E2M1>;
template <typename T>
inline constexpr bool kIsNarrowInt = std::is_same_v<T, UInt4> || std::is_same_v<T, Int4>;
template <typename T>
inline constexpr bool kIsNarrowFloat = kIsNarrow<T> && !kIsNarrowInt<T>;

// The layout of a small binary float format.
struct MiniFloatFormat {
  int exp_bits, man_bits, bias;
  bool has_inf;     // E5M2: exponent all ones, mantissa 0
  bool nan_all_ones;  // E4M3FN: S.1111.111 is NaN (no Inf); E5M2: exponent all ones, mantissa != 0
  bool unsigned_zero;  // FNUZ: 0x80 is the one NaN, no -0
  bool has_nan;     // false for E2M1
  uint8_t max_code;  // the largest finite magnitude's code
};

template <typename T> struct mini_float_format;
template <> struct mini_float_format<Float8E4M3FN> {
  static constexpr MiniFloatFormat value{4, 3, 7, false, true, false, true, 0x7E};  // 448
};
template <> struct mini_float_format<Float8E4M3FNUZ> {
  static constexpr MiniFloatFormat value{4, 3, 8, false, false, true, true, 0x7F};  // 240
};
template <> struct mini_float_format<Float8E5M2> {
  static constexpr MiniFloatFormat value{5, 2, 15, true, true, false, true, 0x7B};  // 57344
};
template <> struct mini_float_format<Float8E5M2FNUZ> {
  static constexpr MiniFloatFormat value{5, 2, 16, false, false, true, true, 0x7F};  // 57344
};
template <> struct mini_float_format<Float4E2M1> {
  static constexpr MiniFloatFormat value{2, 1, 1, false, false, false, false, 0x7};  // 6
};

// A code's value (NaN and Inf where the format has them).
inline double mini_float_decode(const MiniFloatFormat& f, uint8_t code) {
  const int width = 1 + f.exp_bits + f.man_bits;
  code = uint8_t(code & ((1u << width) - 1));
  const uint8_t sign_bit = uint8_t(1u << (width - 1));
  const uint8_t mag = uint8_t(code & (sign_bit - 1));
  const bool neg = (code & sign_bit) != 0;
  if (f.unsigned_zero && code == sign_bit) return std::numeric_limits<double>::quiet_NaN();
  const int e = mag >> f.man_bits, m = mag & ((1 << f.man_bits) - 1);
  const int e_max = (1 << f.exp_bits) - 1;
  if (f.nan_all_ones) {
    if (f.has_inf && e == e_max)
      return m ? std::numeric_limits<double>::quiet_NaN()
               : (neg ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity());
    if (!f.has_inf && mag == sign_bit - 1) return std::numeric_limits<double>::quiet_NaN();
  }
  double v = e == 0 ? std::ldexp(double(m), 1 - f.bias - f.man_bits)
                    : std::ldexp(double((1 << f.man_bits) | m), e - f.bias - f.man_bits);
  return neg ? -v : v;
}

inline bool mini_float_is_nan(const MiniFloatFormat& f, uint8_t code) {
  return std::isnan(mini_float_decode(f, code));
}

// A value to a code: round to nearest even, then saturate or overflow (see the top of the file).
inline uint8_t mini_float_encode(const MiniFloatFormat& f, double v, bool saturate) {
  const int width = 1 + f.exp_bits + f.man_bits;
  const uint8_t sign_bit = uint8_t(1u << (width - 1));
  const uint8_t sign = std::signbit(v) ? sign_bit : 0;
  const uint8_t nan_code = f.unsigned_zero ? sign_bit : uint8_t(sign | (sign_bit - 1));
  const uint8_t inf_code = uint8_t(sign | (((1 << f.exp_bits) - 1) << f.man_bits));
  if (!f.has_nan) saturate = true;  // E2M1: nothing else to give
  if (std::isnan(v)) return f.has_nan ? nan_code : f.max_code;
  const double max_value = mini_float_decode(f, f.max_code);
  auto overflow = [&]() -> uint8_t {
    if (saturate) return uint8_t(sign | f.max_code);
    return f.has_inf ? inf_code : nan_code;
  };
  const double a = std::fabs(v);
  if (std::isinf(a)) return overflow();
  const int emin = 1 - f.bias;  // the smallest normal exponent
  int e2 = 0;
  std::frexp(a, &e2);  // a = frac * 2^e2, frac in [0.5, 1): floor(log2 a) = e2 - 1
  const int ex = a == 0 ? emin : std::max(e2 - 1, emin);
  const double quantum = std::ldexp(1.0, ex - f.man_bits);
  const double n = std::nearbyint(a / quantum);  // exact division (a power of two); ties to even
  if (n * quantum > max_value) return overflow();
  if (n == 0) return f.unsigned_zero ? 0 : sign;
  const int one = 1 << f.man_bits;
  int mant = int(n), exp_field;
  if (mant < one) {
    exp_field = 0;  // subnormal (only when ex == emin)
  } else {
    int e = ex;
    if (mant == 2 * one) mant = one, ++e;  // rounded up into the next binade
    exp_field = e + f.bias;
    mant -= one;
  }
  return uint8_t(sign | (exp_field << f.man_bits) | mant);
}

// Conversions of one element, by storage type.
template <typename T>
inline double narrow_to_double(T x) {
  if constexpr (std::is_same_v<T, Int4>) return double(int8_t(x.bits));
  else if constexpr (std::is_same_v<T, UInt4>) return double(x.bits);
  else return mini_float_decode(mini_float_format<T>::value, x.bits);
}

// int4/uint4 from a value: round to nearest even, clamp; NaN gives 0.
template <typename T>
inline T narrow_int_from_double(double v) {
  constexpr double lo = std::is_same_v<T, Int4> ? -8 : 0, hi = std::is_same_v<T, Int4> ? 7 : 15;
  if (std::isnan(v)) return T(0);
  double r = std::nearbyint(std::clamp(v, lo, hi));
  return T(uint8_t(int8_t(r)));
}
// int4/uint4 from an integer: clamped.
template <typename T>
inline T narrow_int_from_int64(int64_t v) {
  constexpr int64_t lo = std::is_same_v<T, Int4> ? -8 : 0, hi = std::is_same_v<T, Int4> ? 7 : 15;
  return T(uint8_t(int8_t(std::clamp(v, lo, hi))));
}

template <typename T>
inline T narrow_from_double(double v, bool saturate = true) {
  if constexpr (kIsNarrowInt<T>) return narrow_int_from_double<T>(v);
  else return T(mini_float_encode(mini_float_format<T>::value, v, saturate));
}

// A narrow element's 4-bit code as stored in a packed byte (int4 keeps its low nibble).
inline uint8_t nibble(uint8_t bits) { return bits & 0x0F; }
// A packed nibble back to an element: int4 sign-extends.
template <typename T>
inline T from_nibble(uint8_t nib) {
  nib &= 0x0F;
  if constexpr (std::is_same_v<T, Int4>) return T(uint8_t((nib & 0x8) ? (nib | 0xF0) : nib));
  else return T(nib);
}

}  // namespace terrace
