// Shared pieces of the reduce family's kernel files (reduce.cpp registers them all).
#pragma once
#include "interp/kernel.h"

namespace terrace::ops {

// A tensor seen as outer x len x inner around one axis: lane (o, i) holds the len elements
// at o*len*inner + k*inner + i.
struct AxisLanes {
  int64_t outer = 1, len = 1, inner = 1;
  int64_t count() const { return outer * inner; }
  int64_t start(int64_t lane) const { return (lane / inner) * len * inner + lane % inner; }
};
// Lanes along `axis` (already normalized) of `shape`; coerce_2d makes a lane span all dims from
// axis on (the opset < 13 Softmax family's 2-D view).
AxisLanes axis_lanes(const Shape& shape, int64_t axis, bool coerce_2d = false);

void register_softmax_kernels(KernelTable& t);  // reduce_softmax.cpp
void register_scan_kernels(KernelTable& t);     // reduce_scan.cpp: CumSum, TopK

}  // namespace terrace::ops
