// The shared loops of the reduction lowerings (kernels/reduce_loops.h).
#include "kernels/reduce_loops.h"

#include <limits>

#include "kernels/verify.h"

namespace terrace::kernels::reduce {

Layout make_layout(const Shape& shape, const std::vector<bool>& reduced) {
  Layout l;
  std::vector<int64_t> strides = row_major_strides(shape);
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!l.dims.empty() && l.dims.back().reduced == reduced[d]) {
      l.dims.back().extent *= shape[d];
      l.dims.back().stride = strides[d];
    } else {
      l.dims.push_back({shape[d], strides[d], reduced[d]});
    }
  }
  for (size_t d = 0; d < l.dims.size(); ++d) {
    const Dim& dim = l.dims[d];
    if (dim.reduced) {
      l.red.push_back(dim);
      l.red_count *= dim.extent;
    } else {
      l.out_count *= dim.extent;
      if (d + 1 == l.dims.size()) l.inner = dim.extent;
      else l.outer.push_back(dim);
    }
  }
  return l;
}

Stmt emit_fold(const Nest& n, const Acc& acc, const Fold& f, const std::string& prefix) {
  std::vector<Stmt> s;
  s.push_back(n.over_lanes(acc.set(n, f.init)));
  if (!n.rows() || !f.lane_combine) {
    s.push_back(n.over_reduced([&](Expr off, Expr k) { return acc.set(n, f.combine(acc.at(n), f.term(off, k))); }));
    return seq(std::move(s));
  }
  const bool flags = f.nan_wins && is_float(f.type);
  const Buffer lanes{prefix + "lanes", f.type, kLocalSlot}, nans{prefix + "nans", DType::Int32, kLocalSlot};
  auto lane_at = [&](const Buffer& b, Expr l) { return Load::make(b, l); };
  // lanes[l] = combine(lanes[l], v); nans[l] |= v is NaN.
  auto update = [&](Expr l, Expr v) {
    Stmt value = Store::make(lanes, l, f.lane_combine(lane_at(lanes, l), v));
    if (!flags) return value;
    Expr is_nan = Cast::make(DType::Int32, Compare::make(CmpOp::NE, v, v));
    return seq({value, Store::make(nans, l, Binary::make(BinaryOp::Or, lane_at(nans, l), is_nan))});
  };
  auto with_value = [&](Expr v, const std::function<Stmt(Expr)>& body) {
    return LetStmt::make(prefix + "v", v, body(Var::make(f.type, prefix + "v")));
  };
  const std::string li = prefix + "li", lm = prefix + "lm";
  std::vector<Stmt> init{Store::make(lanes, var(li), f.init)};
  if (flags) init.push_back(Store::make(nans, var(li), IntImm::make(DType::Int32, 0)));
  std::vector<Stmt> body;
  body.push_back(For::make(li, idx(0), idx(kLanes), ForKind::Vectorized, seq(init)));
  body.push_back(n.over_reduced_in_lanes(
      kLanes, [&](Expr off, Expr l) { return with_value(f.term(off, idx(0)), [&](Expr v) { return update(l, v); }); },
      [&](Expr off) { return with_value(f.term(off, idx(0)), [&](Expr v) { return update(idx(0), v); }); }));
  body.push_back(For::make(lm, idx(0), idx(kLanes), ForKind::Serial,
                           acc.set(n, f.lane_combine(acc.at(n), lane_at(lanes, var(lm))))));
  Stmt merged = seq(std::move(body));
  if (flags) {
    const Buffer any{prefix + "anynan", DType::Int32, kLocalSlot};
    Expr nan = make_const(f.type, std::numeric_limits<double>::quiet_NaN());
    merged = seq({merged, Store::make(any, idx(0), IntImm::make(DType::Int32, 0)),
                  For::make(lm + "n", idx(0), idx(kLanes), ForKind::Serial,
                            Store::make(any, idx(0), Binary::make(BinaryOp::Or, lane_at(any, idx(0)), lane_at(nans, var(lm + "n"))))),
                  IfThenElse::make(Compare::make(CmpOp::NE, lane_at(any, idx(0)), IntImm::make(DType::Int32, 0)),
                                   acc.set(n, nan))});
    merged = Allocate::make(nans, kLanes, Allocate::make(any, 1, merged));
  }
  s.push_back(Allocate::make(lanes, kLanes, merged));
  return seq(std::move(s));
}

Expr fold_extreme(bool is_max, Expr a, Expr v) {
  Expr better = Compare::make(is_max ? CmpOp::GT : CmpOp::LT, v, a);
  if (is_float(a.type())) {
    better = Binary::make(BinaryOp::And,
                          Binary::make(BinaryOp::Or, better, Compare::make(CmpOp::NE, v, v)),
                          Compare::make(CmpOp::EQ, a, a));
  }
  return Select::make(better, v, a);
}
Expr fold_plain(bool is_max, Expr a, Expr v) {
  return Select::make(Compare::make(is_max ? CmpOp::GT : CmpOp::LT, v, a), v, a);
}
Expr fold_max_no_nan(Expr a, Expr v) { return fold_plain(true, a, v); }

Expr lowest(DType t) {
  if (is_float(t)) return make_const(t, -std::numeric_limits<double>::infinity());
  int64_t v = 0;
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_integral_v<T>) v = int64_t(std::numeric_limits<T>::lowest());
  });
  return IntImm::make(t, v);
}
Expr highest(DType t) {
  if (is_float(t)) return make_const(t, std::numeric_limits<double>::infinity());
  if (t == DType::UInt64) return Unary::make(UnaryOp::BitNot, IntImm::make(t, 0));
  int64_t v = 0;
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, uint64_t>) v = int64_t(std::numeric_limits<T>::max());
  });
  return IntImm::make(t, v);
}

int64_t axis_of(const Node& node, int64_t axis, int64_t rank) {
  int64_t a = axis < 0 ? axis + rank : axis;
  TERRACE_CHECK(a >= 0 && a < std::max<int64_t>(rank, 1), InvalidModel, node.describe(), ": axis ", axis,
                " is out of range for rank ", rank);
  return a;
}
Shape reduced_shape(const Shape& s, const std::vector<bool>& mask, bool keepdims) {
  Shape out;
  for (size_t d = 0; d < s.size(); ++d) {
    if (!mask[d]) out.push_back(s[d]);
    else if (keepdims) out.push_back(1);
  }
  return out;
}

void finish(OpKernels& k, Kernel kernel, const Nest& nest, Stmt body) {
  if (nest.parallel_extent() == 0) return;  // nothing to compute
  kernel.f.body = nest.wrap(std::move(body));
  kernel.f.parallel_extent = nest.parallel_extent();
  kernel.f.work_per_iteration = nest.work_per_iteration();
  verify(kernel.f);
  k.calls.push_back({std::move(kernel.f), std::move(kernel.slots)});
}

}  // namespace terrace::kernels::reduce
