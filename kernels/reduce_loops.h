// The loops every reduction lowering shares (kernels/lower_reduce.cpp, lower_normalize.cpp): the
// input's dims collapsed into kept and reduced runs, the loop nest over them, accumulators in local
// arrays and folds into them. Internal to those files.
//
// The collapsed dims leave two shapes of loop:
//   - the last dim reduced ("rows"): a Parallel loop over the kept index, the reduced dims as
//     serial loops around a Vectorized innermost loop over the contiguous reduced run, folding
//     into a one-element accumulator (LLVM vectorises the sum under the loop's pragma; a max or
//     min, which it cannot, folds into kLanes accumulators instead);
//   - the last dim kept ("columns", a reduction over outer axes): a Parallel loop over the outer
//     kept index and blocks of the contiguous kept run, whose elements are the vector lanes; every
//     reduced index is a serial loop around a Vectorized loop over the block's accumulators.
#pragma once
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "kernels/lower_reduce.h"

namespace terrace::kernels::reduce {

inline Expr idx(int64_t v) { return make_index(v); }
inline Expr var(const std::string& name) { return Var::make(DType::Int64, name); }
inline Expr min_expr(Expr a, Expr b) { return Select::make(Compare::make(CmpOp::LT, a, b), a, b); }
inline Expr f64(double v) { return FloatImm::make(DType::Float64, v); }

inline Stmt seq(std::vector<Stmt> s) {
  std::erase_if(s, [](const Stmt& x) { return !x.defined(); });
  return Block::make(std::move(s));
}

// What sums accumulate in: double for floats, int64 for integers (uint64 for uint64).
inline DType acc_type(DType t) {
  if (is_float(t)) return DType::Float64;
  return t == DType::UInt64 ? DType::UInt64 : DType::Int64;
}

inline bool is_ieee(DType t) { return t == DType::Float32 || t == DType::Float64; }

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

// Collapses `shape` with the `reduced` mask (one flag per dim).
Layout make_layout(const Shape& shape, const std::vector<bool>& reduced);

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
inline Acc make_acc(const Nest& n, const std::string& name, DType t) {
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
Stmt emit_fold(const Nest& n, const Acc& acc, const Fold& f, const std::string& prefix);

// Max/min that propagate NaN (numpy's), as interp/ops/reduce.cpp's fold_max/fold_min.
Expr fold_extreme(bool is_max, Expr a, Expr v);
// Max or min ignoring NaN (Softmax's `if (v > m) m = v`).
Expr fold_plain(bool is_max, Expr a, Expr v);
Expr fold_max_no_nan(Expr a, Expr v);
// The identities of max and min in type t (-inf/+inf for floats).
Expr lowest(DType t);
Expr highest(DType t);

// ---- ops ----

// `axis` normalised for `rank`, or InvalidModel naming the node (the interpreter's check).
int64_t axis_of(const Node& node, int64_t axis, int64_t rank);
// The output shape of a reduction of `s` over `mask`.
Shape reduced_shape(const Shape& s, const std::vector<bool>& mask, bool keepdims);

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

// Wraps `body` in the nest's Parallel loop, verifies it and appends it to k's calls (nothing when the
// nest has no iteration).
void finish(OpKernels& k, Kernel kernel, const Nest& nest, Stmt body);

inline Expr load_as(const Buffer& b, Expr off, DType t) { return Cast::make(t, Load::make(b, std::move(off))); }

// The lowerings of kernels/lower_normalize.cpp.
OpKernels lower_softmax(const Node& node, const std::vector<OpInput>& in, const std::string& name, int opset);
OpKernels lower_layer_norm(const Node& node, const std::vector<OpInput>& in, const std::string& name);

}  // namespace terrace::kernels::reduce
