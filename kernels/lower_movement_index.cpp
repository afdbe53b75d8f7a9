// Data movement that reads through an index (kernels/lower_op.h): Gather and GatherElements
// (run-time indices wrapped and checked in the kernel: a bad one sets the op's error word instead
// of being read) and Pad (each output position's source computed from the pads and the mode).
// interp/ops/shape_gather.cpp and shape_pad.cpp are the specification.
#include <algorithm>
#include <cstring>

#include "kernels/lower_movement.h"
#include "kernels/verify.h"

namespace terrace::kernels::movement {
namespace {

// The checked reads of one op: an index `raw` (int64) wrapped into [0, dim) when negative; `ok`
// says whether it was in [-dim, dim). With indices known at compile time there is no check.
struct IndexRead {
  Expr wrapped;  // the index to read at, clamped into range so that a bad one reads nothing wrong
  Expr ok;       // undefined when the indices were checked at compile time
};

IndexRead wrap_index(const Expr& raw, int64_t dim, bool check) {
  Expr w = select(cmp(CmpOp::LT, raw, make_index(0)), raw + make_index(dim), raw);
  if (!check) return {w, Expr()};
  Expr ok = both(cmp(CmpOp::GE, w, make_index(0)), cmp(CmpOp::LT, w, make_index(dim)));
  return {select(ok, w, make_index(0)), ok};
}

// Stores 1 and the bad value into the error word (buffer `err`) when `ok` is false.
Stmt report_if_bad(const Buffer& err, const Expr& ok, const Expr& raw) {
  Stmt report = Block::make({Store::make(err, make_index(0), make_index(1)), Store::make(err, make_index(1), raw)});
  return IfThenElse::make(Unary::make(UnaryOp::Not, ok), report);
}

// Checks indices known at compile time as the interpreter does (InvalidArgument naming the node).
void check_constant_indices(const Node& node, const Tensor& idx, int64_t dim, const char* what) {
  TERRACE_CHECK(idx.dtype() == DType::Int32 || idx.dtype() == DType::Int64, InvalidArgument,
                node.describe(), ": indices must be int32 or int64, got ", dtype_name(idx.dtype()));
  for (int64_t i : idx.to_int64_vector())
    TERRACE_CHECK(i >= -dim && i < dim, InvalidArgument, node.describe(), ": ", what, " index ", i,
                  " is out of range [", -dim, ", ", dim, ")");
}

// Sets up the error word of an op with run-time indices: scratch 0, after the outputs.
void add_error_word(OpKernels& k, size_t n_inputs, const std::string& what, int64_t dim) {
  k.scratch.push_back({DType::Int64, {2}});
  k.error_slot = int(n_inputs + k.outputs.size());
  k.error_message = what + " index is out of range [" + std::to_string(-dim) + ", " + std::to_string(dim) + ")";
}

}  // namespace

OpKernels lower_gather(const Node& node, const std::vector<OpInput>& in, const std::string& name) {
  TERRACE_CHECK(has_input(in, 1), InvalidModel, node.describe(), ": indices are missing");
  const TensorSig& data = in[0].sig;
  const TensorSig& indices = in[1].sig;
  TERRACE_CHECK(!data.shape.empty(), InvalidArgument, node.describe(), ": data must not be a scalar");
  TERRACE_CHECK(indices.dtype == DType::Int32 || indices.dtype == DType::Int64, InvalidArgument,
                node.describe(), ": indices must be int32 or int64, got ", dtype_name(indices.dtype));
  const size_t axis = size_t(normalize_axis(node, node.attr_int("axis", 0), int64_t(data.shape.size())));
  const int64_t dim = data.shape[axis];
  const bool check = in[1].value == nullptr;
  if (!check) check_constant_indices(node, *in[1].value, dim, "Gather");
  const Shape& s = data.shape;
  const int64_t outer = shape_numel(std::span(s).first(axis));
  const int64_t inner = shape_numel(std::span(s).subspan(axis + 1));
  const int64_t nidx = shape_numel(indices.shape);
  Shape out(s.begin(), s.begin() + int64_t(axis));
  out.insert(out.end(), indices.shape.begin(), indices.shape.end());
  out.insert(out.end(), s.begin() + int64_t(axis) + 1, s.end());

  OpKernels k;
  k.outputs = {{data.dtype, out}};
  if (check) add_error_word(k, in.size(), "Gather", dim);
  const DType mover = mover_type(node, data.dtype);
  LoweredFunc f;
  f.name = name;
  f.buffers = {{"data", mover, 0}, {"idx", indices.dtype, 1}, {"out", mover, 2}};
  if (check) f.buffers.push_back({"err", DType::Int64, 3});
  std::vector<int> slots = {0, 1, int(in.size())};
  if (check) slots.push_back(k.error_slot);
  const Buffer &src = f.buffers[0], &idx = f.buffers[1], &dst = f.buffers[2];

  if (outer * nidx == 0 || inner == 0) {
    // Nothing to copy, but run-time indices are still checked, as the interpreter checks them.
    if (!check || nidx == 0) return k;
    Expr raw = Cast::make(DType::Int64, Load::make(idx, var("i")));
    IndexRead r = wrap_index(var("raw"), dim, true);
    f.body = For::make("i", var("begin"), var("end"), ForKind::Parallel,
                       LetStmt::make("raw", raw, report_if_bad(f.buffers[3], r.ok, var("raw"))));
    f.parallel_extent = nidx;
  } else if (inner == 1) {
    // Gathering single elements: a Parallel loop over the outer rows, the indices inside (one
    // Parallel loop over the indices when there is one row).
    DenseNest nest(outer == 1 ? Shape{nidx} : Shape{outer, nidx});
    const Expr o = outer == 1 ? make_index(0) : nest.index(0);
    const Expr j = outer == 1 ? nest.index(0) : nest.index(1);
    Expr row = nest.outer_let("row", o * make_index(dim));
    Expr raw = Cast::make(DType::Int64, Load::make(idx, j));
    IndexRead r = wrap_index(var("raw"), dim, check);
    Stmt move = Store::make(dst, o * make_index(nidx) + j, Load::make(src, row + var("w")));
    Stmt body = check ? Block::make({move, report_if_bad(f.buffers[3], r.ok, var("raw"))}) : move;
    f.body = nest.wrap(LetStmt::make("raw", raw, LetStmt::make("w", r.wrapped, body)));
    f.parallel_extent = nest.parallel_extent();
    f.work_per_iteration = nest.work_per_iteration();
  } else {
    // Gathering rows of `inner` elements: a Parallel loop over (outer, index) pairs, each row one
    // contiguous copy when its index is in range.
    Expr row = var("row");
    Expr o = row / make_index(nidx);
    Expr j = Binary::make(BinaryOp::Mod, row, make_index(nidx));
    Expr raw = Cast::make(DType::Int64, Load::make(idx, j));
    IndexRead r = wrap_index(var("raw"), dim, check);
    Expr from = (o * make_index(dim) + var("w")) * make_index(inner);
    Stmt copy = For::make("c", make_index(0), make_index(inner), ForKind::Vectorized,
                          Store::make(dst, var("to") + var("c"), Load::make(src, var("from") + var("c"))));
    copy = LetStmt::make("from", from, LetStmt::make("to", row * make_index(inner), copy));
    Stmt body = check ? IfThenElse::make(r.ok, copy, Block::make({Store::make(f.buffers[3], make_index(0), make_index(1)),
                                                                  Store::make(f.buffers[3], make_index(1), var("raw"))}))
                      : copy;
    body = LetStmt::make("raw", raw, LetStmt::make("w", r.wrapped, body));
    f.body = For::make("row", var("begin"), var("end"), ForKind::Parallel, body);
    f.parallel_extent = outer * nidx;
    f.work_per_iteration = inner;
  }
  verify(f);
  k.calls.push_back({std::move(f), std::move(slots)});
  return k;
}

OpKernels lower_gather_elements(const Node& node, const std::vector<OpInput>& in, const std::string& name) {
  TERRACE_CHECK(has_input(in, 1), InvalidModel, node.describe(), ": indices are missing");
  const TensorSig& data = in[0].sig;
  const TensorSig& indices = in[1].sig;
  const size_t r = data.shape.size();
  TERRACE_CHECK(indices.shape.size() == r && r > 0, InvalidArgument, node.describe(), ": indices ",
                shape_str(indices.shape), " must have the rank of data ", shape_str(data.shape));
  TERRACE_CHECK(indices.dtype == DType::Int32 || indices.dtype == DType::Int64, InvalidArgument,
                node.describe(), ": indices must be int32 or int64, got ", dtype_name(indices.dtype));
  const size_t axis = size_t(normalize_axis(node, node.attr_int("axis", 0), int64_t(r)));
  const int64_t dim = data.shape[axis];
  const bool check = in[1].value == nullptr;
  if (!check) check_constant_indices(node, *in[1].value, dim, "GatherElements");
  for (size_t d = 0; d < r; ++d)
    TERRACE_CHECK(indices.shape[d] <= data.shape[d] || d == axis, InvalidArgument, node.describe(),
                  ": indices ", shape_str(indices.shape), " exceed data ", shape_str(data.shape), " on axis ", d);
  OpKernels k;
  k.outputs = {{data.dtype, indices.shape}};
  if (check) add_error_word(k, in.size(), "GatherElements", dim);
  if (shape_numel(indices.shape) == 0) return k;
  const DType mover = mover_type(node, data.dtype);
  LoweredFunc f;
  f.name = name;
  f.buffers = {{"data", mover, 0}, {"idx", indices.dtype, 1}, {"out", mover, 2}};
  if (check) f.buffers.push_back({"err", DType::Int64, 3});
  std::vector<int> slots = {0, 1, int(in.size())};
  if (check) slots.push_back(k.error_slot);

  // Every output element reads data at its own position on every axis but `axis`.
  const std::vector<int64_t> ds = row_major_strides(data.shape);
  const std::vector<int64_t> is = row_major_strides(indices.shape);
  DenseNest nest(indices.shape);
  Expr ibase = make_index(0), dbase = make_index(0);
  for (size_t d = 0; d + 1 < r; ++d) {
    ibase = ibase + nest.index(d) * make_index(is[d]);
    if (d != axis) dbase = dbase + nest.index(d) * make_index(ds[d]);
  }
  ibase = nest.outer_let("ib", ibase);
  dbase = nest.outer_let("dbase", dbase);
  const Expr& i = nest.index(r - 1);
  Expr at = ibase + i;
  Expr from = dbase + var("w") * make_index(ds[axis]);
  if (r - 1 != axis) from = from + i * make_index(ds[r - 1]);
  IndexRead rd = wrap_index(var("raw"), dim, check);
  Stmt move = Store::make(f.buffers[2], at, Load::make(f.buffers[0], from));
  Stmt body = check ? Block::make({move, report_if_bad(f.buffers[3], rd.ok, var("raw"))}) : move;
  body = LetStmt::make("raw", Cast::make(DType::Int64, Load::make(f.buffers[1], at)),
                       LetStmt::make("w", rd.wrapped, body));
  f.body = nest.wrap(body);
  f.parallel_extent = nest.parallel_extent();
  f.work_per_iteration = nest.work_per_iteration();
  verify(f);
  k.calls.push_back({std::move(f), std::move(slots)});
  return k;
}

// ---- Pad ----

namespace {

// The input index output position `i` of a dim reads in a mode that never fills (reflect, edge,
// wrap): j = i - before folded back into [0, dim).
Expr folded_index(PadMode mode, const Expr& i, int64_t dim, int64_t before) {
  Expr j = i - make_index(before);
  auto mod = [](Expr a, int64_t m) {  // ((a % m) + m) % m: C's % truncates
    Expr r = Binary::make(BinaryOp::Mod, a, make_index(m));
    return Binary::make(BinaryOp::Mod, r + make_index(m), make_index(m));
  };
  switch (mode) {
    case PadMode::Edge: return clamp_index(j, 0, dim - 1);
    case PadMode::Wrap: return mod(j, dim);
    case PadMode::Reflect: {
      const int64_t period = 2 * (dim - 1);  // reflect about the edge elements
      if (period == 0) return make_index(0);
      Expr k = mod(j, period);
      return select(cmp(CmpOp::LT, k, make_index(dim)), k, make_index(period) - k);
    }
    case PadMode::Constant: break;
  }
  return clamp_index(j, 0, dim - 1);
}

}  // namespace

std::string can_lower_pad(const Graph& g, const Node& node) {
  if (std::string why = require_constant(g, node, 1, "pads"); !why.empty()) return why;
  return require_constant(g, node, 3, "axes");
}

namespace {

// Pads, as [begin_0, ..., begin_n, end_0, ..., end_n]: input 1 (opset 11 on) or the attribute;
// from opset 18, input 3 lists the axes they speak of (the others are not padded).
std::vector<int64_t> pads_operand(const Node& node, const std::vector<OpInput>& in, int64_t rank) {
  std::vector<int64_t> pads = has_input(in, 1) ? constant_ints(node, in, 1, "pads") : node.attr_ints("pads");
  if (has_input(in, 3)) {
    std::vector<int64_t> axes = constant_ints(node, in, 3, "axes");
    TERRACE_CHECK(pads.size() == 2 * axes.size(), InvalidArgument, node.describe(), ": ", pads.size(), " pads for ",
                  axes.size(), " axes (need ", 2 * axes.size(), ")");
    std::vector<int64_t> all(size_t(2 * rank), 0);
    std::vector<bool> seen(size_t(rank), false);
    for (size_t i = 0; i < axes.size(); ++i) {
      int64_t d = normalize_axis(node, axes[i], rank);
      TERRACE_CHECK(!seen[size_t(d)], InvalidArgument, node.describe(), ": axis ", axes[i], " is listed twice");
      seen[size_t(d)] = true;
      all[size_t(d)] = pads[i];
      all[size_t(rank + d)] = pads[axes.size() + i];
    }
    pads = std::move(all);
  }
  TERRACE_CHECK(int64_t(pads.size()) == 2 * rank, InvalidArgument, node.describe(), ": ", pads.size(),
                " pads for an input of rank ", rank, " (need ", 2 * rank, ")");
  for (int64_t p : pads)  // bounded so that dim + pads cannot overflow
    TERRACE_CHECK(p > -(int64_t(1) << 48) && p < (int64_t(1) << 48), InvalidArgument, node.describe(),
                  ": pad ", p, " is too large");
  return pads;
}

// Output dims: each input dim with its pads, checked as the interpreter checks them.
Shape padded_shape(const Node& node, const Shape& xshape, const std::vector<int64_t>& pads, PadMode mode) {
  const size_t r = xshape.size();
  Shape out(r, 0);
  for (size_t d = 0; d < r; ++d) {
    out[d] = xshape[d] + pads[d] + pads[d + r];
    TERRACE_CHECK(out[d] >= 0, InvalidArgument, node.describe(), ": pads ", shape_str(pads),
                  " remove more than dim ", d, " of ", shape_str(xshape));
  }
  for (size_t d = 0; d < r; ++d)
    TERRACE_CHECK(mode == PadMode::Constant || xshape[d] > 0 || out[d] == 0,
                  InvalidArgument, node.describe(), ": cannot pad an empty dim in this mode");
  return out;
}

// Before opset 11, the fill is the float attribute `value`: here its bits in the input's dtype.
Expr attribute_fill(const Node& node, DType dtype, DType mover) {
  Tensor v = Tensor::scalar(node.attr_float("value", 0.0f)).cast(dtype);
  uint64_t bits = 0;
  std::memcpy(&bits, v.raw(), dtype_size(dtype));
  return IntImm::make(mover, int64_t(bits));
}

// Each output row's lets (the kernel runs over rows, every dim but the last): its position per
// dim, its source offset "sb" and its output offset "db"; `inside`, in constant mode, whether the
// row lies outside the padding.
struct PadRow {
  std::vector<std::pair<std::string, Expr>> lets;
  Expr inside;
};
PadRow pad_row(PadMode mode, const Shape& xshape, const Shape& out, const std::vector<int64_t>& pads,
               bool empty_input) {
  const size_t last = xshape.size() - 1;
  const std::vector<int64_t> xs = row_major_strides(xshape);
  PadRow row;
  Expr rest = var("row");
  Expr offset = make_index(0);
  for (size_t d = last; d-- > 0;) {
    std::string n = "p" + std::to_string(d);
    if (d > 0) {
      row.lets.push_back({n, Binary::make(BinaryOp::Mod, rest, make_index(out[d]))});
      row.lets.push_back({"q" + std::to_string(d), rest / make_index(out[d])});
      rest = var("q" + std::to_string(d));
    } else {
      row.lets.push_back({n, rest});
    }
    if (empty_input) continue;
    Expr pos = var(n);
    const int64_t dd = xshape[d], bd = pads[d];
    Expr src = folded_index(mode, pos, dd, bd);
    if (mode == PadMode::Constant) {
      Expr j = pos - make_index(bd);
      Expr in_range = both(cmp(CmpOp::GE, j, make_index(0)), cmp(CmpOp::LT, j, make_index(dd)));
      row.inside = row.inside.defined() ? both(row.inside, in_range) : in_range;
    }
    offset = offset + src * make_index(xs[d]);
  }
  row.lets.push_back({"sb", offset});
  row.lets.push_back({"db", var("row") * make_index(out[last])});
  return row;
}

// One row of `width` outputs whose input row of `dim` elements starts `before` in: the left
// padding, the copied middle, the right padding; all `fill` for an empty input or (`inside`
// false) a row in the padding.
Stmt pad_row_body(PadMode mode, const Buffer& src, const Buffer& dst, const Expr& fill, const Expr& inside,
                  int64_t dim, int64_t before, int64_t width, bool empty_input) {
  auto store = [&](const Expr& i, const Expr& v) { return Store::make(dst, var("db") + i, v); };
  if (empty_input) return For::make("i", make_index(0), make_index(width), ForKind::Vectorized, store(var("i"), fill));
  const int64_t lo = std::clamp<int64_t>(before, 0, width), hi = std::clamp<int64_t>(before + dim, lo, width);
  auto edge_value = [&](const Expr& i) -> Expr {
    if (mode == PadMode::Constant) return fill;
    return Load::make(src, var("sb") + folded_index(mode, i, dim, before));
  };
  std::vector<Stmt> runs;
  if (lo > 0) runs.push_back(For::make("i", make_index(0), make_index(lo), ForKind::Vectorized, store(var("i"), edge_value(var("i")))));
  if (hi > lo)
    runs.push_back(For::make("m", make_index(lo), make_index(hi), ForKind::Vectorized,
                             store(var("m"), Load::make(src, var("sb") + var("m") - make_index(before)))));
  if (width > hi) runs.push_back(For::make("e", make_index(hi), make_index(width), ForKind::Vectorized, store(var("e"), edge_value(var("e")))));
  Stmt body = Block::make(std::move(runs));
  if (!inside.defined()) return body;
  Stmt filled = For::make("c", make_index(0), make_index(width), ForKind::Vectorized, store(var("c"), fill));
  return IfThenElse::make(inside, body, filled);
}

}  // namespace

OpKernels lower_pad(const Node& node, const std::vector<OpInput>& in, const std::string& name) {
  const TensorSig& x = in[0].sig;
  const int64_t r = int64_t(x.shape.size());
  const PadMode mode = pad_mode(node);
  const std::vector<int64_t> pads = pads_operand(node, in, r);
  OpKernels k;
  if (r == 0) {  // nothing to pad
    k.outputs = {x};
    k.alias_of = {0};
    return k;
  }
  const Shape out = padded_shape(node, x.shape, pads, mode);
  const DType mover = mover_type(node, x.dtype);
  // The fill: input 2 read at run time (opset 11 on), or the float attribute `value` before.
  Expr fill;
  const bool fill_input = has_input(in, 2);
  if (fill_input) {
    const TensorSig& c = in[2].sig;
    TERRACE_CHECK(c.dtype == x.dtype && shape_numel(c.shape) == 1, InvalidArgument, node.describe(),
                  ": constant_value must be one ", dtype_name(x.dtype), " element");
  } else {
    fill = attribute_fill(node, x.dtype, mover);
  }
  k.outputs = {{x.dtype, out}};
  if (shape_numel(out) == 0) return k;

  LoweredFunc f;
  f.name = name;
  f.buffers = {{"src", mover, 0}, {"dst", mover, 1}};
  std::vector<int> slots = {0, int(in.size())};
  if (fill_input) {
    f.buffers.push_back({"fill", mover, 2});
    slots.push_back(2);
    fill = Load::make(f.buffers[2], make_index(0));
  }
  const bool empty_input = shape_numel(x.shape) == 0;  // constant mode: all fill
  const size_t last = size_t(r - 1);
  // Parallel over output rows (every dim but the last).
  int64_t rows = 1;
  for (size_t d = 0; d < last; ++d) rows *= out[d];
  const PadRow row = pad_row(mode, x.shape, out, pads, empty_input);
  Stmt row_body = pad_row_body(mode, f.buffers[0], f.buffers[1], fill, row.inside, x.shape[last], pads[last],
                               out[last], empty_input);
  for (auto it = row.lets.rbegin(); it != row.lets.rend(); ++it) row_body = LetStmt::make(it->first, it->second, row_body);
  f.body = For::make("row", var("begin"), var("end"), ForKind::Parallel, row_body);
  f.parallel_extent = rows;
  f.work_per_iteration = std::max<int64_t>(1, out[last]);
  verify(f);
  k.calls.push_back({std::move(f), std::move(slots)});
  return k;
}

}  // namespace terrace::kernels::movement
