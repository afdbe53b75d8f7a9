// Tensor comparison with per-dtype tolerances.
#include "interp/compare.h"

#include <cmath>
#include <sstream>

namespace terrace {

Tolerance Tolerance::for_dtype(DType t) {
  switch (t) {
    case DType::Float32:
    case DType::Float64: return {1e-3, 1e-5};
    case DType::Float16: return {1e-3, 1e-3};
    case DType::BFloat16: return {1.6e-2, 1e-5};
    default: return {0, 0};
  }
}

namespace {
std::string index_str(const Shape& shape, int64_t i) {
  Shape idx(shape.size());
  for (int64_t d = int64_t(shape.size()) - 1; d >= 0; --d) {
    idx[size_t(d)] = shape[size_t(d)] ? i % shape[size_t(d)] : 0;
    i = shape[size_t(d)] ? i / shape[size_t(d)] : 0;
  }
  return shape_str(idx);
}
}  // namespace

Comparison compare_tensors(const Tensor& expected, const Tensor& got, const Tolerance& tol,
                           const Tensor& allowance) {
  Comparison c;
  auto mismatch = [&](const std::string& m) {
    c.equal = false;
    if (c.message.empty()) c.message = m;
  };
  if (expected.defined() != got.defined()) {
    mismatch(expected.defined() ? "expected a tensor, got none" : "expected no tensor, got one");
    return c;
  }
  if (!expected.defined()) return c;
  if (expected.dtype() != got.dtype()) {
    mismatch(std::string("dtype differs: expected ") + dtype_name(expected.dtype()) + ", got " +
             dtype_name(got.dtype()));
    return c;
  }
  if (expected.shape() != got.shape()) {
    mismatch("shape differs: expected " + shape_str(expected.shape()) + ", got " +
             shape_str(got.shape()));
    return c;
  }
  const int64_t n = expected.numel();
  if (expected.dtype() == DType::String) {
    for (int64_t i = 0; i < n; ++i)
      if (expected.data<std::string>()[i] != got.data<std::string>()[i]) {
        ++c.mismatches;
        mismatch("element " + std::to_string(i) + " " + index_str(expected.shape(), i) +
                 ": expected \"" + expected.data<std::string>()[i] + "\", got \"" +
                 got.data<std::string>()[i] + "\"");
      }
    return c;
  }
  const bool exact = !is_float(expected.dtype());
  const double* extra = nullptr;
  if (allowance.defined() && !exact) {
    TERRACE_CHECK(allowance.dtype() == DType::Float64 && allowance.shape() == expected.shape(), Internal,
                  "compare_tensors: allowance ", shape_str(allowance.shape()), " for ", shape_str(expected.shape()));
    extra = allowance.data<double>();
  }
  for (int64_t i = 0; i < n; ++i) {
    double e, g;
    if (is_narrow(expected.dtype())) {
      // float8/int4/float4: the same code, or both NaN (E4M3FN and E5M2 have several NaN codes).
      const uint8_t ec = static_cast<const uint8_t*>(expected.raw())[i], gc = static_cast<const uint8_t*>(got.raw())[i];
      e = expected.get_as_double(i), g = got.get_as_double(i);
      if (ec == gc || (std::isnan(e) && std::isnan(g))) continue;
    } else if (exact) {  // compare as int64 bit patterns so uint64/int64 extremes stay exact
      int64_t ei = expected.get_as_int64(i), gi = got.get_as_int64(i);
      if (ei == gi) continue;
      e = double(ei), g = double(gi);
    } else {
      e = expected.get_as_double(i), g = got.get_as_double(i);
      bool ok;
      if (std::isnan(e) || std::isnan(g)) ok = std::isnan(e) && std::isnan(g);
      else if (std::isinf(e) || std::isinf(g)) ok = e == g;
      else {
        double abs_err = std::fabs(g - e);
        c.max_abs_err = std::max(c.max_abs_err, abs_err);
        if (e != 0) c.max_rel_err = std::max(c.max_rel_err, abs_err / std::fabs(e));
        ok = abs_err <= tol.atol + tol.rtol * std::fabs(e) + (extra ? extra[i] : 0.0);
      }
      if (ok) continue;
    }
    ++c.mismatches;
    std::ostringstream os;
    os.precision(9);
    os << "element " << i << " " << index_str(expected.shape(), i) << ": expected " << e
       << ", got " << g;
    mismatch(os.str());
  }
  if (!c.equal) {
    std::ostringstream os;
    os << " (" << c.mismatches << " of " << n << " elements differ; max abs err " << c.max_abs_err
       << ", max rel err " << c.max_rel_err << ")";
    c.message += os.str();
  }
  return c;
}

}  // namespace terrace
