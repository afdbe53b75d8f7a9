// Data movement lowered to kernels (kernels/lower_op.h): the strided copy every copying op becomes
// (Transpose, Slice, Concat, Split, Expand, Tile, DepthToSpace, SpaceToDepth), the ops that only
// reinterpret their input (Reshape, Flatten, Squeeze, Unsqueeze, Identity: aliases, no kernel),
// and the dispatch to Gather, GatherElements, Pad (lower_movement_index.cpp) and Resize
// (lower_movement_resize.cpp). interp/ops/shape*.cpp is the specification.
#include "kernels/lower_movement.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <span>

#include "kernels/lower.h"
#include "kernels/verify.h"

namespace terrace::kernels {
namespace movement {

// ---- helpers ----

DType mover_type(const Node& node, DType t) {
  TERRACE_CHECK(t != DType::String, NotImplemented, node.describe(), ": tier 1 does not move strings");
  switch (dtype_size(t)) {
    case 1: return DType::UInt8;
    case 2: return DType::UInt16;
    case 4: return DType::UInt32;
    case 8: return DType::UInt64;
    default: break;
  }
  fail(ErrorCode::NotImplemented, node.describe(), ": no element mover for ", dtype_name(t));
}

Expr var(const std::string& name, DType t) { return Var::make(t, name); }
Expr select(Expr cond, Expr a, Expr b) { return Select::make(std::move(cond), std::move(a), std::move(b)); }
Expr cmp(CmpOp op, Expr a, Expr b) { return Compare::make(op, std::move(a), std::move(b)); }
Expr both(Expr a, Expr b) { return Binary::make(BinaryOp::And, std::move(a), std::move(b)); }
Expr clamp_index(Expr i, int64_t lo, int64_t hi) {
  Expr below = select(cmp(CmpOp::LT, i, make_index(lo)), make_index(lo), i);
  return select(cmp(CmpOp::GT, below, make_index(hi)), make_index(hi), below);
}

DenseNest::DenseNest(Shape domain) : domain_(std::move(domain)) {
  if (domain_.empty()) domain_ = {1};
  size_t k = domain_.size();
  if (k == 1) {
    index_ = {var("i")};
    return;
  }
  // "o" runs over the product of dims 0..k-2; d<j> is the index of dim j.
  index_.resize(k);
  Expr rest = var("o");
  for (size_t d = k - 1; d-- > 1;) {
    lets_.push_back({"d" + std::to_string(d), Binary::make(BinaryOp::Mod, rest, make_index(domain_[d]))});
    lets_.push_back({"r" + std::to_string(d), rest / make_index(domain_[d])});
    index_[d] = var("d" + std::to_string(d));
    rest = var("r" + std::to_string(d));
  }
  index_[0] = rest;
  index_[k - 1] = var("i");
}

Expr DenseNest::outer_let(const std::string& name, Expr value) {
  if (domain_.size() == 1) return value;  // no outer loop to hoist into
  lets_.push_back({name, value});
  return var(name, value.type());
}

Stmt DenseNest::wrap(Stmt inner_body) const {
  size_t k = domain_.size();
  if (k == 1) return For::make("i", var("begin"), var("end"), ForKind::Parallel, inner_body);
  Stmt s = For::make("i", make_index(0), make_index(domain_[k - 1]), ForKind::Vectorized, inner_body);
  for (auto it = lets_.rbegin(); it != lets_.rend(); ++it) s = LetStmt::make(it->first, it->second, s);
  return For::make("o", var("begin"), var("end"), ForKind::Parallel, s);
}

int64_t DenseNest::parallel_extent() const {
  if (domain_.size() == 1) return domain_[0];
  return shape_numel(std::span(domain_).first(domain_.size() - 1));
}
int64_t DenseNest::work_per_iteration() const {
  return domain_.size() == 1 ? 1 : std::max<int64_t>(1, domain_.back());
}

bool has_input(const std::vector<OpInput>& in, size_t i) { return i < in.size() && !in[i].absent; }

std::vector<int64_t> constant_ints(const Node& node, const std::vector<OpInput>& in, size_t i,
                                   const char* what) {
  TERRACE_CHECK(has_input(in, i), InvalidModel, node.describe(), ": input '", what, "' is missing");
  const Tensor* t = in[i].value;
  TERRACE_CHECK(t != nullptr, NotImplemented, node.describe(), ": tier 1 needs input '", what,
                "' known at compile time (an initializer)");
  TERRACE_CHECK(is_integer(t->dtype()), InvalidArgument, node.describe(), ": input '", what,
                "' must be an integer tensor, got ", dtype_name(t->dtype()));
  TERRACE_CHECK(t->rank() <= 1, InvalidArgument, node.describe(), ": input '", what,
                "' must be 1-D, got shape ", shape_str(t->shape()));
  return t->to_int64_vector();
}

std::string require_constant(const Graph& g, const Node& node, size_t i, const char* what) {
  if (i >= node.inputs.size() || node.inputs[i] < 0) return "";
  int v = node.inputs[i];
  if (known_at_compile_time(g, v)) return "";  // an initializer, or computed from shapes
  // The value is left out of the reason, so that explain's count of breaks by reason groups them.
  return std::string("tier 1 compiles ") + op_name(node.op) + " only with its '" + what +
         "' input known when it compiles (an initializer, or computed from shapes), not computed from data";
}

int64_t normalize_axis(const Node& node, int64_t axis, int64_t rank) {
  TERRACE_CHECK(axis >= -rank && axis < rank, InvalidArgument, node.describe(), ": axis ", axis,
                " is out of range for rank ", rank);
  return axis < 0 ? axis + rank : axis;
}

std::vector<int64_t> normalize_axes(const Node& node, std::vector<int64_t> axes, int64_t rank) {
  std::vector<bool> seen(size_t(std::max<int64_t>(rank, 1)), false);
  for (int64_t& a : axes) {
    a = normalize_axis(node, a, rank);
    TERRACE_CHECK(!seen[size_t(a)], InvalidArgument, node.describe(), ": axis ", a, " is repeated");
    seen[size_t(a)] = true;
  }
  return axes;
}

namespace {

// A copy with unit dims dropped and dims merged wherever both views are contiguous across them.
using terrace::CopyPlan;
using terrace::simplify;

Expr term(const Expr& index, int64_t stride) {
  return stride == 1 ? index : index * make_index(stride);
}
Expr add_terms(Expr base, const std::vector<std::pair<Expr, int64_t>>& terms) {
  for (const auto& [i, s] : terms)
    if (s != 0) base = base + term(i, s);
  return base;
}
// The transpose: the source is contiguous along dim k, the target along the last dim J. Each
// parallel item is a band of kBlock along k that walks a group of kBlock x kBlock blocks along J,
// each block fully unrolled (kBlock^2 loads, then the stores): LLVM's SLP vectoriser turns it into
// row loads, shuffles and row stores. [64,768,768] perm (0,2,1), float32, 2 threads, output reused:
// 26-28 ms against 72-76 ms for 32 x 32 tiles moved element by element (the interpreter's scheme).
// Where the bands alone are few, the blocks of a band are split into groups (a divisor of their
// count) until there are kMinItems items: a GPU runs each item on a thread of its own, and
// BERT's [128,768] -> [768,128] in whole bands gave it 96 threads (135 us on an H200).
constexpr int64_t kBlock = 8, kMinItems = 4096;

// Blocks of a band per parallel item: all of them where the bands are enough items, else the
// largest divisor of their count that makes kMinItems items (1 at least).
int64_t blocks_per_item(int64_t bands, int64_t jblocks) {
  int64_t group = jblocks;
  while (group > 1 && bands * (jblocks / group) < kMinItems) {
    int64_t g = group - 1;
    while (g > 1 && jblocks % g != 0) --g;
    group = g;
  }
  return group;
}

// Block jt of the band at sb/db, fully unrolled: its kBlock^2 loads, then its stores.
Stmt unrolled_block(const Buffer& src, const Buffer& dst, int64_t sj, int64_t dk) {
  std::vector<Stmt> loads_then_stores;
  for (int64_t b = 0; b < kBlock; ++b)
    for (int64_t a = 0; a < kBlock; ++a)
      loads_then_stores.push_back(Store::make(dst, var("dj") + make_index(b * dk + a),
                                              var("v" + std::to_string(a) + "_" + std::to_string(b), src.dtype)));
  Stmt block = Block::make(std::move(loads_then_stores));
  for (int64_t a = kBlock; a-- > 0;)
    for (int64_t b = kBlock; b-- > 0;)
      block = LetStmt::make("v" + std::to_string(a) + "_" + std::to_string(b),
                            Load::make(src, var("sj0") + make_index(b + a * sj)), block);
  return LetStmt::make("j0", var("jt") * make_index(kBlock),
                       LetStmt::make("sj0", var("sb") + term(var("j0"), sj),
                                     LetStmt::make("dj", var("db") + var("j0"), block)));
}

LoweredFunc tiled_copy(LoweredFunc f, const CopyPlan& p, size_t k, const View& from, const View& to) {
  const Buffer& src = f.buffers[0];
  const Buffer& dst = f.buffers[1];
  const size_t last = p.shape.size() - 1;
  std::vector<size_t> outer;
  for (size_t d = 0; d < last; ++d)
    if (d != k) outer.push_back(d);
  const int64_t K = p.shape[k], J = p.shape[last], sj = p.from[last], dk = p.to[k];
  const int64_t kbands = (K + kBlock - 1) / kBlock, jblocks = J / kBlock;
  int64_t outer_count = 1;
  for (size_t d : outer) outer_count *= p.shape[d];
  const int64_t group = blocks_per_item(outer_count * kbands, jblocks);
  const int64_t jgroups = jblocks / group;

  // One group (the bands are enough): the loops' bounds stay constants, as the CPU's code wants.
  const bool grouped = jgroups > 1;
  std::vector<std::pair<std::string, Expr>> lets;
  if (grouped) {
    lets.push_back({"jg", Binary::make(BinaryOp::Mod, var("item"), make_index(jgroups))});
    lets.push_back({"band", var("item") / make_index(jgroups)});
  }
  const Expr band = grouped ? var("band") : var("item");
  lets.push_back({"kt", Binary::make(BinaryOp::Mod, band, make_index(kbands))});
  Expr rest = band / make_index(kbands);
  std::vector<std::pair<Expr, int64_t>> src_terms, dst_terms;
  for (size_t n = outer.size(); n-- > 0;) {
    size_t d = outer[n];
    Expr idx = rest;
    if (n > 0) {
      lets.push_back({"t" + std::to_string(d), Binary::make(BinaryOp::Mod, rest, make_index(p.shape[d]))});
      lets.push_back({"q" + std::to_string(d), rest / make_index(p.shape[d])});
      idx = var("t" + std::to_string(d));
      rest = var("q" + std::to_string(d));
    }
    src_terms.push_back({idx, p.from[d]});
    dst_terms.push_back({idx, p.to[d]});
  }
  lets.push_back({"k0", var("kt") * make_index(kBlock)});
  if (grouped) lets.push_back({"jb", var("jg") * make_index(group)});  // the group's first block
  const Expr jb = grouped ? var("jb") : make_index(0);
  lets.push_back({"sb", add_terms(make_index(from.base), src_terms) + var("k0")});
  lets.push_back({"db", add_terms(make_index(to.base), dst_terms) + term(var("k0"), dk)});

  // Element (kk, j) of the band, kk counted from k0, moved one by one (the edges).
  auto move_range = [&](Expr k_end, Expr j_begin, Expr j_end) {
    Stmt move = Store::make(dst, var("db") + term(var("kk"), dk) + var("j"),
                            Load::make(src, var("sb") + var("kk") + term(var("j"), sj)));
    Stmt inner = For::make("j", j_begin, j_end, ForKind::Serial, move);
    return For::make("kk", make_index(0), k_end, ForKind::Serial, inner);
  };
  // The group's columns, and past the last whole block the columns left (the last group's).
  const Expr j_first = grouped ? jb * make_index(kBlock) : make_index(0);
  const Expr j_past = grouped ? (jb + make_index(group)) * make_index(kBlock) : make_index(jblocks * kBlock);
  auto in_last_group = [&](Stmt s, Stmt otherwise = Stmt()) {
    return grouped ? IfThenElse::make(cmp(CmpOp::EQ, var("jg"), make_index(jgroups - 1)), s, otherwise) : s;
  };
  // A full band: its group's unrolled blocks, then the columns past the last whole block.
  const Stmt block = unrolled_block(src, dst, sj, dk);
  const Expr jt_end = grouped ? jb + make_index(group) : make_index(jblocks);
  std::vector<Stmt> full = {For::make("jt", jb, jt_end, ForKind::Serial, block)};
  if (J % kBlock != 0)
    full.push_back(in_last_group(move_range(make_index(kBlock), make_index(jblocks * kBlock), make_index(J))));
  Stmt body = Block::make(std::move(full));
  if (K % kBlock != 0) {  // the last band is narrower
    const Expr k_left = make_index(K) - var("k0");
    Stmt narrow = J % kBlock == 0 ? move_range(k_left, j_first, j_past)
                                  : in_last_group(move_range(k_left, j_first, make_index(J)),
                                                  move_range(k_left, j_first, j_past));
    body = IfThenElse::make(cmp(CmpOp::LE, var("k0") + make_index(kBlock), make_index(K)), body, narrow);
  }
  for (auto it = lets.rbegin(); it != lets.rend(); ++it) body = LetStmt::make(it->first, it->second, body);
  f.body = For::make("item", var("begin"), var("end"), ForKind::Parallel, body);
  f.parallel_extent = outer_count * kbands * jgroups;
  f.work_per_iteration = kBlock * kBlock * group;
  verify(f);
  return f;
}

// A copy of a few long rows (a Concat or Slice near the outermost axis) would give the runtime
// only a few parallel iterations: its last dim is cut into chunks (a divisor of its length, so the
// loops keep constant bounds) that become parallel iterations of their own.
void split_long_rows(CopyPlan& p) {
  constexpr int64_t kMinChunk = 1024, kMaxChunk = 16384, kFewRows = 64;
  const int64_t J = p.shape.back(), rows = shape_numel(p.shape) / J;
  if (rows >= kFewRows || J < 4 * kMaxChunk) return;
  for (int64_t c = kMaxChunk; c >= kMinChunk; --c)
    if (J % c == 0) {
      const int64_t s = p.from.back(), t = p.to.back();
      p.shape.back() = J / c;
      p.from.back() = s * c;
      p.to.back() = t * c;
      p.shape.push_back(c);
      p.from.push_back(s);
      p.to.push_back(t);
      return;
    }
}

}  // namespace

LoweredFunc copy_kernel(const std::string& name, DType t, const View& from, const View& to,
                        const Shape& shape) {
  TERRACE_ASSERT(shape_numel(shape) > 0, "copy_kernel ", name, ": nothing to copy");
  CopyPlan p = simplify(shape, from, to);
  LoweredFunc f;
  f.name = name;
  f.buffers = {{"src", t, 0}, {"dst", t, 1}};
  size_t last = p.shape.size() - 1;
  if (p.from[last] != 1 && p.from[last] != 0 && p.to[last] == 1 && p.shape[last] >= 8)
    for (size_t k = 0; k < last; ++k)
      if (p.from[k] == 1 && p.shape[k] >= 8) return tiled_copy(std::move(f), p, k, from, to);

  split_long_rows(p);
  last = p.shape.size() - 1;
  DenseNest nest(p.shape);
  std::vector<std::pair<Expr, int64_t>> src_outer, dst_outer;
  for (size_t d = 0; d < last; ++d) {
    src_outer.push_back({nest.index(d), p.from[d]});
    dst_outer.push_back({nest.index(d), p.to[d]});
  }
  Expr sb = nest.outer_let("sb", add_terms(make_index(from.base), src_outer));
  Expr db = nest.outer_let("db", add_terms(make_index(to.base), dst_outer));
  const Expr& i = nest.index(last);
  Expr s_at = p.from[last] == 0 ? sb : sb + term(i, p.from[last]);
  Expr d_at = p.to[last] == 0 ? db : db + term(i, p.to[last]);
  f.body = nest.wrap(Store::make(f.buffers[1], d_at, Load::make(f.buffers[0], s_at)));
  f.parallel_extent = nest.parallel_extent();
  f.work_per_iteration = nest.work_per_iteration();
  verify(f);
  return f;
}

OpKernels single_copy(const std::string& name, const std::vector<OpInput>& in, const View& from,
                      const Shape& out, DType mover) {
  OpKernels k;
  k.outputs = {{in[0].sig.dtype, out}};
  if (shape_numel(out) > 0)
    k.calls.push_back({copy_kernel(name, mover, from, dense_view(out), out), {0, int(in.size())}});
  return k;
}

namespace {

// Output 0 is input 0 seen with `shape` (same element count): no kernel.
OpKernels alias_of_input(const std::vector<OpInput>& in, Shape shape) {
  OpKernels k;
  k.outputs = {{in[0].sig.dtype, std::move(shape)}};
  k.alias_of = {0};
  return k;
}

int64_t checked_mul(const Node& node, int64_t a, int64_t b) {
  int64_t r = 0;
  TERRACE_CHECK(!__builtin_mul_overflow(a, b, &r), InvalidArgument, node.describe(), ": size ", a,
                " * ", b, " overflows int64");
  return r;
}

// x (read as `shape`, same element count) with its dims permuted by `perm`.
OpKernels permute(const Node& node, const std::vector<OpInput>& in, const Shape& shape,
                  const std::vector<int64_t>& perm, const Shape& out_shape, const std::string& name) {
  View full = dense_view(shape), from;
  Shape permuted;
  for (int64_t p : perm) {
    permuted.push_back(shape[size_t(p)]);
    from.strides.push_back(full.strides[size_t(p)]);
  }
  DType mover = mover_type(node, in[0].sig.dtype);
  OpKernels k;
  k.outputs = {{in[0].sig.dtype, out_shape}};
  if (shape_numel(permuted) > 0)
    k.calls.push_back({copy_kernel(name, mover, from, dense_view(permuted), permuted), {0, int(in.size())}});
  return k;
}

StridedView transpose_view(const Node& node, const std::vector<OpInput>& in) {
  const Shape& x = in[0].sig.shape;
  int64_t r = int64_t(x.size());
  std::vector<int64_t> perm = node.attr_ints("perm");
  if (perm.empty() && !node.has_attr("perm"))
    for (int64_t d = r - 1; d >= 0; --d) perm.push_back(d);
  TERRACE_CHECK(int64_t(perm.size()) == r, InvalidArgument, node.describe(), ": perm has ",
                perm.size(), " entries for an input of rank ", r);
  perm = normalize_axes(node, perm, r);
  std::vector<int64_t> moved;  // only dims longer than 1 move data
  StridedView v;
  View dense = dense_view(x);
  for (int64_t p : perm) {
    v.shape.push_back(x[size_t(p)]);
    v.from.strides.push_back(dense.strides[size_t(p)]);
    if (x[size_t(p)] != 1) moved.push_back(p);
  }
  v.alias = std::is_sorted(moved.begin(), moved.end());
  return v;
}

StridedView slice_view(const Node& node, const std::vector<OpInput>& in) {
  const Shape& x = in[0].sig.shape;
  const int64_t rank = int64_t(x.size());
  std::vector<int64_t> starts, ends, axes, steps;
  const bool inputs = node.inputs.size() > 1;  // opset 10 on; attributes before
  if (inputs) {
    starts = constant_ints(node, in, 1, "starts");
    ends = constant_ints(node, in, 2, "ends");
    if (has_input(in, 3)) axes = constant_ints(node, in, 3, "axes");
    if (has_input(in, 4)) steps = constant_ints(node, in, 4, "steps");
  } else {
    starts = node.attr_ints("starts");
    ends = node.attr_ints("ends");
    axes = node.attr_ints("axes");
  }
  const size_t k = starts.size();
  if (inputs ? has_input(in, 3) : node.has_attr("axes")) {
    axes = normalize_axes(node, axes, rank);
  } else {
    for (size_t i = 0; i < k; ++i) axes.push_back(int64_t(i));
  }
  if (!(inputs && has_input(in, 4))) steps.assign(k, 1);
  TERRACE_CHECK(ends.size() == k && axes.size() == k && steps.size() == k, InvalidArgument,
                node.describe(), ": starts, ends, axes and steps must have equal lengths");
  TERRACE_CHECK(int64_t(k) <= rank, InvalidArgument, node.describe(), ": ", k,
                " slice axes for an input of rank ", rank);
  Shape out = x;
  View v = dense_view(x);
  bool whole = true;
  for (size_t i = 0; i < k; ++i) {
    size_t ax = size_t(axes[i]);
    TERRACE_CHECK(steps[i] != 0, InvalidArgument, node.describe(), ": steps[", i, "] is 0");
    AxisRange r = clamp_range(starts[i], ends[i], steps[i], out[ax]);
    whole &= r.start == 0 && r.step == 1 && r.len == out[ax];
    v.base += r.start * v.strides[ax];
    v.strides[ax] = r.len > 1 ? v.strides[ax] * r.step : 0;
    out[ax] = r.len;
  }
  return {v, out, whole};
}

OpKernels lower_concat(const Node& node, const std::vector<OpInput>& in, const std::string& name) {
  TERRACE_CHECK(!in.empty() && !in[0].absent, InvalidModel, node.describe(), ": no inputs");
  const TensorSig& first = in[0].sig;
  const int64_t rank = int64_t(first.shape.size());
  TERRACE_CHECK(rank > 0, InvalidArgument, node.describe(), ": cannot concatenate scalars");
  const size_t axis = size_t(normalize_axis(node, node.attr_int("axis"), rank));
  Shape out = first.shape;
  out[axis] = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    TERRACE_CHECK(!in[i].absent, InvalidModel, node.describe(), ": input ", i, " is absent");
    const TensorSig& t = in[i].sig;
    bool fits = t.dtype == first.dtype && t.shape.size() == first.shape.size();
    for (size_t d = 0; fits && d < out.size(); ++d) fits = d == axis || t.shape[d] == out[d];
    TERRACE_CHECK(fits, InvalidArgument, node.describe(), ": input ", i, " (", dtype_name(t.dtype),
                  shape_str(t.shape), ") does not match input 0 (", dtype_name(first.dtype),
                  shape_str(first.shape), ") off axis ", axis);
    out[axis] += t.shape[axis];
  }
  DType mover = mover_type(node, first.dtype);
  OpKernels k;
  k.outputs = {{first.dtype, out}};
  View to = dense_view(out);
  for (size_t i = 0; i < in.size(); ++i) {
    const Shape& s = in[i].sig.shape;
    if (shape_numel(s) > 0)
      k.calls.push_back({copy_kernel(name + "_" + std::to_string(i), mover, dense_view(s), to, s),
                         {int(i), int(in.size())}});
    to.base += s[axis] * to.strides[axis];
  }
  return k;
}

OpKernels lower_split(const Node& node, const std::vector<OpInput>& in, const std::string& name) {
  const Shape& x = in[0].sig.shape;
  TERRACE_CHECK(!x.empty(), InvalidArgument, node.describe(), ": cannot split a scalar");
  const size_t axis = size_t(normalize_axis(node, node.attr_int("axis", 0), int64_t(x.size())));
  const int64_t dim = x[axis];
  const size_t n_out = node.outputs.size();
  std::vector<int64_t> sizes = has_input(in, 1) ? constant_ints(node, in, 1, "split") : node.attr_ints("split");
  if (sizes.empty()) {
    int64_t parts = node.attr_int("num_outputs", int64_t(n_out));
    TERRACE_CHECK(parts > 0 && parts == int64_t(n_out), InvalidModel, node.describe(), ": num_outputs ",
                  parts, " differs from the ", n_out, " outputs");
    int64_t each = (dim + parts - 1) / parts;
    for (int64_t p = 0; p < parts; ++p) sizes.push_back(std::clamp<int64_t>(dim - p * each, 0, each));
  }
  int64_t left = dim;
  for (int64_t s : sizes) {
    TERRACE_CHECK(s >= 0 && s <= left, InvalidArgument, node.describe(), ": split ", shape_str(sizes),
                  " does not cut a dim of ", dim);
    left -= s;
  }
  TERRACE_CHECK(left == 0 && sizes.size() == n_out, InvalidArgument, node.describe(), ": split ",
                shape_str(sizes), " does not cut a dim of ", dim, " into ", n_out, " outputs");
  DType mover = mover_type(node, in[0].sig.dtype);
  OpKernels k;
  View from = dense_view(x);
  for (size_t j = 0; j < n_out; ++j) {
    Shape out = x;
    out[axis] = sizes[j];
    k.outputs.push_back({in[0].sig.dtype, out});
    if (node.outputs[j] >= 0 && shape_numel(out) > 0)
      k.calls.push_back({copy_kernel(name + "_" + std::to_string(j), mover, from, dense_view(out), out),
                         {0, int(in.size() + j)}});
    from.base += sizes[j] * from.strides[axis];
  }
  return k;
}

StridedView expand_view(const Node& node, const std::vector<OpInput>& in) {
  const Shape& x = in[0].sig.shape;
  std::vector<int64_t> target = constant_ints(node, in, 1, "shape");
  StridedView v;
  v.shape = x;
  TERRACE_CHECK(try_broadcast(v.shape, target), InvalidArgument, node.describe(), ": shapes ",
                shape_str(x), " and ", shape_str(target), " do not broadcast");
  v.alias = shape_numel(v.shape) == shape_numel(x);  // nothing repeats
  v.from.strides.assign(v.shape.size(), 0);
  View dense = dense_view(x);
  for (size_t i = 0; i < x.size(); ++i)
    if (x[i] != 1) v.from.strides[v.shape.size() - x.size() + i] = dense.strides[i];
  return v;
}

// Tile reads x as [r0, d0, r1, d1, ...] with stride 0 on each repeat dim.
OpKernels lower_tile(const Node& node, const std::vector<OpInput>& in, const std::string& name) {
  const Shape& x = in[0].sig.shape;
  std::vector<int64_t> repeats = constant_ints(node, in, 1, "repeats");
  TERRACE_CHECK(repeats.size() == x.size(), InvalidArgument, node.describe(), ": repeats has ",
                repeats.size(), " entries for an input of rank ", x.size());
  View dense = dense_view(x), from;
  Shape pairs, out;
  for (size_t d = 0; d < x.size(); ++d) {
    TERRACE_CHECK(repeats[d] >= 0, InvalidArgument, node.describe(), ": repeats[", d, "] is negative");
    pairs.insert(pairs.end(), {repeats[d], x[d]});
    from.strides.insert(from.strides.end(), {0, dense.strides[d]});
    out.push_back(checked_mul(node, repeats[d], x[d]));
  }
  OpKernels k = single_copy(name, in, from, pairs, mover_type(node, in[0].sig.dtype));
  k.outputs[0].shape = out;
  return k;
}

OpKernels lower_depth_space(const Node& node, const std::vector<OpInput>& in, const std::string& name) {
  const Shape& x = in[0].sig.shape;
  TERRACE_CHECK(x.size() == 4, InvalidArgument, node.describe(), ": input must be 4-D, got ", shape_str(x));
  const int64_t bs = node.attr_int("blocksize");
  TERRACE_CHECK(bs > 0, InvalidModel, node.describe(), ": blocksize must be positive");
  const int64_t n = x[0], c = x[1], h = x[2], w = x[3];
  const int64_t bs2 = checked_mul(node, bs, bs);
  if (node.op == Op::DepthToSpace) {
    TERRACE_CHECK(c % bs2 == 0, InvalidArgument, node.describe(), ": channels ", c,
                  " are not divisible by blocksize^2");
    Shape out = {n, c / bs2, checked_mul(node, h, bs), checked_mul(node, w, bs)};
    if (node.attr_string("mode", "DCR") == "CRD")
      return permute(node, in, {n, c / bs2, bs, bs, h, w}, {0, 1, 4, 2, 5, 3}, out, name);
    return permute(node, in, {n, bs, bs, c / bs2, h, w}, {0, 3, 4, 1, 5, 2}, out, name);
  }
  TERRACE_CHECK(h % bs == 0 && w % bs == 0, InvalidArgument, node.describe(),
                ": height and width must be divisible by blocksize ", bs);
  Shape out = {n, checked_mul(node, c, bs2), h / bs, w / bs};
  return permute(node, in, {n, c, h / bs, bs, w / bs, bs}, {0, 3, 5, 1, 2, 4}, out, name);
}

// ---- aliases ----

// Squeeze/Unsqueeze axes: an attribute before opset 13, an input from 13 (empty: none given).
std::optional<std::vector<int64_t>> axes_operand(const Node& node, const std::vector<OpInput>& in) {
  if (has_input(in, 1)) return constant_ints(node, in, 1, "axes");
  if (node.has_attr("axes")) return node.attr_ints("axes");
  return std::nullopt;
}

// The shape an op that only reinterprets its input gives it.
Shape alias_shape(const Node& node, const std::vector<OpInput>& in) {
  const Shape& x = in[0].sig.shape;
  const int64_t r = int64_t(x.size());
  switch (node.op) {
    case Op::Identity: return x;
    case Op::Reshape:
      return reshape_target(node, x, constant_ints(node, in, 1, "shape"), node.attr_int("allowzero", 0) != 0);
    case Op::Flatten: {
      int64_t axis = node.attr_int("axis", 1);
      TERRACE_CHECK(axis >= -r && axis <= r, InvalidArgument, node.describe(), ": axis ", axis,
                    " is out of range for rank ", r);
      if (axis < 0) axis += r;
      return {shape_numel(std::span(x).first(size_t(axis))), shape_numel(std::span(x).subspan(size_t(axis)))};
    }
    case Op::Squeeze: {
      std::vector<bool> drop(x.size(), false);
      if (auto axes = axes_operand(node, in)) {
        for (int64_t a : normalize_axes(node, *axes, r)) {
          TERRACE_CHECK(x[size_t(a)] == 1, InvalidArgument, node.describe(), ": cannot squeeze axis ", a,
                        " of shape ", shape_str(x));
          drop[size_t(a)] = true;
        }
      } else {
        for (size_t d = 0; d < x.size(); ++d) drop[d] = x[d] == 1;
      }
      Shape s;
      for (size_t d = 0; d < x.size(); ++d)
        if (!drop[d]) s.push_back(x[d]);
      return s;
    }
    case Op::Unsqueeze: {
      auto axes = axes_operand(node, in);
      TERRACE_CHECK(axes.has_value(), InvalidModel, node.describe(), ": axes are required");
      const int64_t rank = r + int64_t(axes->size());
      std::vector<bool> insert(size_t(rank), false);
      for (int64_t a : normalize_axes(node, *axes, rank)) insert[size_t(a)] = true;
      Shape s;
      size_t next = 0;
      for (int64_t d = 0; d < rank; ++d) s.push_back(insert[size_t(d)] ? 1 : x[next++]);
      return s;
    }
    default: break;
  }
  fail(ErrorCode::Internal, node.describe(), ": not an alias op");
}

// The inputs whose values the op needs before the run, by op.
struct ConstantInput {
  size_t index;
  const char* what;
};
std::vector<ConstantInput> constant_inputs(Op op) {
  switch (op) {
    case Op::Slice: return {{1, "starts"}, {2, "ends"}, {3, "axes"}, {4, "steps"}};
    case Op::Reshape: case Op::Expand: return {{1, "shape"}};
    case Op::Tile: return {{1, "repeats"}};
    case Op::Split: return {{1, "split"}};
    case Op::Squeeze: case Op::Unsqueeze: return {{1, "axes"}};
    default: return {};
  }
}

// Output 0 as a strided view of input 0: an alias, or one copy.
OpKernels from_view(const Node& node, const std::vector<OpInput>& in, const StridedView& v, const std::string& name) {
  if (v.alias) return alias_of_input(in, v.shape);
  return single_copy(name, in, v.from, v.shape, mover_type(node, in[0].sig.dtype));
}

}  // namespace

std::optional<StridedView> strided_view_of(const Node& node, const std::vector<OpInput>& in) {
  TERRACE_CHECK(!in.empty() && !in[0].absent, InvalidModel, node.describe(), ": input 0 is missing");
  switch (node.op) {
    case Op::Transpose: return transpose_view(node, in);
    case Op::Slice: return slice_view(node, in);
    case Op::Expand: return expand_view(node, in);
    case Op::Reshape: case Op::Flatten: case Op::Squeeze: case Op::Unsqueeze: case Op::Identity: {
      Shape s = alias_shape(node, in);
      return StridedView{dense_view(s), s, true};
    }
    default: return std::nullopt;
  }
}

}  // namespace movement

using namespace movement;

bool is_movement_op(Op op) {
  switch (op) {
    case Op::Transpose: case Op::Slice: case Op::Concat: case Op::Split: case Op::Gather:
    case Op::GatherElements: case Op::Expand: case Op::Tile: case Op::Pad: case Op::DepthToSpace:
    case Op::SpaceToDepth: case Op::Resize: case Op::Upsample: case Op::Reshape: case Op::Flatten: case Op::Squeeze:
    case Op::Unsqueeze: case Op::Identity:
      return true;
    default: return false;
  }
}

std::string can_lower_movement(const Graph& g, const Node& node) {
  if (!is_movement_op(node.op)) return std::string("tier 1 has no kernel for ") + op_name(node.op);
  if (node.inputs.empty() || node.inputs[0] < 0) return std::string(op_name(node.op)) + " without an input";
  // Every tensor the op moves must have a known dtype that is not string.
  const size_t moved = node.op == Op::Concat ? node.inputs.size() : 1;
  for (size_t i = 0; i < moved; ++i) {
    if (node.inputs[i] < 0) continue;
    const Value& v = g.values[size_t(node.inputs[i])];
    if (v.info.kind != ValueKind::Tensor || !v.info.dtype) return "input '" + v.name + "' has no known tensor dtype";
    if (*v.info.dtype == DType::String) return "tier 1 does not move strings ('" + v.name + "')";
  }
  for (const ConstantInput& c : constant_inputs(node.op))
    if (std::string why = require_constant(g, node, c.index, c.what); !why.empty()) return why;
  if (node.op == Op::Gather || node.op == Op::GatherElements) {
    if (node.inputs.size() < 2 || node.inputs[1] < 0) return std::string(op_name(node.op)) + " without indices";
    const Value& idx = g.values[size_t(node.inputs[1])];
    if (!idx.info.dtype || (*idx.info.dtype != DType::Int32 && *idx.info.dtype != DType::Int64))
      return "indices '" + idx.name + "' are not known to be int32 or int64";
  }
  if (node.op == Op::Pad) return can_lower_pad(g, node);
  if (node.op == Op::Resize || node.op == Op::Upsample) return can_lower_resize(g, node);
  return "";
}

OpKernels lower_movement(const Node& node, const std::vector<OpInput>& inputs, const std::string& name) {
  TERRACE_CHECK(!inputs.empty() && !inputs[0].absent, InvalidModel, node.describe(), ": input 0 is missing");
  switch (node.op) {
    case Op::Transpose: case Op::Slice: case Op::Expand: case Op::Reshape: case Op::Flatten:
    case Op::Squeeze: case Op::Unsqueeze: case Op::Identity:
      return from_view(node, inputs, *strided_view_of(node, inputs), name);
    case Op::Concat: return lower_concat(node, inputs, name);
    case Op::Split: return lower_split(node, inputs, name);
    case Op::Tile: return lower_tile(node, inputs, name);
    case Op::DepthToSpace: case Op::SpaceToDepth: return lower_depth_space(node, inputs, name);
    case Op::Gather: return lower_gather(node, inputs, name);
    case Op::GatherElements: return lower_gather_elements(node, inputs, name);
    case Op::Pad: return lower_pad(node, inputs, name);
    case Op::Resize: case Op::Upsample: return lower_resize(node, inputs, name);
    default: break;
  }
  fail(ErrorCode::NotImplemented, node.describe(), ": tier 1 has no kernel for ", op_name(node.op));
}

}  // namespace terrace::kernels
