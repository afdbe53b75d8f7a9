// Pieces shared by the data-movement lowerings: kernels/lower_movement.cpp (copies: Transpose,
// Slice, Concat, Split, Expand, Tile, DepthToSpace/SpaceToDepth, and the aliases),
// lower_movement_index.cpp (Gather, GatherElements, Pad) and lower_movement_resize.cpp (Resize).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "interp/shape_rules.h"
#include "interp/strided_view.h"
#include "kernels/lower_op.h"

namespace terrace::kernels::movement {

// The type that moves elements of `t` bit-exactly: the unsigned integer of its size (float16,
// bool and NaN payloads move untouched). Strings are NotImplemented, naming the node.
DType mover_type(const Node& node, DType t);

// Strided views (interp/strided_view.h), as the interpreter's copy engine reads them.
using terrace::View;
using terrace::dense_view;

// One kernel, `name`, copying `shape` elements (numel > 0) of type `t` from buffer 0's view
// `from` into buffer 1's view `to`. Unit dims are dropped and dims contiguous in both views merged;
// the outer dims run as one Parallel loop around a unit-stride inner loop, or, for a transpose
// (the source contiguous along another dim than the target's last), in unrolled 8 x 8 blocks.
LoweredFunc copy_kernel(const std::string& name, DType t, const View& from, const View& to,
                        const Shape& shape);

// A loop nest over a row-major domain: a Parallel loop over all dims but the last (decomposed into
// per-dim indices, bound with LetStmts) around a Vectorized loop over the last dim; a one-dim
// domain is one Parallel loop. Unit and zero dims are kept as given.
class DenseNest {
 public:
  explicit DenseNest(Shape domain);
  const Expr& index(size_t d) const { return index_[d]; }  // the index of dim d
  // Binds `value` once per outer iteration under a fresh name and returns the variable.
  Expr outer_let(const std::string& name, Expr value);
  Stmt wrap(Stmt inner_body) const;
  int64_t parallel_extent() const;
  int64_t work_per_iteration() const;

 private:
  Shape domain_;
  std::vector<Expr> index_;
  std::vector<std::pair<std::string, Expr>> lets_;
};

Expr var(const std::string& name, DType t = DType::Int64);
Expr select(Expr cond, Expr a, Expr b);
Expr cmp(CmpOp op, Expr a, Expr b);
Expr both(Expr a, Expr b);  // logical and of two bools
Expr clamp_index(Expr i, int64_t lo, int64_t hi);  // int64 clamp to [lo, hi]

// Input i is present (not past the end and not absent).
bool has_input(const std::vector<OpInput>& in, size_t i);
// Input i's values, which must be known at compile time (an integer tensor of rank <= 1);
// NotImplemented naming the node and `what` when only the run time knows them.
std::vector<int64_t> constant_ints(const Node& node, const std::vector<OpInput>& in, size_t i,
                                   const char* what);
// The reason (or "") that input i of `node` is not known when its region compiles: it must be
// an initializer that is not also a graph input, or computed from shapes
// (kernels::known_at_compile_time), so that lowering finds its value in OpInput::value.
std::string require_constant(const Graph& g, const Node& node, size_t i, const char* what);
// Normalised axis in [0, rank); InvalidArgument naming the node when out of range.
int64_t normalize_axis(const Node& node, int64_t axis, int64_t rank);
std::vector<int64_t> normalize_axes(const Node& node, std::vector<int64_t> axes, int64_t rank);

// The ops whose output is input 0 read through one strided view (Transpose, Slice, Expand, and
// Reshape, Flatten, Squeeze, Unsqueeze, Identity): output element (i0, i1, ...) is input element
// from.base + sum(i_d * from.strides[d]) (stride 0 on a broadcast dim). `alias`: the view is input
// 0's own row-major layout seen with `shape`, so no copy is needed. This is the index map an
// elementwise kernel can fold into its loads instead of reading a copy (kernels/lower.cpp's
// strides_over per group input); lower_movement lowers these ops through it.
struct StridedView {
  View from;
  Shape shape;
  bool alias = false;
};
// The view for these ops (shape-like inputs must be known: NotImplemented otherwise;
// InvalidArgument for inputs the op rejects), nullopt for every other op.
std::optional<StridedView> strided_view_of(const Node& node, const std::vector<OpInput>& in);

// The op kernels of one input copied into one output.
OpKernels single_copy(const std::string& name, const std::vector<OpInput>& in, const View& from,
                      const Shape& out, DType mover);

OpKernels lower_gather(const Node& node, const std::vector<OpInput>& in, const std::string& name);
OpKernels lower_gather_elements(const Node& node, const std::vector<OpInput>& in, const std::string& name);
OpKernels lower_pad(const Node& node, const std::vector<OpInput>& in, const std::string& name);
OpKernels lower_resize(const Node& node, const std::vector<OpInput>& in, const std::string& name);
std::string can_lower_pad(const Graph& g, const Node& node);
std::string can_lower_resize(const Graph& g, const Node& node);

}  // namespace terrace::kernels::movement
