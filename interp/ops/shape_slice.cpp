// Kernels that cut tensors into pieces or glue them together: Slice, Split and Concat.
#include <limits>

#include "interp/ops/shape_common.h"
#include "interp/shape_rules.h"

namespace terrace::ops {
namespace {

// Slice's operands: inputs from opset 10, attributes before.
struct SliceArgs {
  std::vector<int64_t> starts, ends, axes, steps;
};

SliceArgs slice_args(const KernelContext& ctx, int64_t rank) {
  SliceArgs a;
  const Node& n = ctx.node;
  if (ctx.has_input(1)) {
    a.starts = index_values(n, ctx.input(1), "starts");
    a.ends = index_values(n, ctx.input(2), "ends");
    if (ctx.has_input(3)) a.axes = index_values(n, ctx.input(3), "axes");
    if (ctx.has_input(4)) a.steps = index_values(n, ctx.input(4), "steps");
  } else {
    a.starts = n.attr_ints("starts");
    a.ends = n.attr_ints("ends");
    a.axes = n.attr_ints("axes");
  }
  size_t k = a.starts.size();
  bool has_axes = ctx.has_input(1) ? ctx.has_input(3) : n.has_attr("axes");
  if (has_axes) {
    a.axes = normalize_axes(n, a.axes, rank);
  } else {
    for (size_t i = 0; i < k; ++i) a.axes.push_back(int64_t(i));
  }
  if (!ctx.has_input(4)) a.steps.assign(k, 1);
  TERRACE_CHECK(a.ends.size() == k && a.axes.size() == k && a.steps.size() == k, InvalidArgument,
                n.describe(), ": starts, ends, axes and steps must have equal lengths");
  TERRACE_CHECK(int64_t(k) <= rank, InvalidArgument, n.describe(), ": ", k,
                " slice axes for an input of rank ", rank);
  return a;
}

void slice_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  SliceArgs a = slice_args(ctx, x.rank());
  Shape out = x.shape();
  View v = dense_view(x.shape());
  bool whole = true;
  for (size_t i = 0; i < a.axes.size(); ++i) {
    size_t ax = size_t(a.axes[i]);
    TERRACE_CHECK(a.steps[i] != 0, InvalidArgument, ctx.node.describe(), ": steps[", i,
                  "] is 0");
    AxisRange r = clamp_range(a.starts[i], a.ends[i], a.steps[i], out[ax]);
    whole &= r.start == 0 && r.step == 1 && r.len == out[ax];
    v.base += r.start * v.strides[ax];
    v.strides[ax] = r.len > 1 ? v.strides[ax] * r.step : 0;  // |step| < dim when len > 1
    out[ax] = r.len;
  }
  // A slice that keeps everything shares the input's storage instead of copying it.
  ctx.set_output(0, whole ? x : gather_view(x, v, out));
}

// The piece sizes Split cuts `dim` into: the split operand (an input from opset 13, an attribute
// before), or equal parts for each output (the last one smaller when they do not divide evenly).
std::vector<int64_t> split_sizes(const KernelContext& ctx, int64_t dim) {
  std::vector<int64_t> sizes;
  if (ctx.has_input(1)) sizes = index_values(ctx.node, ctx.input(1), "split");
  else sizes = ctx.node.attr_ints("split");
  if (sizes.empty()) {
    int64_t parts = ctx.node.attr_int("num_outputs", int64_t(ctx.num_outputs()));
    TERRACE_CHECK(parts > 0 && parts == int64_t(ctx.num_outputs()), InvalidModel,
                  ctx.node.describe(), ": num_outputs ", parts, " differs from the ",
                  ctx.num_outputs(), " outputs");
    int64_t each = (dim + parts - 1) / parts;
    for (int64_t p = 0; p < parts; ++p) sizes.push_back(std::clamp<int64_t>(dim - p * each, 0, each));
  }
  int64_t left = dim;  // counts down, so huge sizes cannot overflow a sum
  for (int64_t s : sizes) {
    TERRACE_CHECK(s >= 0 && s <= left, InvalidArgument, ctx.node.describe(), ": split ",
                  shape_str(sizes), " does not cut a dim of ", dim);
    left -= s;
  }
  TERRACE_CHECK(left == 0 && sizes.size() == ctx.num_outputs(), InvalidArgument,
                ctx.node.describe(), ": split ", shape_str(sizes), " does not cut a dim of ", dim,
                " into ", ctx.num_outputs(), " outputs");
  return sizes;
}

void split_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  size_t axis = size_t(normalize_axis(ctx.node, ctx.node.attr_int("axis", 0), x.rank()));
  TERRACE_CHECK(x.rank() > 0, InvalidArgument, ctx.node.describe(), ": cannot split a scalar");
  std::vector<int64_t> sizes = split_sizes(ctx, x.shape()[axis]);
  View v = dense_view(x.shape());
  for (size_t i = 0; i < sizes.size(); ++i) {
    Shape out = x.shape();
    out[axis] = sizes[i];
    if (ctx.wants_output(i)) ctx.set_output(i, gather_view(x, v, out));
    v.base += sizes[i] * v.strides[axis];
  }
}

void concat_kernel(KernelContext& ctx) {
  TERRACE_CHECK(ctx.num_inputs() > 0, InvalidModel, ctx.node.describe(), ": no inputs");
  const Tensor& first = ctx.input(0);
  size_t axis = size_t(normalize_axis(ctx.node, ctx.node.attr_int("axis"), first.rank()));
  TERRACE_CHECK(first.rank() > 0, InvalidArgument, ctx.node.describe(),
                ": cannot concatenate scalars");
  Shape out = first.shape();
  out[axis] = 0;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    const Tensor& t = ctx.input(i);
    bool fits = t.dtype() == first.dtype() && t.rank() == first.rank();
    for (size_t d = 0; fits && d < out.size(); ++d) fits = d == axis || t.shape()[d] == out[d];
    TERRACE_CHECK(fits, InvalidArgument, ctx.node.describe(), ": input ", i, " (",
                  dtype_name(t.dtype()), shape_str(t.shape()), ") does not match input 0 (",
                  dtype_name(first.dtype()), shape_str(first.shape()), ") off axis ", axis);
    out[axis] += t.shape()[axis];
  }
  Tensor result = Tensor::empty(first.dtype(), out);
  View to = dense_view(out);
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    const Tensor& t = ctx.input(i);
    copy_view(t, dense_view(t.shape()), result, to, t.shape());
    to.base += t.shape()[axis] * to.strides[axis];
  }
  ctx.set_output(0, std::move(result));
}

}  // namespace

void register_shape_slice_kernels(KernelTable& t) {
  t.add(Op::Slice, slice_kernel);
  t.add(Op::Split, split_kernel);
  t.add(Op::Concat, concat_kernel);
}

}  // namespace terrace::ops
