// Tier 1's kernel pipeline: a lowered (device-neutral) kernel prepared for the C renderer, each
// pass followed by verify(): the lane split of a row's max or min (kernels/split_lanes.h), then
// every fold as its store (kernels/plain_folds.h).
#pragma once
#include "kernels/ir.h"

namespace terrace::kernels::cpu {

// `f` with its body after the passes.
LoweredFunc run_cpu_passes(const LoweredFunc& f);

}  // namespace terrace::kernels::cpu
