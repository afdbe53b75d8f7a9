// Helpers shared by the reference kernels.
#include "interp/ops/common.h"

namespace terrace::ops {

int64_t checked_numel(const Node& node, std::initializer_list<int64_t> dims, std::string_view what) {
  int64_t n = 1;
  for (int64_t d : dims) {
    TERRACE_CHECK(d >= 0, InvalidArgument, node.describe(), ": ", what, " gives a negative size ", d);
    TERRACE_CHECK(d == 0 || n <= kMaxElements / d, InvalidArgument, node.describe(), ": ", what,
                  " gives a result of more than 2^40 elements (", d, " times ", n, ")");
    n *= d;
  }
  return n;
}

int64_t normalize_axis(const Node& node, int64_t axis, int64_t rank) {
  int64_t a = axis < 0 ? axis + rank : axis;
  TERRACE_CHECK(a >= 0 && a < std::max<int64_t>(rank, 1), InvalidModel, node.describe(),
                ": axis ", axis, " is out of range for rank ", rank);
  return a;
}

Shape broadcast_shapes(const Node& node, const Shape& a, const Shape& b) {
  size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    TERRACE_CHECK(da == db || da == 1 || db == 1, InvalidArgument, node.describe(),
                  ": shapes ", shape_str(a), " and ", shape_str(b), " do not broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::vector<int64_t> broadcast_strides(const Shape& in, const Shape& out) {
  std::vector<int64_t> s(out.size(), 0);
  auto rs = row_major_strides(in);
  size_t lead = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) s[lead + i] = in[i] == 1 ? 0 : rs[i];
  return s;
}

StridedIter::StridedIter(const Shape& shape, std::vector<std::vector<int64_t>> strides,
                         int64_t start)
    : shape_(shape), strides_(std::move(strides)), idx_(shape.size(), 0),
      off_(strides_.size(), 0), pos_(start), total_(shape_numel(shape)) {
  int64_t rem = start;
  for (int64_t d = int64_t(shape_.size()) - 1; d >= 0 && rem > 0; --d) {
    idx_[size_t(d)] = shape_[size_t(d)] ? rem % shape_[size_t(d)] : 0;
    rem = shape_[size_t(d)] ? rem / shape_[size_t(d)] : 0;
  }
  for (size_t k = 0; k < strides_.size(); ++k)
    for (size_t d = 0; d < shape_.size(); ++d) off_[k] += idx_[d] * strides_[k][d];
}

void StridedIter::next() {
  ++pos_;
  for (int64_t d = int64_t(shape_.size()) - 1; d >= 0; --d) {
    size_t ud = size_t(d);
    if (++idx_[ud] < shape_[ud]) {
      for (size_t k = 0; k < strides_.size(); ++k) off_[k] += strides_[k][ud];
      return;
    }
    for (size_t k = 0; k < strides_.size(); ++k) off_[k] -= (shape_[ud] - 1) * strides_[k][ud];
    idx_[ud] = 0;
  }
}

}  // namespace terrace::ops
