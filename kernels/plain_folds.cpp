// plain_folds(): folds as stores (kernels/plain_folds.h).
#include "kernels/plain_folds.h"

#include "kernels/fold.h"
#include "kernels/mutator.h"

namespace terrace::kernels {
namespace {

class PlainFolds : public IRMutator {
 protected:
  Stmt visit(const Accumulate* op, const Stmt& self) override {
    const Expr index = mutate(op->index), value = mutate(op->value);
    return Store::make(op->accumulator, index, fold_combine(op->op, Load::make(op->accumulator, index), value));
  }
};

}  // namespace

Stmt plain_folds(const Stmt& body) { return PlainFolds().mutate(body); }

}  // namespace terrace::kernels
