// Cast and CastLike: conversions between all dtypes, including to and from strings.
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <strings.h>

#include "interp/ops/elementwise_common.h"

namespace terrace::ops {
namespace {

// Numbers as text: integers in decimal, floats in the shortest form that reads back to the same
// value ("0.039187793", "1e-05", "inf", "nan"), as the ONNX test data (numpy's str) has them.
template <typename T>
std::string format_value(T v) {
  if constexpr (kIsBool<T>) {
    return v ? "1" : "0";
  } else if constexpr (kIsInt<T>) {
    return std::to_string(v);
  } else {
    char buf[64];
    auto r = std::to_chars(buf, buf + sizeof buf, compute_t<T>(v));
    return std::string(buf, r.ptr);
  }
}

bool only_space_after(const char* p) {
  while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') ++p;
  return *p == '\0';
}

// Text to a number: integers read exactly where the text is an integer, everything else through
// strtod ("NaN", "INF", "+INF", "-inf" included) and then converted as a double would be.
template <typename T>
T parse_value(const Node& node, const std::string& s) {
  const char* b = s.c_str();
  char* e = nullptr;
  if constexpr (kIsBool<T>) {
    if (strcasecmp(b, "true") == 0) return true;
    if (strcasecmp(b, "false") == 0) return false;
  }
  if constexpr (kIsInt<T>) {
    errno = 0;
    if constexpr (std::is_signed_v<T>) {
      long long v = std::strtoll(b, &e, 10);
      if (e != b && errno == 0 && only_space_after(e)) return cast_value<T>(int64_t(v));
    } else {
      unsigned long long v = std::strtoull(b, &e, 10);
      if (e != b && errno == 0 && only_space_after(e) && s.find('-') == std::string::npos)
        return cast_value<T>(uint64_t(v));
    }
  }
  if constexpr (std::is_same_v<T, float>) {
    float f = std::strtof(b, &e);  // read straight to float: one rounding
    if (e != b && only_space_after(e)) return f;
  } else {
    double d = std::strtod(b, &e);
    if (e != b && only_space_after(e)) return cast_value<T>(d);
  }
  fail(ErrorCode::InvalidArgument, node.describe(), ": cannot read \"", s, "\" as ",
       dtype_name(dtype_of<T>::value));
}

// String conversions run serially: they allocate and may throw.
Tensor cast_string(const Node& node, const Tensor& x, DType to) {
  Tensor y = Tensor::empty(to, x.shape());
  if (to == DType::String) {
    std::string* dst = y.data<std::string>();
    dispatch_dtype(x.dtype(), [&](auto tag) {
      using From = decltype(tag);
      const From* src = x.data<From>();
      for (int64_t i = 0; i < x.numel(); ++i) dst[i] = format_value(src[i]);
    });
  } else {
    const std::string* src = x.data<std::string>();
    dispatch_dtype(to, [&](auto tag) {
      using To = decltype(tag);
      To* dst = y.data<To>();
      for (int64_t i = 0; i < x.numel(); ++i) dst[i] = parse_value<To>(node, src[i]);
    });
  }
  return y;
}

// Casts from or to a narrow type (float8, int4/uint4, float4: float8.h) go through each
// element's exact value as a double; to a float8 type, `saturate` says what a value beyond the
// type's range becomes (its largest value, else Inf or NaN).
Tensor cast_narrow(const Node& node, const Tensor& x, DType to, bool saturate) {
  Tensor y = Tensor::empty(to, x.shape());
  const int64_t n = x.numel();
  if (x.dtype() == DType::String) {
    const std::string* src = x.data<std::string>();
    dispatch_dtype<false, true>(to, [&](auto tag) {
      using To = decltype(tag);
      if constexpr (kIsNarrow<To>) {
        To* dst = y.data<To>();
        for (int64_t i = 0; i < n; ++i)
          dst[i] = narrow_from_double<To>(parse_value<double>(node, src[i]), saturate);
      }
    });
    return y;
  }
  dispatch_dtype<false, true>(x.dtype(), [&](auto from_tag) {
    using From = decltype(from_tag);
    const From* src = x.data<From>();
    if (to == DType::String) {
      std::string* dst = y.data<std::string>();
      for (int64_t i = 0; i < n; ++i) {
        if constexpr (kIsNarrowInt<From>) dst[i] = std::to_string(int(narrow_to_double(src[i])));
        else if constexpr (kIsNarrow<From>) dst[i] = format_value(float(narrow_to_double(src[i])));
      }
      return;
    }
    dispatch_dtype<false, true>(to, [&](auto to_tag) {
      using To = decltype(to_tag);
      To* dst = y.data<To>();
      parallel_chunks(n, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          if constexpr (kIsNarrow<From> && kIsNarrow<To>) {
            dst[i] = narrow_from_double<To>(narrow_to_double(src[i]), saturate);
          } else if constexpr (kIsNarrow<From>) {
            dst[i] = cast_value<To>(narrow_to_double(src[i]));
          } else if constexpr (kIsNarrowInt<To> && !kIsFloat<From>) {
            // An integer (or bool) to int4/uint4 clamps; uint64 above INT64_MAX clamps too.
            if constexpr (std::is_unsigned_v<From>) dst[i] = narrow_int_from_int64<To>(int64_t(std::min<uint64_t>(src[i], 127)));
            else dst[i] = narrow_int_from_int64<To>(int64_t(src[i]));
          } else if constexpr (kIsNarrow<To>) {
            dst[i] = narrow_from_double<To>(double(compute_t<From>(src[i])), saturate);
          }
        }
      });
    });
  });
  return y;
}

Tensor cast_tensor(const Node& node, const Tensor& x, DType to, bool saturate) {
  if (x.dtype() == to) return x;
  if (is_narrow(x.dtype()) || is_narrow(to)) return cast_narrow(node, x, to, saturate);
  if (x.dtype() == DType::String || to == DType::String) return cast_string(node, x, to);
  Tensor y = Tensor::empty(to, x.shape());
  dispatch_dtype(x.dtype(), [&](auto from_tag) {
    using From = decltype(from_tag);
    dispatch_dtype(to, [&](auto to_tag) {
      using To = decltype(to_tag);
      const From* src = x.data<From>();
      To* dst = y.data<To>();
      parallel_chunks(x.numel(), [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) dst[i] = cast_value<To>(src[i]);
      });
    });
  });
  return y;
}

void cast_kernel(KernelContext& ctx) {
  int64_t code = ctx.node.attr_int("to");
  DType to;
  TERRACE_CHECK(dtype_from_onnx(int(code), &to), NotImplemented, ctx.node.describe(),
                ": cast to ONNX data type ", code, " is not supported");
  ctx.set_output(0, cast_tensor(ctx.node, ctx.input(0), to, ctx.node.attr_int("saturate", 1) != 0));
}

void cast_like_kernel(KernelContext& ctx) {
  ctx.set_output(0, cast_tensor(ctx.node, ctx.input(0), ctx.input(1).dtype(),
                                ctx.node.attr_int("saturate", 1) != 0));
}

}  // namespace

void register_casts(KernelTable& t) {
  t.add(Op::Cast, cast_kernel);
  t.add(Op::CastLike, cast_like_kernel);
}

}  // namespace terrace::ops
