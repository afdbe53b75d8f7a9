#include "interp/strided_view.h"

namespace terrace {

View dense_view(const Shape& shape, int64_t base) {
  if (shape_numel(shape) == 0) return {base, std::vector<int64_t>(shape.size(), 0)};
  return {base, row_major_strides(shape)};
}

CopyPlan simplify(const Shape& shape, const View& from, const View& to) {
  CopyPlan p;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!p.shape.empty() && p.from.back() == from.strides[d] * shape[d] &&
        p.to.back() == to.strides[d] * shape[d]) {
      p.shape.back() *= shape[d];
      p.from.back() = from.strides[d];
      p.to.back() = to.strides[d];
    } else {
      p.shape.push_back(shape[d]);
      p.from.push_back(from.strides[d]);
      p.to.push_back(to.strides[d]);
    }
  }
  if (p.shape.empty()) p = {{1}, {0}, {0}};
  return p;
}

}  // namespace terrace
