// Strided views of row-major buffers and the plan of a copy between two of them: shared by the
// interpreter's copy engine (interp/ops/shape_copy.cpp) and tier 1's data-movement lowering
// (kernels/lower_movement.cpp), so that both read a Transpose, Slice or Expand the same way.
#pragma once
#include <cstdint>
#include <vector>

#include "interp/tensor.h"

namespace terrace {

// Element (i0, i1, ...) lies at base + sum(i_d * strides[d]).
struct View {
  int64_t base = 0;
  std::vector<int64_t> strides;
};

// The row-major view of a whole tensor of `shape`, offset by `base` (an empty shape's strides are
// all 0: they may overflow, and nothing is read through them).
View dense_view(const Shape& shape, int64_t base = 0);

// One copy of `shape` elements from view `from` to view `to`, with unit dims dropped and dims
// merged wherever both views are contiguous across them: most real copies become a few long rows.
// A copy of one element (or of a shape of unit dims) is the plan {{1}, {0}, {0}}.
struct CopyPlan {
  Shape shape;
  std::vector<int64_t> from, to;
};
CopyPlan simplify(const Shape& shape, const View& from, const View& to);

}  // namespace terrace
