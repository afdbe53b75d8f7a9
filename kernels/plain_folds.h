// The last pass of both pipelines: every Accumulate as the Store it computes, accumulator[index] =
// fold_combine(op, accumulator[index], value), once the passes before it have read the folds (the
// lane split, the GPU's combines across threads). The renderers print stores, not folds.
#pragma once
#include "kernels/ir.h"

namespace terrace::kernels {

Stmt plain_folds(const Stmt& body);

}  // namespace terrace::kernels
