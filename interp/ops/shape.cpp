// Reference kernels of the 'shape' family (see interp/ops.def): registration, plus the ops that
// only change a tensor's shape (sharing its storage) or describe it.
#include "interp/ops/shape_common.h"
#include "interp/shape_rules.h"

namespace terrace {
namespace ops {
namespace {

void reshape_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Shape s = reshape_target(ctx.node, x.shape(), int_list_input(ctx, 1, "shape"),
                           ctx.node.attr_int("allowzero", 0) != 0);
  ctx.set_output(0, x.reshaped(std::move(s)));
}

void flatten_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  int64_t axis = ctx.node.attr_int("axis", 1), r = x.rank();
  TERRACE_CHECK(axis >= -r && axis <= r, InvalidArgument, ctx.node.describe(), ": axis ", axis,
                " is out of range for rank ", r);
  if (axis < 0) axis += r;
  int64_t outer = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.dim(d);
  int64_t inner = 1;
  for (int64_t d = axis; d < r; ++d) inner *= x.dim(d);
  ctx.set_output(0, x.reshaped({outer, inner}));
}

// Squeeze/Unsqueeze axes: an attribute before opset 13, an optional input from 13.
std::optional<std::vector<int64_t>> axes_operand(const KernelContext& ctx) {
  if (ctx.has_input(1)) return int_list_input(ctx, 1, "axes");
  if (ctx.node.has_attr("axes")) return ctx.node.attr_ints("axes");
  return std::nullopt;
}

void squeeze_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  std::vector<bool> drop(x.shape().size(), false);
  if (auto axes = axes_operand(ctx)) {
    for (int64_t a : normalize_axes(ctx.node, *axes, x.rank())) {
      TERRACE_CHECK(x.dim(a) == 1, InvalidArgument, ctx.node.describe(), ": cannot squeeze axis ",
                    a, " of shape ", shape_str(x.shape()));
      drop[size_t(a)] = true;
    }
  } else {
    for (size_t d = 0; d < drop.size(); ++d) drop[d] = x.shape()[d] == 1;
  }
  Shape s;
  for (size_t d = 0; d < drop.size(); ++d)
    if (!drop[d]) s.push_back(x.shape()[d]);
  ctx.set_output(0, x.reshaped(std::move(s)));
}

void unsqueeze_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  auto axes = axes_operand(ctx);
  TERRACE_CHECK(axes.has_value(), InvalidModel, ctx.node.describe(), ": axes are required");
  int64_t rank = x.rank() + int64_t(axes->size());
  std::vector<bool> insert(size_t(rank), false);
  for (int64_t a : normalize_axes(ctx.node, *axes, rank)) insert[size_t(a)] = true;
  Shape s;
  size_t next = 0;
  for (int64_t d = 0; d < rank; ++d) s.push_back(insert[size_t(d)] ? 1 : x.shape()[next++]);
  ctx.set_output(0, x.reshaped(std::move(s)));
}

void shape_kernel(KernelContext& ctx) {
  const Shape& s = ctx.input(0).shape();
  int64_t r = int64_t(s.size());
  auto clamp = [&](int64_t v) { return std::clamp(v < 0 ? v + r : v, int64_t(0), r); };
  int64_t start = clamp(ctx.node.attr_int("start", 0)), end = clamp(ctx.node.attr_int("end", r));
  std::vector<int64_t> dims(s.begin() + start, s.begin() + std::max(start, end));
  ctx.set_output(0, Tensor::from_vector<int64_t>({int64_t(dims.size())}, dims));
}

void size_kernel(KernelContext& ctx) { ctx.set_output(0, Tensor::scalar<int64_t>(ctx.input(0).numel())); }

// Constant's one value attribute, as a tensor.
Tensor constant_value(const Node& node) {
  if (const Attribute* a = node.find_attr("value")) return a->t;
  if (const Attribute* a = node.find_attr("value_float")) return Tensor::scalar<float>(a->f);
  if (const Attribute* a = node.find_attr("value_int")) return Tensor::scalar<int64_t>(a->i);
  if (const Attribute* a = node.find_attr("value_string")) return Tensor::scalar<std::string>(a->s);
  if (const Attribute* a = node.find_attr("value_floats"))
    return Tensor::from_vector<float>({int64_t(a->floats.size())}, a->floats);
  if (const Attribute* a = node.find_attr("value_ints"))
    return Tensor::from_vector<int64_t>({int64_t(a->ints.size())}, a->ints);
  if (const Attribute* a = node.find_attr("value_strings"))
    return Tensor::from_vector<std::string>({int64_t(a->strings.size())}, a->strings);
  TERRACE_CHECK(!node.has_attr("sparse_value"), NotImplemented, node.describe(),
                ": sparse constants are not supported");
  fail(ErrorCode::InvalidModel, node.describe(), ": Constant has no value attribute");
}

void constant_kernel(KernelContext& ctx) {
  Tensor v = constant_value(ctx.node);
  TERRACE_CHECK(v.defined(), InvalidModel, ctx.node.describe(), ": the value attribute is empty");
  ctx.set_output(0, std::move(v));
}

void constant_of_shape_kernel(KernelContext& ctx) {
  std::vector<int64_t> dims = int_list_input(ctx, 0, "input");
  Tensor value = ctx.node.has_attr("value") ? ctx.node.attr_tensor("value") : Tensor::scalar(0.0f);
  TERRACE_CHECK(value.numel() == 1, InvalidModel, ctx.node.describe(),
                ": value must hold one element, got ", value.numel());
  Tensor out = Tensor::empty(value.dtype(), Shape(dims));
  fill_from(out, value);
  ctx.set_output(0, std::move(out));
}

}  // namespace

void register_shape_view_kernels(KernelTable& t) {
  t.add(Op::Reshape, reshape_kernel);
  t.add(Op::Flatten, flatten_kernel);
  t.add(Op::Squeeze, squeeze_kernel);
  t.add(Op::Unsqueeze, unsqueeze_kernel);
  t.add(Op::Shape, shape_kernel);
  t.add(Op::Size, size_kernel);
  t.add(Op::Constant, constant_kernel);
  t.add(Op::ConstantOfShape, constant_of_shape_kernel);
}

}  // namespace ops

void register_shape_kernels(KernelTable& t) {
  ops::register_shape_view_kernels(t);
  ops::register_shape_transpose_kernels(t);
  ops::register_shape_slice_kernels(t);
  ops::register_shape_pad_kernels(t);
  ops::register_shape_gather_kernels(t);
  ops::register_shape_scatter_kernels(t);
  ops::register_shape_resize_kernels(t);
  ops::register_shape_gen_kernels(t);
  ops::register_shape_unique_kernels(t);
}

}  // namespace terrace
