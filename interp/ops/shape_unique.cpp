// Unique (sorted or first-seen order, whole tensor or slices along an axis) and ReverseSequence.
#include <map>
#include <numeric>

#include "interp/ops/shape_common.h"

namespace terrace::ops {
namespace {

// The distinct slices of x along an axis: which slice first showed each, each slice's unique id,
// and how often each occurred.
struct Distinct {
  std::vector<int64_t> first, inverse, counts;
};

// rows: n slices of `len` elements each, contiguous (x with the axis moved to the front).
template <typename T>
Distinct distinct_rows(const T* rows, int64_t n, int64_t len, bool sorted) {
  auto less = [&](int64_t a, int64_t b) {
    return std::lexicographical_compare(rows + a * len, rows + (a + 1) * len, rows + b * len,
                                        rows + (b + 1) * len,
                                        [](const T& u, const T& v) { return u < v; });
  };
  std::map<int64_t, int64_t, decltype(less)> seen(less);  // first row of a value -> unique id
  Distinct d;
  for (int64_t i = 0; i < n; ++i) {
    auto [it, fresh] = seen.try_emplace(i, int64_t(d.first.size()));
    if (fresh) {
      d.first.push_back(i);
      d.counts.push_back(0);
    }
    d.inverse.push_back(it->second);
    ++d.counts[size_t(it->second)];
  }
  if (!sorted) return d;
  // Renumber the ids in value order; the map already holds them sorted.
  std::vector<int64_t> rank(d.first.size());
  Distinct s;
  for (auto& [row, id] : seen) {
    rank[size_t(id)] = int64_t(s.first.size());
    s.first.push_back(row);
    s.counts.push_back(d.counts[size_t(id)]);
  }
  for (int64_t& v : d.inverse) v = rank[size_t(v)];
  s.inverse = std::move(d.inverse);
  return s;
}

Tensor int64_vector(const std::vector<int64_t>& v) {
  return Tensor::from_vector<int64_t>({int64_t(v.size())}, v);
}

void unique_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  bool by_axis = ctx.node.has_attr("axis");
  Tensor data = by_axis ? x : x.reshaped({x.numel()});
  size_t axis = by_axis ? size_t(normalize_axis(ctx.node, ctx.node.attr_int("axis"), x.rank())) : 0;
  TERRACE_CHECK(data.rank() > 0, InvalidArgument, ctx.node.describe(), ": input is a scalar");
  // Move the axis to the front so each slice is one contiguous row.
  const Shape& s = data.shape();
  int64_t n = s[axis], len = n ? data.numel() / n : 0;
  int64_t inner = shape_numel(std::span(s).subspan(axis + 1));
  View v{0, {inner, s[axis] * inner, 1}};  // data read as [n, outer, inner]
  Tensor rows = gather_view(data, v, {n, len / std::max<int64_t>(inner, 1), inner});
  bool sorted = ctx.node.attr_int("sorted", 1) != 0;
  Distinct d = dispatch_dtype<true>(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    return distinct_rows(rows.data<T>(), n, len, sorted);
  });
  ctx.set_output(0, take_along(data, axis, d.first, {int64_t(d.first.size())}));
  if (ctx.wants_output(1)) ctx.set_output(1, int64_vector(d.first));
  if (ctx.wants_output(2)) ctx.set_output(2, int64_vector(d.inverse));
  if (ctx.wants_output(3)) ctx.set_output(3, int64_vector(d.counts));
}

void reverse_sequence_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  int64_t time = ctx.node.attr_int("time_axis", 0), batch = ctx.node.attr_int("batch_axis", 1);
  TERRACE_CHECK(x.rank() >= 2 && ((time == 0 && batch == 1) || (time == 1 && batch == 0)),
                InvalidArgument, ctx.node.describe(),
                ": time_axis and batch_axis must be 0 and 1 of an input of rank >= 2");
  std::vector<int64_t> lens = index_values(ctx.node, ctx.input(1), "sequence_lens");
  int64_t steps = x.dim(time), batches = x.dim(batch);
  TERRACE_CHECK(int64_t(lens.size()) == batches, InvalidArgument, ctx.node.describe(),
                ": sequence_lens has ", lens.size(), " entries for ", batches, " batches");
  for (int64_t l : lens)
    TERRACE_CHECK(l >= 0 && l <= steps, InvalidArgument, ctx.node.describe(),
                  ": sequence length ", l, " is outside [0, ", steps, "]");
  int64_t inner = steps * batches != 0 ? x.numel() / (steps * batches) : 0;
  // Output block (t, b) reads input step len-1-t of batch b while t < len, else step t.
  std::vector<int64_t> from;
  for (int64_t i0 = 0; i0 < x.dim(0); ++i0)
    for (int64_t i1 = 0; i1 < x.dim(1); ++i1) {
      int64_t t = time == 0 ? i0 : i1, b = time == 0 ? i1 : i0;
      int64_t src_t = t < lens[size_t(b)] ? lens[size_t(b)] - 1 - t : t;
      int64_t j0 = time == 0 ? src_t : b, j1 = time == 0 ? b : src_t;
      from.push_back((j0 * x.dim(1) + j1) * inner);
    }
  Tensor out = Tensor::empty(x.dtype(), x.shape());
  copy_blocks(x, out, from, inner);
  ctx.set_output(0, std::move(out));
}

}  // namespace

void register_shape_unique_kernels(KernelTable& t) {
  t.add(Op::Unique, unique_kernel);
  t.add(Op::ReverseSequence, reverse_sequence_kernel);
}

}  // namespace terrace::ops
