// A fold's combine and identity as expressions (the FoldOps of kernels/ir.h), written once for the
// lowerings and every pass that rewrites a fold.
#pragma once
#include "kernels/ir.h"

namespace terrace::kernels {

// The accumulator's value `a` combined with a value `v`: a + v, a * v, a | v, or a select of v
// over a (select(v > a, v, a) for Max and LastIndex; MaxNaN also takes a NaN v and keeps a NaN a).
Expr fold_combine(FoldOp op, Expr a, Expr v);
// The value a fold starts from in type t: 0 (Add, Or), 1 (Mul), the lowest value of t (Max,
// MaxNaN: -inf for floats), the highest (Min, MinNaN); undefined for the positions (FirstIndex,
// LastIndex), whose start the lowering chooses (past the end, or -1).
Expr fold_identity(FoldOp op, DType t);
// True for the combines that may take a value more than once with the same result: the selects
// (max, min, positions) and Or.
bool fold_idempotent(FoldOp op);
// Max or Min for MaxNaN or MinNaN (the compare-and-select that ignores a NaN v); op itself otherwise.
FoldOp fold_ignoring_nan(FoldOp op);
// True for MaxNaN and MinNaN.
bool fold_nan_wins(FoldOp op);

// The lowest and highest values of t (-inf and +inf for floats).
Expr lowest(DType t);
Expr highest(DType t);

}  // namespace terrace::kernels
