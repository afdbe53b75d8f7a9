// The prelude's vectorised float32 exp, tanh and sigmoid against double-precision references over
// a sweep of every 1021st float of both signs (about 4 million inputs each), compiled by the JIT
// as tier 1 compiles them. The bounds are the accuracy their comments in render_prelude.cpp state,
// with a little room (tests/support/math_sweep.h, shared with tier 2's check on the GPU); the
// tolerance of ARCHITECTURE.md's "Rules the code keeps" (rtol 1e-3) is thousands of times looser.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "jit/cpu/cpu_jit.h"
#include "kernels/render_c.h"
#include "tests/support/math_sweep.h"

namespace terrace::jit {
namespace {

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

template <typename Ref>
void expect_accurate(const std::string& fn, Ref ref, double max_rel) {
  const std::vector<float> xs = testing::math_sweep();
  testing::expect_accurate(fn, xs, run(fn, xs), ref, max_rel);
}

TEST(MathAccuracy, Exp) {
  expect_accurate("tr_exp_f32", [](double x) { return std::exp(x); }, testing::kExpMaxRel);
}

// At the underflow end: below ln(2^-150) exactly 0 (-inf included, a masked softmax's scores),
// computed without an underflowing product; just above it the smallest subnormal, as e^x rounds.
TEST(MathAccuracy, ExpUnderflowsToZeroBelowTheSmallestSubnormal) {
  const float edge = -103.972084f, above = std::nextafter(edge, 0.0f);
  ASSERT_LT(double(edge), std::log(std::ldexp(1.0, -150)));
  ASSERT_GT(double(above), std::log(std::ldexp(1.0, -150)));
  const std::vector<float> xs = {-INFINITY, -3.4e38f, -1e4f, -110.0f, -104.0f, edge, above};
  const std::vector<float> ys = run("tr_exp_f32", xs);
  for (size_t i = 0; i < xs.size(); ++i)
    EXPECT_EQ(ys[i], float(std::exp(double(xs[i])))) << "exp(" << xs[i] << ")";
  EXPECT_EQ(ys[6], std::ldexp(1.0f, -149));
}

TEST(MathAccuracy, Tanh) {
  expect_accurate("tr_tanh_f32", [](double x) { return std::tanh(x); }, testing::kTanhMaxRel);
}

TEST(MathAccuracy, Sigmoid) {
  expect_accurate("tr_sigmoid_f32", [](double x) { return 1 / (1 + std::exp(-x)); }, testing::kSigmoidMaxRel);
}

}  // namespace
}  // namespace terrace::jit
