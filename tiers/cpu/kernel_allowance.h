// The error allowance of tier 1's generated regions (elementwise chains, reductions, data
// movement): how far their float32 results may legitimately land from the interpreter's.
#pragma once
#include <vector>

#include "interp/graph.h"
#include "tiers/partition.h"

namespace terrace::cpu_kernels {

// Per region output, a bound (float64, the output's shape) on |tier 1 - interpreter| for a region
// tier 1 generates code for, walked op by op on the interpreter's intermediates: the sources are
// the prelude's exp, tanh and sigmoid (kernels/prelude_accuracy.h) against libm's, a reduction's
// or a contracted multiply-add's rounding, and each op carries its inputs' bounds through its
// own slope, so an ill-conditioned formula (a variance as E[x^2] - E[x]^2) widens them as it
// widens any float32 evaluation's error. Undefined tensors (no allowance: the plain tolerance
// judges) for non-float outputs and for a region holding an op the walk does not model.
std::vector<Tensor> error_allowance(const Graph& g, const Region& region, const std::vector<Tensor>& inputs);

}  // namespace terrace::cpu_kernels
