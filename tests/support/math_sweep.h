// The float32 math prelude's accuracy sweep, shared by tier 1's check (tests/jit/
// math_accuracy_test.cpp, the C++ prelude through the JIT) and tier 2's (tests/gpu_kernels/, the
// CUDA prelude on the GPU): every 1021st float of both signs (about 4 million inputs) and the
// special values, each result against a double-precision reference.
#pragma once
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kernels/prelude_accuracy.h"

namespace terrace::testing {

inline std::vector<float> math_sweep() {
  std::vector<float> xs;
  for (uint32_t u = 0; u <= 0x7f800000u; u += 1021) {
    xs.push_back(std::bit_cast<float>(u));
    xs.push_back(-std::bit_cast<float>(u));
  }
  for (float s : {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 88.72f, -88.72f, 1e-40f, -1e-40f})
    xs.push_back(s);
  return xs;
}

// ys[i] = fn(xs[i]) as computed by the code under test, against ref: the max relative error where
// the reference is a normal float must stay within max_rel; NaN, infinities and zeros (with their
// sign) must be exact, subnormal results within the smallest normal.
template <typename Ref>
void expect_accurate(const std::string& fn, const std::vector<float>& xs, const std::vector<float>& ys, Ref ref,
                     double max_rel) {
  ASSERT_EQ(xs.size(), ys.size());
  double worst = 0;
  float worst_at = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double want = ref(double(xs[i]));
    const float got = ys[i];
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << fn << "(" << xs[i] << ") = " << got;
      continue;
    }
    if (std::abs(want) > std::numeric_limits<float>::max()) {  // rounds to +-inf in float
      EXPECT_EQ(got, float(want)) << fn << "(" << xs[i] << ")";
      continue;
    }
    if (want == 0) {  // tanh(+-0), exp(-inf), sigmoid(-inf): exact, sign included
      EXPECT_EQ(got, 0.0f) << fn << "(" << xs[i] << ")";
      EXPECT_EQ(std::signbit(got), std::signbit(want)) << fn << "(" << xs[i] << ")";
      continue;
    }
    if (std::abs(want) < std::numeric_limits<float>::min()) {  // subnormal: absolute error
      EXPECT_LE(std::abs(got - want), std::numeric_limits<float>::min()) << fn << "(" << xs[i] << ")";
      continue;
    }
    const double rel = std::abs(got - want) / std::abs(want);
    if (rel > worst) worst = rel, worst_at = xs[i];
  }
  EXPECT_LE(worst, max_rel) << fn << " worst at x = " << worst_at;
}

// The bounds both dialects are held to (kernels/prelude_accuracy.h).
using kernels::kExpMaxRel;
using kernels::kSigmoidMaxRel;
using kernels::kTanhMaxRel;

}  // namespace terrace::testing
