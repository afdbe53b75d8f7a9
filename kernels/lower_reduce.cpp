// Reductions and normalisations lowered to kernels (kernels/lower_op.h): the Reduce* ops,
// ArgMax/ArgMin, Softmax/LogSoftmax, LayerNormalization and the global pools, with the
// interpreter's semantics (interp/ops/reduce*.cpp, nn_norm.cpp, nn_pool.cpp).
//
// Every op is a reduction over some axes of its input X. The dims are collapsed (size-1 dims
// dropped, neighbours that are both kept or both reduced merged), which leaves two shapes of loop:
//   - the last dim reduced ("rows"): a Parallel loop over the kept index, the reduced dims as
//     serial loops around a Vectorized innermost loop over the contiguous reduced run, folding
//     into a one-element accumulator (LLVM vectorises the sum under the loop's pragma; a max or
//     min, which it cannot, folds into one accumulator per vector lane instead);
//   - the last dim kept ("columns", a reduction over outer axes): a Parallel loop over the outer
//     kept index and blocks of the contiguous kept run, whose elements are the vector lanes; every
//     reduced index is a serial loop around a Vectorized loop over the block's accumulators.
// Float sums accumulate in double, as the interpreter does; max/min/arg compare in the input type
// (the same answers); exp runs in float32 for float32 inputs (the prelude's, within 2.5e-7).
#include "kernels/lower_reduce.h"

#include <algorithm>
#include <functional>
#include <limits>

#include "kernels/verify.h"

namespace terrace::kernels {
namespace {

Expr idx(int64_t v) { return make_index(v); }
Expr var(const std::string& name) { return Var::make(DType::Int64, name); }
Expr min_expr(Expr a, Expr b) { return Select::make(Compare::make(CmpOp::LT, a, b), a, b); }
Expr f64(double v) { return FloatImm::make(DType::Float64, v); }

Stmt seq(std::vector<Stmt> s) {
  std::erase_if(s, [](const Stmt& x) { return !x.defined(); });
  return Block::make(std::move(s));
}

// What sums accumulate in: double for floats, int64 for integers (uint64 for uint64).
DType acc_type(DType t) {
  if (is_float(t)) return DType::Float64;
  return t == DType::UInt64 ? DType::UInt64 : DType::Int64;
}

bool is_ieee(DType t) { return t == DType::Float32 || t == DType::Float64; }

// ---- layout ----

struct Dim {
  int64_t extent;
  int64_t stride;  // in X, elements
  bool reduced;
};

// X's dims after dropping size-1 dims and merging neighbours of one kind.
struct Layout {
  std::vector<Dim> dims;
  std::vector<Dim> outer;    // kept dims, without the trailing kept run
  std::vector<Dim> red;      // reduced dims, in order
  int64_t inner = 1;         // the trailing kept run (1: the last dim is reduced)
  int64_t out_count = 1;     // kept elements (outputs per reduced group)
  int64_t red_count = 1;     // elements per reduction
  bool rows() const { return inner == 1 && !red.empty(); }
  int64_t outer_count() const {
    int64_t n = 1;
    for (const Dim& d : outer) n *= d.extent;
    return n;
  }
};

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

// Columns are split into blocks of at most kBlock lanes (a block's accumulators live on the
// stack); rows fold max/min into kLanes accumulators.
constexpr int64_t kBlock = 512;
constexpr int64_t kLanes = 16;

// The loop nest of one kernel over a layout: binds "base" (X's offset of the current group),
// "obase" (the output offset of the block's first element) and, for columns, "n" (the block's
// lane count). Body statements use lane(): the lane index (columns) or 0 (rows).
class Nest {
 public:
  Nest(const Layout& l, const std::string& prefix) : l_(l), p_(prefix) {
    block_ = l.rows() ? 1 : std::min(l.inner, kBlock);
    blocks_ = l.rows() ? 1 : (l.inner + block_ - 1) / block_;
  }
  int64_t block() const { return block_; }
  int64_t parallel_extent() const { return l_.outer_count() * blocks_; }
  int64_t work_per_iteration() const { return std::max<int64_t>(1, l_.red_count * block_); }
  bool rows() const { return l_.rows(); }

  Expr base() const { return var(p_ + "base"); }
  Expr obase() const { return var(p_ + "obase"); }
  Expr n() const { return rows() ? idx(1) : var(p_ + "n"); }
  Expr lane() const { return rows() ? idx(0) : var(p_ + "i"); }

  // for i in [0, n) vectorized: body (columns); body itself (rows).
  Stmt over_lanes(Stmt body, ForKind kind = ForKind::Vectorized) const {
    if (rows()) return body;
    return For::make(p_ + "i", idx(0), n(), kind, body);
  }

  // Visits every reduced element of the group: body(offset in X, flat reduced index). Rows: the
  // innermost reduced loop is `kind`; columns: the lanes loop is Vectorized inside all reduced loops.
  Stmt over_reduced(const std::function<Stmt(Expr off, Expr k)>& body, ForKind kind = ForKind::Vectorized) const {
    std::vector<std::string> vars;
    for (size_t d = 0; d < l_.red.size(); ++d) vars.push_back(p_ + "r" + std::to_string(d));
    Expr off = base(), k;
    for (size_t d = 0; d < l_.red.size(); ++d) {
      off = off + var(vars[d]) * idx(l_.red[d].stride);
      k = k.defined() ? k * idx(l_.red[d].extent) + var(vars[d]) : var(vars[d]);
    }
    if (!k.defined()) k = idx(0);
    Stmt s = rows() ? body(off, k) : over_lanes(body(off + lane(), k));
    for (size_t d = l_.red.size(); d-- > 0;) {
      ForKind fk = rows() && d + 1 == l_.red.size() ? kind : ForKind::Serial;
      s = For::make(vars[d], idx(0), idx(l_.red[d].extent), fk, s);
    }
    return s;
  }

  // Rows only: visits the reduced elements with the innermost run split into `lanes` vector lanes:
  // body(offset, lane index) for the full groups of lanes, then tail(offset) for what remains.
  Stmt over_reduced_in_lanes(int64_t lanes, const std::function<Stmt(Expr off, Expr lane)>& body,
                             const std::function<Stmt(Expr off)>& tail) const {
    TERRACE_ASSERT(rows(), "lanes of a column reduction");
    const size_t last = l_.red.size() - 1;
    const int64_t len = l_.red[last].extent, full = len / lanes;
    Expr off = base();
    for (size_t d = 0; d < last; ++d) off = off + var(p_ + "r" + std::to_string(d)) * idx(l_.red[d].stride);
    std::vector<Stmt> parts;
    if (full > 0) {
      Expr at = off + var(p_ + "j") * idx(lanes) + var(p_ + "l");
      parts.push_back(For::make(p_ + "j", idx(0), idx(full), ForKind::Serial,
                                For::make(p_ + "l", idx(0), idx(lanes), ForKind::Vectorized, body(at, var(p_ + "l")))));
    }
    if (full * lanes < len)
      parts.push_back(For::make(p_ + "t", idx(full * lanes), idx(len), ForKind::Serial, tail(off + var(p_ + "t"))));
    Stmt s = seq(std::move(parts));
    for (size_t d = last; d-- > 0;)
      s = For::make(p_ + "r" + std::to_string(d), idx(0), idx(l_.red[d].extent), ForKind::Serial, s);
    return s;
  }

  // The Parallel loop around `body`, with base/obase/n bound.
  Stmt wrap(Stmt body) const {
    std::vector<std::pair<std::string, Expr>> lets;
    Expr u = var(p_ + "u"), o = u, i0 = idx(0);
    if (blocks_ > 1) {
      lets.push_back({p_ + "o", u / idx(blocks_)});
      lets.push_back({p_ + "i0", Binary::make(BinaryOp::Mod, u, idx(blocks_)) * idx(block_)});
      o = var(p_ + "o");
      i0 = var(p_ + "i0");
    }
    // X's offset of outer index o: its digits over the outer kept dims.
    Expr base;
    Expr rest = o;
    for (size_t d = l_.outer.size(); d-- > 0;) {
      Expr digit = d == 0 ? rest : Binary::make(BinaryOp::Mod, rest, idx(l_.outer[d].extent));
      Expr term = digit * idx(l_.outer[d].stride);
      base = base.defined() ? base + term : term;
      if (d > 0) {
        std::string r = p_ + "q" + std::to_string(d);
        lets.push_back({r, rest / idx(l_.outer[d].extent)});
        rest = var(r);
      }
    }
    if (!base.defined()) base = idx(0);
    if (!rows()) base = base + i0;
    lets.push_back({p_ + "base", base});
    lets.push_back({p_ + "obase", rows() ? o : o * idx(l_.inner) + i0});
    if (!rows()) lets.push_back({p_ + "n", min_expr(idx(block_), idx(l_.inner) - i0)});
    for (auto it = lets.rbegin(); it != lets.rend(); ++it) body = LetStmt::make(it->first, it->second, body);
    return For::make(p_ + "u", var("begin"), var("end"), ForKind::Parallel, body);
  }

 private:
  const Layout& l_;
  std::string p_;
  int64_t block_ = 1, blocks_ = 1;
};

// An accumulator per lane of the nest (one for rows), as a local array.
struct Acc {
  Buffer buf;
  int64_t extent;
  Expr at(const Nest& n) const { return Load::make(buf, n.lane()); }
  Stmt set(const Nest& n, Expr v) const { return Store::make(buf, n.lane(), std::move(v)); }
  Stmt wrap(Stmt body) const { return Allocate::make(buf, extent, std::move(body)); }
};
Acc make_acc(const Nest& n, const std::string& name, DType t) {
  return {Buffer{name, t, kLocalSlot}, n.block()};
}

// One fold: acc = fold(acc, term(element offset, k)) from init, over the reduced elements.
struct Fold {
  DType type;
  Expr init;
  std::function<Expr(Expr off, Expr k)> term;
  std::function<Expr(Expr acc, Expr v)> combine;
  // Max/min: rows may fold in kLanes vector lanes (the answer does not depend on the order) with
  // this compare-and-select, which ignores NaN; with nan_wins, a NaN flag per lane makes the
  // result NaN (LLVM vectorises neither a float max reduction nor the NaN-propagating select).
  std::function<Expr(Expr acc, Expr v)> lane_combine;
  bool nan_wins = false;
};

// acc (already allocated) = the fold over the group.
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

// Max/min that propagate NaN (numpy's), as interp/ops/reduce.cpp's fold_max/fold_min.
Expr fold_extreme(bool is_max, Expr a, Expr v) {
  Expr better = Compare::make(is_max ? CmpOp::GT : CmpOp::LT, v, a);
  if (is_float(a.type())) {
    better = Binary::make(BinaryOp::And,
                          Binary::make(BinaryOp::Or, better, Compare::make(CmpOp::NE, v, v)),
                          Compare::make(CmpOp::EQ, a, a));
  }
  return Select::make(better, v, a);
}
// Max or min ignoring NaN (Softmax's `if (v > m) m = v`).
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

// ---- op attributes ----

// "" or why a dtype is not lowered.
std::string dtype_reason(Op op, DType t) {
  if (is_ieee(t)) return "";
  const bool ints_ok = op == Op::ReduceSum || op == Op::ReduceMean || op == Op::ReduceMax || op == Op::ReduceMin ||
                       op == Op::ReduceProd || op == Op::ReduceL1 || op == Op::ReduceSumSquare || op == Op::ArgMax ||
                       op == Op::ArgMin;
  if (ints_ok && is_integer(t)) return "";
  return std::string(op_name(op)) + " of " + dtype_name(t) +
         (is_float(t) ? ": tier 1 lowers float32 and float64 (16-bit floats round through double in the interpreter)"
                      : ": tier 1 lowers float32, float64" + std::string(ints_ok ? " and integers" : ""));
}

int64_t axis_of(const Node& node, int64_t axis, int64_t rank) {
  int64_t a = axis < 0 ? axis + rank : axis;
  TERRACE_CHECK(a >= 0 && a < std::max<int64_t>(rank, 1), InvalidModel, node.describe(), ": axis ", axis,
                " is out of range for rank ", rank);
  return a;
}

bool is_reduce_family(Op op) {
  switch (op) {
    case Op::ReduceSum: case Op::ReduceMean: case Op::ReduceMax: case Op::ReduceMin: case Op::ReduceProd:
    case Op::ReduceL1: case Op::ReduceL2: case Op::ReduceLogSum: case Op::ReduceLogSumExp:
    case Op::ReduceSumSquare:
      return true;
    default:
      return false;
  }
}

// The reduced-axis mask of a Reduce* node (reduce.cpp's reduced_axes).
std::vector<bool> reduce_mask(const Node& node, const std::vector<OpInput>& in, int64_t rank) {
  std::vector<int64_t> axes = node.attr_ints("axes", {});
  if (in.size() > 1 && !in[1].absent) {
    TERRACE_CHECK(in[1].value, NotImplemented, node.describe(),
                  ": its axes are known only at run time (tier 1 needs them constant)");
    axes = in[1].value->to_int64_vector();
  }
  if (axes.empty()) return std::vector<bool>(size_t(rank), node.attr_int("noop_with_empty_axes", 0) == 0);
  std::vector<bool> mask(size_t(rank), false);
  for (int64_t a : axes) {
    int64_t n = axis_of(node, a, rank);
    TERRACE_CHECK(!mask[size_t(n)], InvalidModel, node.describe(), ": axis ", a, " is repeated");
    mask[size_t(n)] = true;
  }
  return mask;
}

Shape reduced_shape(const Shape& s, const std::vector<bool>& mask, bool keepdims) {
  Shape out;
  for (size_t d = 0; d < s.size(); ++d) {
    if (!mask[d]) out.push_back(s[d]);
    else if (keepdims) out.push_back(1);
  }
  return out;
}

// The one kernel of a lowered op: buffers named in0.., out0.., in slot order of the op's table.
struct Kernel {
  LoweredFunc f;
  std::vector<int> slots;
  Buffer add(const std::string& name, DType t, int slot) {
    Buffer b{name, t, int(f.buffers.size())};
    f.buffers.push_back(b);
    slots.push_back(slot);
    return b;
  }
};

void finish(OpKernels& k, Kernel kernel, const Nest& nest, Stmt body) {
  if (nest.parallel_extent() == 0) return;  // nothing to compute
  kernel.f.body = nest.wrap(std::move(body));
  kernel.f.parallel_extent = nest.parallel_extent();
  kernel.f.work_per_iteration = nest.work_per_iteration();
  verify(kernel.f);
  k.calls.push_back({std::move(kernel.f), std::move(kernel.slots)});
}

Expr load_as(const Buffer& b, Expr off, DType t) { return Cast::make(t, Load::make(b, std::move(off))); }

// ---- Reduce* and the global pools ----

OpKernels lower_reduce_op(const Node& node, const std::vector<OpInput>& in, const std::string& name) {
  const TensorSig& x = in.at(0).sig;
  const DType t = x.dtype;
  const int64_t rank = int64_t(x.shape.size());
  const bool pool = node.op == Op::GlobalAveragePool || node.op == Op::GlobalMaxPool;
  std::vector<bool> mask;
  Shape out_shape;
  if (pool) {
    TERRACE_CHECK(rank >= 3, InvalidArgument, node.describe(), ": input X must have rank >= 3, got ", rank);
    mask.assign(size_t(rank), true);
    mask[0] = mask[1] = false;
    out_shape = reduced_shape(x.shape, mask, true);
  } else {
    mask = reduce_mask(node, in, rank);
    out_shape = reduced_shape(x.shape, mask, node.attr_int("keepdims", 1) != 0);
  }
  OpKernels k;
  k.outputs.push_back({t, out_shape});
  if (shape_numel(out_shape) == 0) return k;

  const Layout l = make_layout(x.shape, mask);
  const Nest nest(l, "");
  Kernel kern;
  kern.f.name = name;
  const Buffer xb = kern.add("in0", t, 0);
  const Buffer yb = kern.add("out0", t, int(in.size()));
  const DType a = acc_type(t);
  const double count = double(l.red_count);
  const Op op = node.op;

  auto elem = [&](DType as) { return [&, as](Expr off, Expr) { return load_as(xb, off, as); }; };
  auto add = [](Expr s, Expr v) { return s + v; };
  Fold f;
  f.type = a;
  f.init = make_zero(a);
  f.combine = add;
  f.term = elem(a);
  if (op == Op::ReduceMax || op == Op::ReduceMin || op == Op::GlobalMaxPool) {
    const bool is_max = op != Op::ReduceMin;
    f.type = is_float(t) ? t : a;  // a float max is exact in its own type
    f.init = is_max ? lowest(f.type) : highest(f.type);
    f.term = elem(f.type);
    f.combine = [is_max](Expr s, Expr v) { return fold_extreme(is_max, s, v); };
    f.lane_combine = [is_max](Expr s, Expr v) { return fold_plain(is_max, s, v); };
    f.nan_wins = true;
  } else if (op == Op::ReduceProd) {
    f.init = make_one(a);
    f.combine = [](Expr s, Expr v) { return s * v; };
  } else if (op == Op::ReduceSumSquare || op == Op::ReduceL2) {
    f.term = [&](Expr off, Expr) {
      Expr v = load_as(xb, off, a);
      return v * v;
    };
  } else if (op == Op::ReduceL1) {
    f.term = [&](Expr off, Expr) {
      Expr v = load_as(xb, off, a);
      return Select::make(Compare::make(CmpOp::LT, v, make_zero(a)), make_zero(a) - v, v);
    };
  }

  std::vector<Stmt> body;
  const Acc acc = make_acc(nest, "acc", f.type);
  Expr m;  // ReduceLogSumExp: the finite maximum
  if (op == Op::ReduceLogSumExp) {
    // log(sum(exp(x - m))) + m with m the maximum (0 where it is not finite), as the interpreter.
    const Acc mx = make_acc(nest, "mx", t);
    Fold fm{t, lowest(t), elem(t), [](Expr s, Expr v) { return fold_extreme(true, s, v); }, fold_max_no_nan, true};
    Expr mv = mx.at(nest);
    Expr finite = Unary::make(UnaryOp::Not, Binary::make(BinaryOp::Or, Call::make(Intrinsic::IsNaN, {mv}),
                                                         Call::make(Intrinsic::IsInf, {mv})));
    Stmt fix = nest.over_lanes(mx.set(nest, Select::make(finite, mv, make_zero(t))));
    f.term = [&, mx](Expr off, Expr) {
      Expr e = Call::make(Intrinsic::Exp, {Load::make(xb, off) - mx.at(nest)});
      return Cast::make(a, e);
    };
    Stmt rest = seq({emit_fold(nest, acc, f, "s"),
                     nest.over_lanes(Store::make(yb, nest.obase() + nest.lane(),
                                                 Cast::make(t, Call::make(Intrinsic::Log, {acc.at(nest)}) +
                                                                   Cast::make(a, mx.at(nest)))))});
    body.push_back(mx.wrap(seq({emit_fold(nest, mx, fm, "m"), fix, acc.wrap(rest)})));
  } else {
    Expr v = acc.at(nest);
    Expr result;
    switch (op) {
      case Op::ReduceL2: result = Call::make(Intrinsic::Sqrt, {v}); break;
      case Op::ReduceLogSum: result = Call::make(Intrinsic::Log, {v}); break;
      case Op::ReduceMean:
        if (is_float(t)) result = v / f64(count);
        else result = count == 0 ? make_zero(a) : v / IntImm::make(a, int64_t(count));
        break;
      case Op::GlobalAveragePool: result = count == 0 ? f64(0) : v / f64(count); break;
      default: result = v;
    }
    Stmt store = nest.over_lanes(Store::make(yb, nest.obase() + nest.lane(), Cast::make(t, result)));
    body.push_back(acc.wrap(seq({emit_fold(nest, acc, f, "r"), store})));
  }
  finish(k, std::move(kern), nest, seq(std::move(body)));
  return k;
}

// ---- ArgMax / ArgMin ----

OpKernels lower_arg(const Node& node, const std::vector<OpInput>& in, const std::string& name) {
  const TensorSig& x = in.at(0).sig;
  const int64_t rank = int64_t(x.shape.size());
  const int64_t axis = axis_of(node, node.attr_int("axis", 0), rank);
  const bool keepdims = node.attr_int("keepdims", 1) != 0;
  const bool last = node.attr_int("select_last_index", 0) != 0;
  const bool is_max = node.op == Op::ArgMax;
  TERRACE_CHECK(rank == 0 || x.shape[size_t(axis)] > 0, InvalidArgument, node.describe(),
                ": cannot take the arg-extreme of an empty axis");
  std::vector<bool> mask(size_t(rank), false);
  if (rank > 0) mask[size_t(axis)] = true;
  OpKernels k;
  k.outputs.push_back({DType::Int64, reduced_shape(x.shape, mask, keepdims)});
  if (shape_numel(k.outputs[0].shape) == 0) return k;

  Layout l = make_layout(x.shape, mask);
  const Nest nest(l, "");
  Kernel kern;
  kern.f.name = name;
  const Buffer xb = kern.add("in0", x.dtype, 0);
  const Buffer yb = kern.add("out0", DType::Int64, int(in.size()));
  const DType t = is_float(x.dtype) ? x.dtype : acc_type(x.dtype);
  const int64_t len = rank == 0 ? 1 : x.shape[size_t(axis)];
  // Two passes, each vectorisable: the extreme m (NaN if any element is), then the first index
  // holding it (the last, with select_last_index), or the first NaN: the interpreter's scan stops
  // at the first NaN and otherwise takes the first (last) of equal extremes.
  const Acc best = make_acc(nest, "best", t), at = make_acc(nest, "at", DType::Int64),
            nan_at = make_acc(nest, "nan_at", DType::Int64);
  auto elem = [&](Expr off, Expr) { return load_as(xb, off, t); };
  Fold fm{t, is_max ? lowest(t) : highest(t), elem, [is_max](Expr a, Expr v) { return fold_extreme(is_max, a, v); },
          [is_max](Expr a, Expr v) { return fold_plain(is_max, a, v); }, true};
  auto first_index = [](Expr a, Expr v) { return Select::make(Compare::make(CmpOp::LT, v, a), v, a); };
  auto last_index = [](Expr a, Expr v) { return Select::make(Compare::make(CmpOp::GT, v, a), v, a); };
  const bool floats = is_float(t);
  Expr m = best.at(nest);
  Fold fi{DType::Int64, last ? idx(-1) : idx(len),
          [&, m](Expr off, Expr k) {
            Expr v = load_as(xb, off, t);
            Expr match = Compare::make(CmpOp::EQ, v, m);
            if (floats && !last) match = Binary::make(BinaryOp::Or, match, Compare::make(CmpOp::NE, v, v));
            return Select::make(match, k, last ? idx(-1) : idx(len));
          },
          last ? last_index : first_index, {}, false};
  std::vector<Stmt> body{emit_fold(nest, best, fm, "m"), emit_fold(nest, at, fi, "i")};
  Expr result = at.at(nest);
  if (floats && last) {
    Fold fn{DType::Int64, idx(len),
            [&](Expr off, Expr k) {
              Expr v = load_as(xb, off, t);
              return Select::make(Compare::make(CmpOp::NE, v, v), k, idx(len));
            },
            first_index, {}, false};
    body.push_back(emit_fold(nest, nan_at, fn, "n"));
    result = Select::make(Compare::make(CmpOp::NE, m, m), nan_at.at(nest), result);
  }
  body.push_back(nest.over_lanes(Store::make(yb, nest.obase() + nest.lane(), result)));
  finish(k, std::move(kern), nest, best.wrap(at.wrap(nan_at.wrap(seq(std::move(body))))));
  return k;
}

// ---- Softmax / LogSoftmax ----

OpKernels lower_softmax(const Node& node, const std::vector<OpInput>& in, const std::string& name, int opset) {
  const TensorSig& x = in.at(0).sig;
  const DType t = x.dtype;
  const int64_t rank = int64_t(x.shape.size());
  const bool legacy = opset < 13;
  const int64_t axis = axis_of(node, node.attr_int("axis", legacy ? 1 : -1), rank);
  std::vector<bool> mask(size_t(rank), false);
  for (int64_t d = axis; d < (legacy ? rank : std::min(axis + 1, rank)); ++d) mask[size_t(d)] = true;
  OpKernels k;
  k.outputs.push_back({t, x.shape});
  if (shape_numel(x.shape) == 0) return k;
  const Layout l = make_layout(x.shape, mask);
  const Nest nest(l, "");
  Kernel kern;
  kern.f.name = name;
  const Buffer xb = kern.add("in0", t, 0);
  const Buffer yb = kern.add("out0", t, int(in.size()));
  const bool log = node.op == Op::LogSoftmax;
  const Acc mx = make_acc(nest, "mx", t), sum = make_acc(nest, "sum", DType::Float64);
  Fold fm{t, lowest(t), [&](Expr off, Expr) { return Load::make(xb, off); }, fold_max_no_nan, fold_max_no_nan, false};
  auto z = [&](Expr off) { return Load::make(xb, off) - mx.at(nest); };
  // The sum of exp(x - max) in double; softmax keeps each exp in Y for the scaling pass.
  Stmt sum_pass = seq({nest.over_lanes(sum.set(nest, f64(0))),
                       nest.over_reduced([&](Expr off, Expr) {
                         Expr e = Call::make(Intrinsic::Exp, {z(off)});
                         Stmt add = sum.set(nest, sum.at(nest) + Cast::make(DType::Float64, e));
                         if (log) return add;
                         return LetStmt::make("e", e, seq({Store::make(yb, off, Var::make(t, "e")),
                                                           sum.set(nest, sum.at(nest) + Cast::make(DType::Float64, Var::make(t, "e")))}));
                       })});
  // Per lane: the scale 1/sum (softmax) or log(sum) (log-softmax), in the input type.
  const Acc factor = make_acc(nest, "factor", t);
  Stmt factor_pass = nest.over_lanes(factor.set(
      nest, Cast::make(t, log ? Call::make(Intrinsic::Log, {sum.at(nest)}) : f64(1) / sum.at(nest))));
  Stmt write_pass = nest.over_reduced([&](Expr off, Expr) {
    Expr v = log ? z(off) - factor.at(nest) : Load::make(yb, off) * factor.at(nest);
    return Store::make(yb, off, v);
  });
  Stmt body = mx.wrap(seq({emit_fold(nest, mx, fm, "m"), sum.wrap(seq({sum_pass, factor.wrap(seq({factor_pass, write_pass}))}))}));
  finish(k, std::move(kern), nest, body);
  return k;
}

// ---- LayerNormalization ----

// Offset into a parameter broadcast (unidirectionally) to `norm`, at flat index k of `norm`.
Expr param_index(const Node& node, const TensorSig& p, const Shape& norm, Expr k, const char* what) {
  TERRACE_CHECK(p.shape.size() <= norm.size(), InvalidArgument, node.describe(), ": ", what, " of shape ",
                shape_str(p.shape), " does not broadcast to ", shape_str(norm));
  const size_t off = norm.size() - p.shape.size();
  for (size_t d = 0; d < p.shape.size(); ++d)
    TERRACE_CHECK(p.shape[d] == 1 || p.shape[d] == norm[off + d], InvalidArgument, node.describe(), ": ", what,
                  " of shape ", shape_str(p.shape), " does not broadcast to ", shape_str(norm));
  if (shape_numel(p.shape) == shape_numel(norm)) return k;  // the same elements in the same order
  Expr index;
  int64_t inner = 1, pstride = 1;
  for (size_t d = norm.size(); d-- > 0;) {
    const int64_t pd = d >= off ? p.shape[d - off] : 1;
    if (pd != 1) {
      Expr digit = Binary::make(BinaryOp::Mod, k / idx(inner), idx(norm[d]));
      Expr term = digit * idx(pstride);
      index = index.defined() ? index + term : term;
      pstride *= pd;
    }
    inner *= norm[d];
  }
  return index.defined() ? index : idx(0);
}

OpKernels lower_layer_norm(const Node& node, const std::vector<OpInput>& in, const std::string& name) {
  const TensorSig& x = in.at(0).sig;
  const DType t = x.dtype;
  const int64_t rank = int64_t(x.shape.size());
  TERRACE_CHECK(rank >= 1, InvalidArgument, node.describe(), ": input X must have rank >= 1, got 0");
  TERRACE_CHECK(in.size() >= 2 && !in[1].absent, InvalidModel, node.describe(), ": input 1 is required");
  const int64_t axis = axis_of(node, node.attr_int("axis", -1), rank);
  const double eps = node.attr_float("epsilon", 1e-5f);
  DType stash = DType::Float32;
  TERRACE_CHECK(dtype_from_onnx(int(node.attr_int("stash_type", 1)), &stash) && is_ieee(stash), NotImplemented,
                node.describe(), ": tier 1 keeps the statistics in float32 or float64");
  const bool has_bias = in.size() > 2 && !in[2].absent;
  for (size_t i = 1; i < (has_bias ? 3u : 2u); ++i)
    TERRACE_CHECK(is_float(in[i].sig.dtype), InvalidArgument, node.describe(), ": input ", i == 1 ? "Scale" : "B",
                  " must be a float tensor, got ", dtype_name(in[i].sig.dtype));
  const Shape norm(x.shape.begin() + axis, x.shape.end());
  std::vector<bool> mask(size_t(rank), false);
  for (int64_t d = axis; d < rank; ++d) mask[size_t(d)] = true;
  Shape stat_shape = x.shape;
  for (int64_t d = axis; d < rank; ++d) stat_shape[size_t(d)] = 1;

  OpKernels k;
  k.outputs.push_back({t, x.shape});
  for (size_t j = 1; j < node.outputs.size(); ++j) k.outputs.push_back({stash, stat_shape});
  if (shape_numel(stat_shape) == 0) return k;

  Layout l = make_layout(x.shape, mask);
  if (l.red.empty()) {  // groups of one element: still rows, one reduced dim of size 1
    if (l.inner > 1) l.outer.push_back({l.inner, 1, false});
    l.inner = 1;
    l.red.push_back({1, 1, true});
  }
  const Nest nest(l, "");
  Kernel kern;
  kern.f.name = name;
  const int n_in = int(in.size());
  const Buffer xb = kern.add("in0", t, 0);
  const Buffer sb = kern.add("in1", in[1].sig.dtype, 1);
  const Buffer bb = has_bias ? kern.add("in2", in[2].sig.dtype, 2) : Buffer{};
  const Buffer yb = kern.add("out0", t, n_in);
  std::vector<std::pair<Buffer, bool>> stats;  // (buffer, is the mean)
  for (size_t j = 1; j < node.outputs.size() && j < 3; ++j)
    if (node.outputs[j] >= 0) stats.push_back({kern.add("out" + std::to_string(j), stash, n_in + int(j)), j == 1});

  const DType d = DType::Float64;
  const double count = double(l.red_count);
  const Acc sum = make_acc(nest, "sum", d), sq = make_acc(nest, "sq", d);
  auto xv = [&](Expr off) { return load_as(xb, off, d); };
  // Mean and variance in double, in two passes, as the interpreter (no E[x^2] - E[x]^2).
  Stmt pass1 = seq({sum.set(nest, f64(0)),
                    nest.over_reduced([&](Expr off, Expr) { return sum.set(nest, sum.at(nest) + xv(off)); })});
  Expr mean = count == 0 ? f64(0) : sum.at(nest) / f64(count);
  Expr mu = Var::make(d, "mean");
  Stmt pass2 = seq({sq.set(nest, f64(0)), nest.over_reduced([&](Expr off, Expr) {
                      Expr dv = xv(off) - mu;
                      return sq.set(nest, sq.at(nest) + dv * dv);
                    })});
  Expr var_ = count == 0 ? f64(0) : sq.at(nest) / f64(count);
  Expr inv = f64(1) / Call::make(Intrinsic::Sqrt, {var_ + f64(eps)});
  Expr is = Var::make(d, "inv_std");
  Stmt pass3 = nest.over_reduced([&](Expr off, Expr kk) {
    Expr y = (xv(off) - mu) * is * load_as(sb, param_index(node, in[1].sig, norm, kk, "input Scale"), d);
    if (has_bias) y = y + load_as(bb, param_index(node, in[2].sig, norm, kk, "input B"), d);
    return Store::make(yb, off, Cast::make(t, y));
  });
  std::vector<Stmt> tail{pass3};
  for (const auto& [b, is_mean] : stats) tail.push_back(Store::make(b, nest.obase(), Cast::make(stash, is_mean ? mu : is)));
  Stmt after_mean = seq({pass2, LetStmt::make("inv_std", inv, seq(tail))});
  Stmt body = sum.wrap(sq.wrap(seq({pass1, LetStmt::make("mean", mean, after_mean)})));
  finish(k, std::move(kern), nest, body);
  return k;
}

}  // namespace

bool is_reduction_op(Op op) {
  return is_reduce_family(op) || op == Op::ArgMax || op == Op::ArgMin || op == Op::Softmax ||
         op == Op::LogSoftmax || op == Op::LayerNormalization || op == Op::GlobalAveragePool ||
         op == Op::GlobalMaxPool;
}

std::string can_lower_reduction(const Graph& g, const Node& node) {
  if (!is_reduction_op(node.op)) return std::string("tier 1 has no kernel for ") + op_name(node.op);
  if (node.inputs.empty() || node.inputs[0] < 0) return node.describe() + " has no input";
  const ValueInfo& xi = g.values[size_t(node.inputs[0])].info;
  if (xi.kind != ValueKind::Tensor || !xi.dtype) return "input '" + g.values[size_t(node.inputs[0])].name + "' has no known tensor dtype";
  const DType t = *xi.dtype;
  if (std::string why = dtype_reason(node.op, t); !why.empty()) return why;
  auto constant = [&](int v) {
    return g.initializers.count(v) && std::find(g.inputs.begin(), g.inputs.end(), v) == g.inputs.end();
  };
  if (is_reduce_family(node.op) && node.inputs.size() > 1 && node.inputs[1] >= 0 && !constant(node.inputs[1]))
    return std::string(op_name(node.op)) + " with axes computed at run time: tier 1 needs them constant";
  if ((node.op == Op::Softmax || node.op == Op::LogSoftmax) && g.opset < 13) {
    // The opset < 13 form flattens dims from `axis` on; it is the same lanes as the opset 13 form
    // (which the lowering gets: lower_op knows no opset) only when both axes are the last dim.
    if (!xi.shape) return std::string(op_name(node.op)) + " at opset < 13 with an unknown rank";
    const int64_t rank = int64_t(xi.shape->size());
    auto last = [&](int64_t a) { return (a < 0 ? a + rank : a) == rank - 1; };
    if (!last(node.attr_int("axis", 1)) || !last(node.attr_int("axis", -1)))
      return std::string(op_name(node.op)) + " at opset < 13 over more than the last axis (its 2-D form)";
  }
  if (node.op == Op::LayerNormalization) {
    DType stash = DType::Float32;
    if (!dtype_from_onnx(int(node.attr_int("stash_type", 1)), &stash) || !is_ieee(stash))
      return "LayerNormalization with a stash_type other than float32 or float64";
    for (size_t i = 1; i < node.inputs.size() && i < 3; ++i) {
      if (node.inputs[i] < 0) continue;
      const ValueInfo& pi = g.values[size_t(node.inputs[i])].info;
      if (!pi.dtype || !is_ieee(*pi.dtype)) return "LayerNormalization with a Scale or B that is not float32/float64";
    }
  }
  return "";
}

OpKernels lower_reduction(const Node& node, const std::vector<OpInput>& inputs, const std::string& name,
                          int opset) {
  TERRACE_CHECK(!inputs.empty() && !inputs[0].absent, InvalidModel, node.describe(), ": input 0 is required");
  const DType t = inputs[0].sig.dtype;
  if (std::string why = dtype_reason(node.op, t); !why.empty()) fail(ErrorCode::NotImplemented, node.describe(), ": ", why);
  switch (node.op) {
    case Op::ArgMax: case Op::ArgMin: return lower_arg(node, inputs, name);
    case Op::Softmax: case Op::LogSoftmax: return lower_softmax(node, inputs, name, opset);
    case Op::LayerNormalization: return lower_layer_norm(node, inputs, name);
    default:
      if (is_reduce_family(node.op) || node.op == Op::GlobalAveragePool || node.op == Op::GlobalMaxPool)
        return lower_reduce_op(node, inputs, name);
  }
  fail(ErrorCode::NotImplemented, node.describe(), ": tier 1 has no kernel for ", op_name(node.op));
}

OpKernels lower_reduction(const Node& node, const std::vector<OpInput>& inputs, const std::string& name) {
  return lower_reduction(node, inputs, name, 17);
}

}  // namespace terrace::kernels
