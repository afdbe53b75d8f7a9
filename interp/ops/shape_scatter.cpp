// Kernels that write updates at indexed positions: Scatter (deprecated), ScatterElements and
// ScatterND, with reduction none/add/mul/max/min.
#include "interp/ops/shape_common.h"

namespace terrace::ops {
namespace {

enum class Reduction { None, Add, Mul, Max, Min };

Reduction reduction_of(const Node& node) {
  std::string r = node.attr_string("reduction", "none");
  if (r == "none") return Reduction::None;
  if (r == "add") return Reduction::Add;
  if (r == "mul") return Reduction::Mul;
  if (r == "max") return Reduction::Max;
  if (r == "min") return Reduction::Min;
  fail(ErrorCode::InvalidModel, node.describe(), ": unknown reduction '", r, "'");
}

template <typename T>
T combine(Reduction r, T a, T b) {
  if constexpr (std::is_same_v<T, bool>) {
    return r == Reduction::Add || r == Reduction::Max ? (a || b) : (a && b);
  } else {
    switch (r) {
      case Reduction::Add: return T(a + b);
      case Reduction::Mul: return T(a * b);
      case Reduction::Max: return b > a ? b : a;
      case Reduction::Min: return b < a ? b : a;
      case Reduction::None: break;
    }
    return b;
  }
}

// Applies update block i (of `block` elements) at out + to[i], in index order, so that with
// duplicate indices the last update wins (none) or all of them combine in a fixed order.
template <typename T, typename F>
void apply_updates(T* out, const T* upd, const std::vector<int64_t>& to, int64_t block, F merge) {
  for (size_t i = 0; i < to.size(); ++i)
    for (int64_t j = 0; j < block; ++j) {
      T& o = out[to[i] + j];
      o = merge(o, upd[int64_t(i) * block + j]);
    }
}

// A copy of data with the updates applied; `to` must already be checked.
Tensor scatter(const Node& node, const Tensor& data, const Tensor& updates,
               const std::vector<int64_t>& to, int64_t block, Reduction r) {
  TERRACE_CHECK(updates.dtype() == data.dtype(), InvalidArgument, node.describe(),
                ": updates are ", dtype_name(updates.dtype()), ", data is ", dtype_name(data.dtype()));
  Tensor out = data.clone();
  if (r == Reduction::None) {
    dispatch_move(data.dtype(), [&](auto tag) {
      using T = decltype(tag);
      apply_updates(elems<T>(out), elems<T>(updates), to, block, [](const T&, const T& u) { return u; });
    });
  } else {
    dispatch_dtype(data.dtype(), [&](auto tag) {
      using T = decltype(tag);
      apply_updates(out.data<T>(), updates.data<T>(), to, block,
                    [r](T o, T u) { return combine(r, o, u); });
    });
  }
  return out;
}

// ScatterElements (and Scatter): updates[i] goes to data at i's position with the axis
// coordinate replaced by indices[i].
void scatter_elements_kernel(KernelContext& ctx) {
  const Tensor& data = ctx.input(0);
  const Tensor& indices = ctx.input(1);
  const Tensor& updates = ctx.input(2);
  TERRACE_CHECK(indices.shape() == updates.shape() && indices.rank() == data.rank() &&
                    data.rank() > 0,
                InvalidArgument, ctx.node.describe(), ": indices ", shape_str(indices.shape()),
                " and updates ", shape_str(updates.shape()),
                " must have one shape, of the rank of data ", shape_str(data.shape()));
  size_t axis = size_t(normalize_axis(ctx.node, ctx.node.attr_int("axis", 0), data.rank()));
  for (size_t d = 0; d < data.shape().size(); ++d)
    TERRACE_CHECK(d == axis || indices.shape()[d] <= data.shape()[d], InvalidArgument,
                  ctx.node.describe(), ": indices ", shape_str(indices.shape()), " exceed data ",
                  shape_str(data.shape()), " on axis ", d);
  std::vector<int64_t> idx = index_values(ctx.node, indices, "indices");
  auto strides = dense_view(data.shape()).strides;
  std::vector<int64_t> base = strides;
  base[axis] = 0;
  std::vector<int64_t> to(idx.size());
  size_t pos = 0;
  for (StridedIter it(indices.shape(), {base}); !it.done(); it.next(), ++pos)
    to[pos] = it.offset(0) +
              checked_index(ctx.node, idx[pos], data.shape()[axis], "Scatter") * strides[axis];
  ctx.set_output(0, scatter(ctx.node, data, updates, to, 1, reduction_of(ctx.node)));
}

void scatter_nd_kernel(KernelContext& ctx) {
  const Tensor& data = ctx.input(0);
  const Tensor& updates = ctx.input(2);
  NdIndex nd = nd_index(ctx.node, data, ctx.input(1), 0);
  TERRACE_CHECK(updates.shape() == nd.out_shape, InvalidArgument, ctx.node.describe(),
                ": updates have shape ", shape_str(updates.shape()), ", expected ",
                shape_str(nd.out_shape));
  ctx.set_output(0, scatter(ctx.node, data, updates, nd.from, nd.slice, reduction_of(ctx.node)));
}

}  // namespace

void register_shape_scatter_kernels(KernelTable& t) {
  t.add(Op::Scatter, scatter_elements_kernel);
  t.add(Op::ScatterElements, scatter_elements_kernel);
  t.add(Op::ScatterND, scatter_nd_kernel);
}

}  // namespace terrace::ops
