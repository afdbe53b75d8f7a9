// Kernels that read elements picked by an index tensor or mask: Gather, GatherElements,
// GatherND, Compress and NonZero.
#include "interp/ops/shape_common.h"

namespace terrace::ops {
void copy_blocks(const Tensor& src, Tensor& dst, const std::vector<int64_t>& from, int64_t block) {
  if (block == 0) return;
  int64_t count = int64_t(from.size());
  dispatch_move(src.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* s = elems<T>(src);
    T* d = elems<T>(dst);
#pragma omp parallel for schedule(static) if (count * block >= (1 << 15) && count > 1)
    for (int64_t i = 0; i < count; ++i) std::copy_n(s + from[size_t(i)], block, d + i * block);
  });
}

Tensor take_along(const Tensor& data, size_t axis, const std::vector<int64_t>& idx,
                  const Shape& idx_shape) {
  const Shape& s = data.shape();
  int64_t outer = shape_numel(std::span(s).first(axis));
  int64_t inner = shape_numel(std::span(s).subspan(axis + 1));
  Shape out(s.begin(), s.begin() + int64_t(axis));
  out.insert(out.end(), idx_shape.begin(), idx_shape.end());
  out.insert(out.end(), s.begin() + int64_t(axis) + 1, s.end());
  std::vector<int64_t> from;
  from.reserve(size_t(outer) * idx.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i : idx) from.push_back((o * s[axis] + i) * inner);
  Tensor result = Tensor::empty(data.dtype(), out);
  copy_blocks(data, result, from, inner);
  return result;
}

namespace {

void gather_kernel(KernelContext& ctx) {
  const Tensor& data = ctx.input(0);
  const Tensor& indices = ctx.input(1);
  TERRACE_CHECK(data.rank() > 0, InvalidArgument, ctx.node.describe(), ": data must not be a scalar");
  size_t axis = size_t(normalize_axis(ctx.node, ctx.node.attr_int("axis", 0), data.rank()));
  std::vector<int64_t> idx = index_values(ctx.node, indices, "indices");
  for (int64_t& i : idx) i = checked_index(ctx.node, i, data.shape()[axis], "Gather");
  ctx.set_output(0, take_along(data, axis, idx, indices.shape()));
}

void gather_elements_kernel(KernelContext& ctx) {
  const Tensor& data = ctx.input(0);
  const Tensor& indices = ctx.input(1);
  TERRACE_CHECK(indices.rank() == data.rank() && data.rank() > 0, InvalidArgument,
                ctx.node.describe(), ": indices ", shape_str(indices.shape()),
                " must have the rank of data ", shape_str(data.shape()));
  size_t axis = size_t(normalize_axis(ctx.node, ctx.node.attr_int("axis", 0), data.rank()));
  std::vector<int64_t> idx = index_values(ctx.node, indices, "indices");
  for (int64_t& i : idx) i = checked_index(ctx.node, i, data.shape()[axis], "GatherElements");
  // Offsets of each output element in data: its own position on every axis but `axis`.
  auto strides = dense_view(data.shape()).strides;
  std::vector<int64_t> base = strides;
  base[axis] = 0;
  for (size_t d = 0; d < base.size(); ++d)
    TERRACE_CHECK(indices.shape()[d] <= data.shape()[d] || d == axis, InvalidArgument,
                  ctx.node.describe(), ": indices ", shape_str(indices.shape()),
                  " exceed data ", shape_str(data.shape()), " on axis ", d);
  std::vector<int64_t> from(idx.size());
  for_each_broadcast(indices.shape(), base, base, [&](int64_t pos, int64_t off, int64_t) {
    from[size_t(pos)] = off + idx[size_t(pos)] * strides[axis];
  });
  Tensor result = Tensor::empty(data.dtype(), indices.shape());
  copy_blocks(data, result, from, 1);
  ctx.set_output(0, std::move(result));
}

}  // namespace

NdIndex nd_index(const Node& node, const Tensor& data, const Tensor& indices, int64_t batch) {
  int64_t r = data.rank(), q = indices.rank();
  TERRACE_CHECK(q >= 1 && r >= 1 && batch >= 0 && batch < std::min(q, r), InvalidArgument,
                node.describe(), ": bad ranks (data ", r, ", indices ", q, ", batch_dims ",
                batch, ")");
  int64_t k = indices.dim(-1);
  TERRACE_CHECK(k >= 1 && batch + k <= r, InvalidArgument, node.describe(),
                ": index tuples of length ", k, " do not fit data of rank ", r);
  for (int64_t d = 0; d < batch; ++d)
    TERRACE_CHECK(indices.dim(d) == data.dim(d), InvalidArgument, node.describe(),
                  ": batch dim ", d, " differs between data and indices");
  const Shape& ds = data.shape();
  NdIndex nd;
  nd.out_shape.assign(indices.shape().begin(), indices.shape().end() - 1);
  nd.out_shape.insert(nd.out_shape.end(), ds.begin() + batch + k, ds.end());
  nd.slice = shape_numel(std::span(ds).subspan(size_t(batch + k)));
  auto strides = dense_view(ds).strides;
  int64_t per_batch = shape_numel(std::span(ds).subspan(size_t(batch)));
  int64_t tuples = indices.numel() / k;
  int64_t batches = shape_numel(std::span(ds).first(size_t(batch)));
  int64_t per_batch_tuples = batches ? tuples / batches : 0;
  std::vector<int64_t> idx = index_values(node, indices, "indices");
  nd.from.resize(size_t(tuples));
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t off = (per_batch_tuples ? t / per_batch_tuples : 0) * per_batch;
    for (int64_t j = 0; j < k; ++j)
      off += checked_index(node, idx[size_t(t * k + j)], ds[size_t(batch + j)], "index tuple") *
             strides[size_t(batch + j)];
    nd.from[size_t(t)] = off;
  }
  return nd;
}

namespace {

void gather_nd_kernel(KernelContext& ctx) {
  const Tensor& data = ctx.input(0);
  NdIndex nd = nd_index(ctx.node, data, ctx.input(1), ctx.node.attr_int("batch_dims", 0));
  Tensor result = Tensor::empty(data.dtype(), nd.out_shape);
  copy_blocks(data, result, nd.from, nd.slice);
  ctx.set_output(0, std::move(result));
}

void compress_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& cond = ctx.input(1);
  TERRACE_CHECK(cond.dtype() == DType::Bool && cond.rank() == 1, InvalidArgument,
                ctx.node.describe(), ": condition must be a 1-D bool tensor");
  bool flat = !ctx.node.has_attr("axis");
  TERRACE_CHECK(flat || x.rank() >= 1, InvalidArgument, ctx.node.describe(),
                ": attribute 'axis' needs an input of rank 1 or more, got a scalar");
  Tensor data = flat ? x.reshaped({x.numel()}) : x;
  size_t axis = flat ? 0 : size_t(normalize_axis(ctx.node, ctx.node.attr_int("axis"), x.rank()));
  std::vector<int64_t> keep;
  for (int64_t i = 0; i < cond.numel(); ++i)
    if (cond.data<bool>()[i]) keep.push_back(checked_index(ctx.node, i, data.shape()[axis], "Compress"));
  ctx.set_output(0, take_along(data, axis, keep, {int64_t(keep.size())}));
}

void nonzero_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  std::vector<int64_t> hits;  // flat positions, in row-major order
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = x.data<T>();
    for (int64_t i = 0; i < x.numel(); ++i)
      if (double(p[i]) != 0.0) hits.push_back(i);
  });
  int64_t r = x.rank(), n = int64_t(hits.size());
  Tensor out = Tensor::empty(DType::Int64, {r, n});
  auto strides = dense_view(x.shape()).strides;
  for (int64_t j = 0; j < n; ++j)
    for (int64_t d = 0; d < r; ++d)
      out.data<int64_t>()[d * n + j] = hits[size_t(j)] / strides[size_t(d)] % x.dim(d);
  ctx.set_output(0, std::move(out));
}

}  // namespace

void register_shape_gather_kernels(KernelTable& t) {
  t.add(Op::Gather, gather_kernel);
  t.add(Op::GatherElements, gather_elements_kernel);
  t.add(Op::GatherND, gather_nd_kernel);
  t.add(Op::Compress, compress_kernel);
  t.add(Op::NonZero, nonzero_kernel);
}

}  // namespace terrace::ops
