// Kernels that are one strided copy: Transpose, DepthToSpace, SpaceToDepth, Expand and Tile.
#include "interp/ops/shape_common.h"

namespace terrace::ops {
namespace {

// x read as `shape` (same element count), with its dims permuted by `perm`.
Tensor permute(const Tensor& x, const Shape& shape, const std::vector<int64_t>& perm) {
  auto strides = dense_view(shape).strides;
  Shape out(perm.size());
  View v;
  for (size_t d = 0; d < perm.size(); ++d) {
    out[d] = shape[size_t(perm[d])];
    v.strides.push_back(strides[size_t(perm[d])]);
  }
  return gather_view(x, v, out);
}

void transpose_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  int64_t r = x.rank();
  std::vector<int64_t> perm = ctx.node.attr_ints("perm");
  if (perm.empty() && !ctx.node.has_attr("perm"))
    for (int64_t d = r - 1; d >= 0; --d) perm.push_back(d);
  TERRACE_CHECK(int64_t(perm.size()) == r, InvalidArgument, ctx.node.describe(), ": perm has ",
                perm.size(), " entries for an input of rank ", r);
  perm = normalize_axes(ctx.node, perm, r);  // also rejects repeats, so perm is a permutation
  // Only the order of dims longer than 1 moves data; otherwise share the input's storage.
  std::vector<int64_t> moved;
  for (int64_t p : perm)
    if (x.dim(p) != 1) moved.push_back(p);
  Shape out;
  for (int64_t p : perm) out.push_back(x.dim(p));
  if (std::is_sorted(moved.begin(), moved.end())) return ctx.set_output(0, x.reshaped(out));
  ctx.set_output(0, permute(x, x.shape(), perm));
}

// The 4-D input of DepthToSpace/SpaceToDepth and its blocksize.
struct Blocked {
  int64_t n, c, h, w, bs;
};

Blocked blocked_input(const KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  TERRACE_CHECK(x.rank() == 4, InvalidArgument, ctx.node.describe(), ": input must be 4-D, got ",
                shape_str(x.shape()));
  int64_t bs = ctx.node.attr_int("blocksize");
  TERRACE_CHECK(bs > 0, InvalidModel, ctx.node.describe(), ": blocksize must be positive");
  return {x.dim(0), x.dim(1), x.dim(2), x.dim(3), bs};
}

void depth_to_space_kernel(KernelContext& ctx) {
  Blocked b = blocked_input(ctx);
  int64_t bs2 = checked_mul(ctx.node, b.bs, b.bs);
  TERRACE_CHECK(b.c % bs2 == 0, InvalidArgument, ctx.node.describe(), ": channels ", b.c,
                " are not divisible by blocksize^2");
  int64_t c = b.c / bs2;
  bool crd = ctx.node.attr_string("mode", "DCR") == "CRD";
  Tensor out = crd ? permute(ctx.input(0), {b.n, c, b.bs, b.bs, b.h, b.w}, {0, 1, 4, 2, 5, 3})
                   : permute(ctx.input(0), {b.n, b.bs, b.bs, c, b.h, b.w}, {0, 3, 4, 1, 5, 2});
  ctx.set_output(0, out.reshaped({b.n, c, checked_mul(ctx.node, b.h, b.bs),
                                  checked_mul(ctx.node, b.w, b.bs)}));
}

void space_to_depth_kernel(KernelContext& ctx) {
  Blocked b = blocked_input(ctx);
  TERRACE_CHECK(b.h % b.bs == 0 && b.w % b.bs == 0, InvalidArgument, ctx.node.describe(),
                ": height and width must be divisible by blocksize ", b.bs);
  int64_t h = b.h / b.bs, w = b.w / b.bs;
  Tensor out = permute(ctx.input(0), {b.n, b.c, h, b.bs, w, b.bs}, {0, 3, 5, 1, 2, 4});
  int64_t bs2 = checked_mul(ctx.node, b.bs, b.bs);
  ctx.set_output(0, out.reshaped({b.n, checked_mul(ctx.node, b.c, bs2), h, w}));
}

void expand_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Shape out = broadcast_shapes(ctx.node, x.shape(), int_list_input(ctx, 1, "shape"));
  if (shape_numel(out) == x.numel()) return ctx.set_output(0, x.reshaped(out));  // nothing repeats
  ctx.set_output(0, gather_view(x, {0, broadcast_strides(x.shape(), out)}, out));
}

// Tile reads x as [r0, d0, r1, d1, ...] with stride 0 on each repeat dim, then merges the pairs.
void tile_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  std::vector<int64_t> repeats = int_list_input(ctx, 1, "repeats");
  TERRACE_CHECK(int64_t(repeats.size()) == x.rank(), InvalidArgument, ctx.node.describe(),
                ": repeats has ", repeats.size(), " entries for an input of rank ", x.rank());
  auto strides = dense_view(x.shape()).strides;
  Shape pairs, out;
  View v;
  for (size_t d = 0; d < repeats.size(); ++d) {
    TERRACE_CHECK(repeats[d] >= 0, InvalidArgument, ctx.node.describe(), ": repeats[", d,
                  "] is negative");
    pairs.insert(pairs.end(), {repeats[d], x.shape()[d]});
    v.strides.insert(v.strides.end(), {0, strides[d]});
    out.push_back(checked_mul(ctx.node, repeats[d], x.shape()[d]));
  }
  ctx.set_output(0, gather_view(x, v, pairs).reshaped(out));
}

}  // namespace

void register_shape_transpose_kernels(KernelTable& t) {
  t.add(Op::Transpose, transpose_kernel);
  t.add(Op::DepthToSpace, depth_to_space_kernel);
  t.add(Op::SpaceToDepth, space_to_depth_kernel);
  t.add(Op::Expand, expand_kernel);
  t.add(Op::Tile, tile_kernel);
}

}  // namespace terrace::ops
