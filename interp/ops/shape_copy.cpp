// The strided copy engine behind Transpose, Slice, Concat, Split, Expand, Tile and friends, plus
// the small input helpers every shape-family kernel uses.
#include <cstring>

#include "interp/ops/shape_common.h"

namespace terrace::ops {
namespace {

// Copies below this many elements stay on one thread: spawning costs more than it saves.
constexpr int64_t kParallelMin = 1 << 15;
// Edge of the square tiles a transpose moves through, small enough for both tiles to stay in L1.
constexpr int64_t kTile = 32;

// Offsets of row `row` (an index over all dims but the last) in both views.
void row_offsets(const CopyPlan& p, int64_t row, int64_t* from, int64_t* to) {
  *from = *to = 0;
  for (int64_t d = int64_t(p.shape.size()) - 2; d >= 0; --d) {
    int64_t i = row % p.shape[size_t(d)];
    row /= p.shape[size_t(d)];
    *from += i * p.from[size_t(d)];
    *to += i * p.to[size_t(d)];
  }
}

template <typename T>
void copy_rows(const T* src, T* dst, const CopyPlan& p, int64_t total) {
  int64_t inner = p.shape.back(), si = p.from.back(), di = p.to.back();
  int64_t rows = total / inner;
#pragma omp parallel for schedule(static) if (total >= kParallelMin && rows > 1)
  for (int64_t r = 0; r < rows; ++r) {
    int64_t so, dof;
    row_offsets(p, r, &so, &dof);
    const T* s = src + so;
    T* d = dst + dof;
    if (si == 1 && di == 1) {
      std::copy_n(s, inner, d);
    } else if (si == 0 && di == 1) {
      std::fill_n(d, inner, *s);
    } else {
      for (int64_t j = 0; j < inner; ++j) d[j * di] = s[j * si];
    }
  }
}

// A transpose: dim k is contiguous in the source while the last dim is contiguous in the
// destination. Moves kTile x kTile tiles so that both sides are read in cache-line runs.
template <typename T>
void copy_tiled(const T* src, T* dst, const CopyPlan& p, size_t k, int64_t total) {
  size_t last = p.shape.size() - 1;
  CopyPlan outer;  // every dim but k and last
  for (size_t d = 0; d < last; ++d)
    if (d != k) {
      outer.shape.push_back(p.shape[d]);
      outer.from.push_back(p.from[d]);
      outer.to.push_back(p.to[d]);
    }
  outer.shape.push_back(1);  // row_offsets skips the last dim
  outer.from.push_back(0);
  outer.to.push_back(0);
  int64_t K = p.shape[k], J = p.shape[last], dk = p.to[k], sj = p.from[last];
  int64_t ktiles = (K + kTile - 1) / kTile, items = total / (K * J) * ktiles;
#pragma omp parallel for schedule(static) if (total >= kParallelMin && items > 1)
  for (int64_t item = 0; item < items; ++item) {
    int64_t so, dof;
    row_offsets(outer, item / ktiles, &so, &dof);
    int64_t k0 = item % ktiles * kTile, k1 = std::min(K, k0 + kTile);
    for (int64_t j0 = 0; j0 < J; j0 += kTile) {
      int64_t j1 = std::min(J, j0 + kTile);
      for (int64_t kk = k0; kk < k1; ++kk) {
        T* d = dst + dof + kk * dk;
        const T* s = src + so + kk;
        for (int64_t j = j0; j < j1; ++j) d[j] = s[j * sj];
      }
    }
  }
}

}  // namespace

void copy_view(const Tensor& src, const View& from, Tensor& dst, const View& to,
               const Shape& shape) {
  TERRACE_ASSERT(src.dtype() == dst.dtype(), "copy_view between dtypes");
  int64_t total = shape_numel(shape);
  if (total == 0) return;
  CopyPlan p = simplify(shape, from, to);
  dispatch_move(src.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* s = elems<T>(src) + from.base;
    T* d = elems<T>(dst) + to.base;
    size_t last = p.shape.size() - 1;
    if (p.from[last] > 1 && p.to[last] == 1 && p.shape[last] >= 4)
      for (size_t k = 0; k < last; ++k)
        if (p.from[k] == 1 && p.shape[k] >= 4) return copy_tiled(s, d, p, k, total);
    copy_rows(s, d, p, total);
  });
}

Tensor gather_view(const Tensor& src, const View& from, const Shape& shape) {
  Tensor out = Tensor::empty(src.dtype(), shape);
  copy_view(src, from, out, dense_view(shape), shape);
  return out;
}

void fill_from(Tensor& t, const Tensor& value, int64_t at) {
  TERRACE_ASSERT(t.dtype() == value.dtype(), "fill_from between dtypes");
  // A broadcast copy: the source view repeats one element (stride 0) over a flat destination.
  copy_view(value, {at, {0}}, t, {0, {1}}, {t.numel()});
}

std::vector<int64_t> index_values(const Node& node, const Tensor& t, const char* what) {
  TERRACE_CHECK(t.dtype() == DType::Int32 || t.dtype() == DType::Int64, InvalidArgument,
                node.describe(), ": ", what, " must be int32 or int64, got ", dtype_name(t.dtype()));
  return t.to_int64_vector();
}

std::vector<int64_t> int_list_input(const KernelContext& ctx, size_t i, const char* what) {
  const Tensor& t = ctx.input(i);
  TERRACE_CHECK(is_integer(t.dtype()), InvalidArgument, ctx.node.describe(), ": input '", what,
                "' must be an integer tensor, got ", dtype_name(t.dtype()));
  TERRACE_CHECK(t.rank() <= 1, InvalidArgument, ctx.node.describe(), ": input '", what,
                "' must be 1-D, got shape ", shape_str(t.shape()));
  return t.to_int64_vector();
}

std::vector<int64_t> normalize_axes(const Node& node, std::vector<int64_t> axes, int64_t rank) {
  std::vector<bool> seen(size_t(std::max<int64_t>(rank, 1)), false);
  for (int64_t& a : axes) {
    TERRACE_CHECK(a >= -rank && a < rank, InvalidArgument, node.describe(), ": axis ", a,
                  " is out of range for rank ", rank);
    if (a < 0) a += rank;
    TERRACE_CHECK(!seen[size_t(a)], InvalidArgument, node.describe(), ": axis ", a,
                  " is repeated");
    seen[size_t(a)] = true;
  }
  return axes;
}

}  // namespace terrace::ops
