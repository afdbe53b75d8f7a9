// The prelude's vectorised float32 exp, tanh and sigmoid against double-precision references over
// a sweep of every 1021st float of both signs (about 4 million inputs each), compiled by the JIT
// as tier 1 compiles them. The bounds are the accuracy their comments in render_prelude.cpp state,
// with a little room; the tolerance of ARCHITECTURE.md's "Rules the code keeps" (rtol 1e-3) is thousands of times looser.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "jit/cpu_jit.h"
#include "kernels/render_c.h"

namespace terrace::jit {
namespace {

std::vector<float> sweep() {
  std::vector<float> xs;
  for (uint32_t u = 0; u <= 0x7f800000u; u += 1021) {
    xs.push_back(std::bit_cast<float>(u));
    xs.push_back(-std::bit_cast<float>(u));
  }
  for (float s : {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 88.72f, -88.72f, 1e-40f, -1e-40f})
    xs.push_back(s);
  return xs;
}

// fn applied to every input by a JIT-compiled, vectorised loop.
std::vector<float> run(const std::string& fn, const std::vector<float>& xs) {
  const std::string kernel = "extern \"C\" void apply(void** b, int64_t begin, int64_t end) {\n"
                             "  const float* __restrict x = (const float*)b[0];\n"
                             "  float* __restrict y = (float*)b[1];\n"
                             "  for (int64_t i = begin; i < end; ++i) y[i] = " + fn + "(x[i]);\n}\n";
  auto code = CpuJit::global().compile("math_" + fn, kernels::render_prelude(kernels::Dialect::Cpp, kernel) + kernel, {"apply"});
  std::vector<float> ys(xs.size());
  void* buffers[2] = {const_cast<float*>(xs.data()), ys.data()};
  code->kernel("apply")(buffers, 0, int64_t(xs.size()));
  return ys;
}

// Max relative error where the reference is a normal float; NaN, infinities and zeros exact.
template <typename Ref>
void expect_accurate(const std::string& fn, Ref ref, double max_rel) {
  std::vector<float> xs = sweep();
  std::vector<float> ys = run(fn, xs);
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

TEST(MathAccuracy, Exp) {
  expect_accurate("tr_exp_f32", [](double x) { return std::exp(x); }, 2.5e-7);
}

TEST(MathAccuracy, Tanh) {
  expect_accurate("tr_tanh_f32", [](double x) { return std::tanh(x); }, 4e-7);
}

TEST(MathAccuracy, Sigmoid) {
  expect_accurate("tr_sigmoid_f32", [](double x) { return 1 / (1 + std::exp(-x)); }, 3.5e-7);
}

}  // namespace
}  // namespace terrace::jit
