// The accuracy of the prelude's float32 exp, tanh and sigmoid (kernels/render_prelude.cpp).
#pragma once

namespace terrace::kernels {

// Relative error against the exact function wherever the result is a normal float (a subnormal
// result is within the smallest normal): what the prelude's comments state, with a little room.
// tests/jit/math_accuracy_test.cpp holds both dialects to these, and tier 1's validation allows
// them in its generated regions (tiers/cpu/kernel_allowance.h).
inline constexpr double kExpMaxRel = 2.5e-7, kTanhMaxRel = 4e-7, kSigmoidMaxRel = 3.5e-7;

}  // namespace terrace::kernels
