// IRMutator: rebuilds kernel IR bottom-up; one overridable visit per node kind in ir_nodes.def.
#pragma once
#include "kernels/ir.h"

namespace terrace::kernels {

// The default visits mutate every child and return the original node when nothing changed, so
// untouched subtrees stay shared. A pass overrides the kinds it rewrites.
class IRMutator {
 public:
  virtual ~IRMutator() = default;
  Expr mutate(const Expr& e);  // dispatches on the node kind
  Stmt mutate(const Stmt& s);  // an undefined statement stays undefined

 protected:
#define TERRACE_IR_EXPR(name) virtual Expr visit(const name* op, const Expr& self);
#define TERRACE_IR_STMT(name) virtual Stmt visit(const name* op, const Stmt& self);
#include "kernels/ir_nodes.def"
};

}  // namespace terrace::kernels
