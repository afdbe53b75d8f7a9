// fold_combine() and the other FoldOp helpers (kernels/fold.h).
#include "kernels/fold.h"

#include <limits>
#include <type_traits>

namespace terrace::kernels {

Expr fold_combine(FoldOp op, Expr a, Expr v) {
  switch (op) {
    case FoldOp::Add: return Binary::make(BinaryOp::Add, a, v);
    case FoldOp::Mul: return Binary::make(BinaryOp::Mul, a, v);
    case FoldOp::Or: return Binary::make(BinaryOp::Or, a, v);
    case FoldOp::Max: case FoldOp::LastIndex: return Select::make(Compare::make(CmpOp::GT, v, a), v, a);
    case FoldOp::Min: case FoldOp::FirstIndex: return Select::make(Compare::make(CmpOp::LT, v, a), v, a);
    case FoldOp::MaxNaN: case FoldOp::MinNaN: {
      // numpy's: v where it is better or NaN, unless a already is NaN (interp/ops/reduce.cpp).
      Expr better = Compare::make(op == FoldOp::MaxNaN ? CmpOp::GT : CmpOp::LT, v, a);
      if (is_float(a.type()))
        better = Binary::make(BinaryOp::And, Binary::make(BinaryOp::Or, better, Compare::make(CmpOp::NE, v, v)),
                              Compare::make(CmpOp::EQ, a, a));
      return Select::make(better, v, a);
    }
  }
  TERRACE_ASSERT(false, "fold_combine: op ", int(op));
  return Expr();
}

Expr fold_identity(FoldOp op, DType t) {
  switch (op) {
    case FoldOp::Add: case FoldOp::Or: return make_zero(t);
    case FoldOp::Mul: return make_one(t);
    case FoldOp::Max: case FoldOp::MaxNaN: return lowest(t);
    case FoldOp::Min: case FoldOp::MinNaN: return highest(t);
    case FoldOp::FirstIndex: case FoldOp::LastIndex: return Expr();
  }
  return Expr();
}

bool fold_idempotent(FoldOp op) { return op != FoldOp::Add && op != FoldOp::Mul; }

FoldOp fold_ignoring_nan(FoldOp op) {
  return op == FoldOp::MaxNaN ? FoldOp::Max : op == FoldOp::MinNaN ? FoldOp::Min : op;
}

bool fold_nan_wins(FoldOp op) { return op == FoldOp::MaxNaN || op == FoldOp::MinNaN; }

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

}  // namespace terrace::kernels
