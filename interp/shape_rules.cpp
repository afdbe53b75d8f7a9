#include "interp/shape_rules.h"

#include <algorithm>
#include <limits>

namespace terrace {

Shape reshape_target(const Node& node, const Shape& in, std::vector<int64_t> target,
                     bool allowzero) {
  int infer = -1;
  bool has_zero = false;
  for (size_t i = 0; i < target.size(); ++i) {
    int64_t& d = target[i];
    if (d == 0 && !allowzero) {
      TERRACE_CHECK(i < in.size(), InvalidArgument, node.describe(), ": shape[", i,
                    "] is 0 but the input has rank ", in.size());
      d = in[i];
    }
    if (d == -1) {
      TERRACE_CHECK(infer < 0, InvalidArgument, node.describe(), ": shape ", shape_str(target),
                    " has more than one -1");
      infer = int(i);
      continue;
    }
    TERRACE_CHECK(d >= 0, InvalidArgument, node.describe(), ": shape ", shape_str(target),
                  " has a negative dim");
    has_zero |= d == 0;
  }
  int64_t numel = shape_numel(in);
  if (infer >= 0) {
    Shape rest = target;
    rest[size_t(infer)] = 1;
    int64_t known = shape_numel(rest);  // throws on overflow
    TERRACE_CHECK(!has_zero || !allowzero, InvalidArgument, node.describe(),
                  ": with allowzero, a shape may not hold both 0 and -1");
    TERRACE_CHECK(known != 0 && numel % known == 0, InvalidArgument, node.describe(),
                  ": cannot infer the -1 dim reshaping ", shape_str(in), " to ", shape_str(target));
    target[size_t(infer)] = numel / known;
  }
  TERRACE_CHECK(shape_numel(target) == numel, InvalidArgument, node.describe(), ": cannot reshape ",
                shape_str(in), " to ", shape_str(target));
  return target;
}

AxisRange clamp_range(int64_t start, int64_t end, int64_t step, int64_t dim) {
  // Negative bounds count from the end; then clamp to what the step direction can reach.
  // Neither the additions nor the lengths overflow, even for INT64_MIN/MAX bounds and steps.
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  if (dim == 0) return {0, step, 0};
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
    return {start, step, end > start ? (end - start - 1) / step + 1 : 0};
  }
  start = std::clamp<int64_t>(start, 0, dim - 1);
  end = std::clamp<int64_t>(end, -1, dim - 1);
  // -step overflows only for INT64_MIN, which takes one element like any step past the range.
  int64_t mag = step == std::numeric_limits<int64_t>::min() ? std::numeric_limits<int64_t>::max()
                                                            : -step;
  return {start, step, start > end ? (start - end - 1) / mag + 1 : 0};
}

PadMode pad_mode(const Node& node) {
  std::string m = node.attr_string("mode", "constant");
  if (m == "constant") return PadMode::Constant;
  if (m == "reflect") return PadMode::Reflect;
  if (m == "edge") return PadMode::Edge;
  if (m == "wrap") return PadMode::Wrap;
  fail(ErrorCode::InvalidModel, node.describe(), ": unknown mode '", m, "'");
}

}  // namespace terrace
