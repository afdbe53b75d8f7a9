// The lane split: a fold of a max or min over a row (an Accumulate of Max, Min, MaxNaN or MinNaN in
// a nest of loops none of which its index reads) rewritten into kLanes partial accumulators, the
// innermost loop's elements folded into them a vector of lanes at a time, then merged. LLVM
// vectorises neither a float max reduction nor a NaN-propagating select, but does the lanes'
// compare-and-select; a NaN-propagating fold also keeps a NaN flag per lane, which makes the result
// NaN. Tier 1 runs it before rendering (kernels/cpu/pipeline.h), and so does the GPU schedule
// (schedule_cuda.h), whose register loops give each thread 4 of the 16 lanes: 4 independent chains.
#pragma once
#include <cstdint>

#include "kernels/ir.h"

namespace terrace::kernels {

inline constexpr int64_t kLanes = 16;

// `body` with every such fold split as above; the folds it writes are Accumulates (into the lanes,
// the NaN flags, and from the lanes into the accumulator), which it does not split again: run once.
Stmt split_lanes(const Stmt& body);

}  // namespace terrace::kernels
