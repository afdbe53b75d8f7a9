// The loops every reduction lowering shares (kernels/lower_reduce.cpp, lower_normalize.cpp): the
// input's dims collapsed into kept and reduced runs, the loop nest over them, accumulators in local
// arrays and folds into them. Internal to those files.
//
// The collapsed dims leave two shapes of loop:
//   - the last dim reduced ("rows"): a Parallel loop over the kept index, the reduced dims as
//     serial loops around a Vectorized innermost loop over the contiguous reduced run, folding
//     into a one-element accumulator (an Accumulate: kernels/split_lanes.h later gives a max or
//     min, which LLVM does not vectorise, its vector lanes);
//   - the last dim kept ("columns", a reduction over outer axes): a Parallel loop over the outer
//     kept index and blocks of the contiguous kept run, whose elements are the vector lanes; every
//     reduced index is a serial loop around a Vectorized loop over the block's accumulators.
#pragma once
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "kernels/fold.h"
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
  std::vector<int64_t> strides;  // per buffer of the layout (0: X), elements; 0 where broadcast
  bool reduced;
};

// X's dims after dropping size-1 dims and merging neighbours of one kind that every buffer reads
// contiguously. Buffer 0 is X; others (fused elementwise operands) broadcast into X's shape.
struct Layout {
  size_t buffers = 1;
  std::vector<Dim> dims;
  std::vector<Dim> outer;    // kept dims, without the trailing kept run
  std::vector<Dim> red;      // reduced dims, in order
  int64_t inner = 1;         // the trailing kept run (1: the last dim is reduced)
  std::vector<int64_t> inner_strides;  // per buffer: its stride along the trailing kept run
  int64_t out_count = 1;     // kept elements (outputs per reduced group)
  int64_t red_count = 1;     // elements per reduction
  bool rows() const { return inner == 1 && !red.empty(); }
  int64_t outer_count() const {
    int64_t n = 1;
    for (const Dim& d : outer) n *= d.extent;
    return n;
  }
};

// Collapses `shape` with the `reduced` mask (one flag per dim); `operands` are the shapes of
// further buffers, each broadcasting (numpy rules) into `shape`.
Layout make_layout(const Shape& shape, const std::vector<bool>& reduced, const std::vector<Shape>& operands = {});
// Makes a layout whose groups are single elements (no reduced dim) a rows layout with one reduced
// dim of size 1, for lowerings that need a per-group scalar.
void force_rows(Layout& l);

// Columns are split into blocks of at most kBlock lanes (a block's accumulators live on the stack).
constexpr int64_t kBlock = 512;

// Where the current element is: its offset in each buffer of the layout (0: X).
struct At {
  std::vector<Expr> off;
  const Expr& x() const { return off[0]; }
};

// The loop nest of one kernel over a layout: binds "base<b>" (buffer b's offset of the current
// group), "obase" (the output offset of the block's first element) and, for columns, "n" (the
// block's lane count). Body statements use lane(): the lane index (columns) or 0 (rows).
class Nest {
 public:
  using Body = std::function<Stmt(const At& at, Expr k)>;

  Nest(const Layout& l, const std::string& prefix) : l_(l), p_(prefix) {
    block_ = l.rows() ? 1 : std::min(l.inner, kBlock);
    blocks_ = l.rows() ? 1 : (l.inner + block_ - 1) / block_;
  }
  int64_t block() const { return block_; }
  int64_t parallel_extent() const { return l_.outer_count() * blocks_; }
  int64_t work_per_iteration() const { return std::max<int64_t>(1, l_.red_count * block_); }
  bool rows() const { return l_.rows(); }

  Expr base(size_t b = 0) const { return var(p_ + "base" + (b ? std::to_string(b) : "")); }
  Expr obase() const { return var(p_ + "obase"); }
  Expr n() const { return rows() ? idx(1) : var(p_ + "n"); }
  Expr lane() const { return rows() ? idx(0) : var(p_ + "i"); }

  // for i in [0, n) vectorized: body (columns); body itself (rows).
  Stmt over_lanes(Stmt body, ForKind kind = ForKind::Vectorized) const {
    if (rows()) return body;
    return For::make(p_ + "i", idx(0), n(), kind, body);
  }

  // Visits every reduced element of the group: body(where it is, flat reduced index). Rows: the
  // innermost reduced loop is `kind`; columns: the lanes loop is Vectorized inside all reduced loops.
  Stmt over_reduced(const Body& body, ForKind kind = ForKind::Vectorized) const {
    std::vector<std::string> vars;
    for (size_t d = 0; d < l_.red.size(); ++d) vars.push_back(p_ + "r" + std::to_string(d));
    Expr k;
    for (size_t d = 0; d < l_.red.size(); ++d)
      k = k.defined() ? k * idx(l_.red[d].extent) + var(vars[d]) : var(vars[d]);
    if (!k.defined()) k = idx(0);
    At at;
    for (size_t b = 0; b < l_.buffers; ++b) {
      Expr off = base(b);
      for (size_t d = 0; d < l_.red.size(); ++d) off = plus(off, var(vars[d]), l_.red[d].strides[b]);
      if (!rows()) off = plus(off, lane(), l_.inner_strides[b]);
      at.off.push_back(off);
    }
    Stmt s = rows() ? body(at, k) : over_lanes(body(at, k));
    for (size_t d = l_.red.size(); d-- > 0;) {
      ForKind fk = rows() && d + 1 == l_.red.size() ? kind : ForKind::Serial;
      s = For::make(vars[d], idx(0), idx(l_.red[d].extent), fk, s);
    }
    return s;
  }

  // The Parallel loop around `body`, with base<b>/obase/n bound.
  Stmt wrap(Stmt body) const;

 private:
  // off + index * stride, leaving out what adds nothing.
  static Expr plus(const Expr& off, const Expr& index, int64_t stride) {
    if (stride == 0) return off;
    return off + (stride == 1 ? index : index * idx(stride));
  }
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
  // acc = op(acc, v), one step of the fold `name` (kernels/ir.h, Accumulate).
  Stmt fold(const Nest& n, FoldOp op, Expr v, const std::string& name) const {
    return Accumulate::make(buf, n.lane(), std::move(v), op, name);
  }
  Stmt wrap(Stmt body) const { return Allocate::make(buf, extent, std::move(body)); }
};
inline Acc make_acc(const Nest& n, const std::string& name, DType t) {
  return {Buffer{name, t, kLocalSlot}, n.block()};
}

// One fold: acc = op(acc, term(element offset, k)) from init, over the reduced elements.
struct Fold {
  DType type;
  Expr init;
  std::function<Expr(const At& at, Expr k)> term;
  FoldOp op;
};

// acc (already allocated) = the fold over the group, named `name` (Accumulate::name).
Stmt emit_fold(const Nest& n, const Acc& acc, const Fold& f, const std::string& name);

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

// How a lowering reads its input X and writes its output 0 at X's positions: plain loads and
// stores, or through the fused elementwise ops of a ReductionFusion (lower_reduce.h).
class Io {
 public:
  // Checks the fusion against the op's signatures (output 0: `y`, or none for ops whose output is
  // not X-shaped); `epilogue_ok`: whether the op takes an epilogue.
  Io(const Node& node, const std::vector<OpInput>& in, const TensorSig* y, const ReductionFusion& fusion);
  // The layout operands (buffers 1.. of make_layout): the fused groups' inputs.
  const std::vector<Shape>& operand_shapes() const { return shapes_; }
  // Adds X (when no prologue computes it) and the fused inputs to the kernel's buffers; `first_slot`
  // is the op slot of the first fused input (the node's inputs and outputs come before it).
  void add_buffers(Kernel& kern, int first_slot);
  // X's value at `at`, in type t.
  Expr x(const At& at, DType t) const;
  // Stores v (output 0's dtype) into output 0 at X's offset, through the epilogue if any.
  Stmt store_y(const Buffer& yb, const At& at, Expr v) const;
  bool fused() const { return prologue_ || epilogue_; }

 private:
  Expr eval(const FusionGroup& g, const std::vector<Buffer>& buffers, size_t first, const At& at, int bound,
            Expr bound_value) const;
  const FusionGroup* prologue_ = nullptr;
  const FusionGroup* epilogue_ = nullptr;
  int operand_ = 0;
  DType x_dtype_;
  std::vector<Shape> shapes_;
  Buffer xb_;
  std::vector<Buffer> pro_, epi_;
};

// The lowerings of kernels/lower_normalize.cpp.
OpKernels lower_softmax(const Node& node, const std::vector<OpInput>& in, const std::string& name, int opset,
                        const ReductionFusion& fusion);
OpKernels lower_layer_norm(const Node& node, const std::vector<OpInput>& in, const std::string& name,
                           const ReductionFusion& fusion);
OpKernels lower_instance_norm(const Node& node, const std::vector<OpInput>& in, const std::string& name,
                              const ReductionFusion& fusion);
OpKernels lower_hardmax(const Node& node, const std::vector<OpInput>& in, const std::string& name, int opset,
                        const ReductionFusion& fusion);
OpKernels lower_lp_norm(const Node& node, const std::vector<OpInput>& in, const std::string& name,
                        const ReductionFusion& fusion);
OpKernels lower_mvn(const Node& node, const std::vector<OpInput>& in, const std::string& name,
                    const ReductionFusion& fusion);

}  // namespace terrace::kernels::reduce
