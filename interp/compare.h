// Tensor comparison with per-dtype tolerances: the one judge of "same result" (validation, tests, CLI).
#pragma once
#include <string>

#include "interp/tensor.h"

namespace terrace {

struct Tolerance {
  double rtol = 1e-3;
  double atol = 1e-5;
  // the tolerances of ARCHITECTURE.md's "Rules the code keeps" for a compiled tier against the interpreter, by dtype:
  // fp32 1e-3/1e-5, fp16 1e-3/1e-3, bf16 1.6e-2/1e-5, float64 as fp32, integers and bools exact.
  static Tolerance for_dtype(DType t);
};

struct Comparison {
  bool equal = true;
  std::string message;     // first mismatch: "element 17 (index [0,4,1]): expected 1.5, got 1.7"
  double max_abs_err = 0;  // over all finite elements
  double max_rel_err = 0;
  int64_t mismatches = 0;
};

// `expected` is the reference. Dtypes and shapes must match exactly; floats match when
// |got - expected| <= atol + rtol * |expected| (+ allowance[i], when `allowance` is a float64
// tensor of expected's shape: an error bound the caller proves for that element), NaN positions
// must agree and infinities must be equal; integers, bools and strings must be equal.
Comparison compare_tensors(const Tensor& expected, const Tensor& got, const Tolerance& tol,
                           const Tensor& allowance = Tensor());

}  // namespace terrace
