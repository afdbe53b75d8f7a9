// IRVisitor: walks kernel IR; one overridable visit per node kind in ir_nodes.def.
#pragma once
#include "kernels/ir.h"

namespace terrace::kernels {

// The default visits walk every child, so a subclass overrides only the kinds it cares about
// (and calls the base to keep descending).
class IRVisitor {
 public:
  virtual ~IRVisitor() = default;
  void visit(const Expr& e);  // dispatches on the node kind
  void visit(const Stmt& s);  // an undefined statement is ignored

 protected:
#define TERRACE_IR_EXPR(name) virtual void visit_node(const name* op);
#define TERRACE_IR_STMT(name) virtual void visit_node(const name* op);
#include "kernels/ir_nodes.def"
};

}  // namespace terrace::kernels
