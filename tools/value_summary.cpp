// The values of `terrace run`'s outputs in brief.
#include "tools/value_summary.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <type_traits>

namespace terrace::cli {

namespace {

std::string number_text(double v) {
  if (std::isnan(v)) return "nan";  // as numpy prints it; printf may say "-nan"
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// One element as text: integers exactly (int64 past 2^53 too), floats in 6 significant digits.
template <typename T>
std::string element_text(const T& v) {
  if constexpr (std::is_same_v<T, std::string>) {
    return "\"" + (v.size() > 24 ? v.substr(0, 21) + "..." : v) + "\"";
  } else if constexpr (std::is_same_v<T, bool>) {
    return v ? "true" : "false";
  } else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    return std::to_string(int64_t(v));
  } else if constexpr (std::is_integral_v<T>) {
    return std::to_string(uint64_t(v));
  } else {
    return number_text(double(v));
  }
}

// min, max and mean in double (exact for integers up to 2^53), NaNs counted and left out.
template <typename T>
void add_statistics(const T* p, int64_t n, ValueSummary& s) {
  s.numeric = true;
  s.has_nans = !std::is_integral_v<T>;
  double sum = 0, lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (int64_t i = 0; i < n; ++i) {
    const double v = std::is_same_v<T, bool> ? double(p[i] ? 1 : 0) : double(p[i]);
    if (std::isnan(v)) {
      ++s.nans;
      continue;
    }
    sum += v, lo = std::min(lo, v), hi = std::max(hi, v);
  }
  const int64_t valued = n - s.nans;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  s.min = valued ? lo : nan, s.max = valued ? hi : nan, s.mean = valued ? sum / double(valued) : nan;
}

}  // namespace

ValueSummary summarize_values(const Tensor& tensor, size_t shown) {
  // The narrow types (float8, int4, float4) are storage only: their values read through float32.
  const Tensor t = is_narrow(tensor.dtype()) ? tensor.cast(DType::Float32) : tensor;
  ValueSummary s;
  s.count = t.numel();
  dispatch_dtype<true>(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = t.data<T>();
    for (int64_t i = 0; i < s.count && s.first.size() < shown; ++i) s.first.push_back(element_text(p[i]));
    if constexpr (!std::is_same_v<T, std::string>) add_statistics(p, s.count, s);
  });
  return s;
}

std::string summary_text(const ValueSummary& s) {
  if (s.count == 0) return "(no elements)";
  std::string text = "[";
  for (size_t i = 0; i < s.first.size(); ++i) text += (i ? ", " : "") + s.first[i];
  text += int64_t(s.first.size()) < s.count ? ", ...]" : "]";
  if (!s.numeric) return text;
  text += " min " + number_text(s.min) + ", max " + number_text(s.max) + ", mean " + number_text(s.mean);
  if (s.has_nans) text += ", NaN " + std::to_string(s.nans);
  return text;
}

Json summary_json(const ValueSummary& s) {
  Json j;
  j["first"] = s.first;
  if (s.numeric) {
    j["min"] = s.min, j["max"] = s.max, j["mean"] = s.mean;
    if (s.has_nans) j["nan_count"] = s.nans;
  }
  return j;
}

}  // namespace terrace::cli
