// IRVisitor dispatch and the default child-walking visits.
#include "kernels/visitor.h"

namespace terrace::kernels {

void IRVisitor::visit(const Expr& e) {
  switch (e.kind()) {
#define TERRACE_IR_EXPR(name) \
  case IRNodeKind::name: return visit_node(static_cast<const name*>(e.get()));
#include "kernels/ir_nodes.def"
    default: TERRACE_ASSERT(false, "statement kind in an expression");
  }
}

void IRVisitor::visit(const Stmt& s) {
  if (!s.defined()) return;
  switch (s.kind()) {
#define TERRACE_IR_STMT(name) \
  case IRNodeKind::name: return visit_node(static_cast<const name*>(s.get()));
#include "kernels/ir_nodes.def"
    default: TERRACE_ASSERT(false, "expression kind in a statement");
  }
}

void IRVisitor::visit_node(const IntImm*) {}
void IRVisitor::visit_node(const FloatImm*) {}
void IRVisitor::visit_node(const Var*) {}
void IRVisitor::visit_node(const Load* op) { visit(op->index); }
void IRVisitor::visit_node(const Unary* op) { visit(op->a); }
void IRVisitor::visit_node(const Binary* op) { visit(op->a); visit(op->b); }
void IRVisitor::visit_node(const Compare* op) { visit(op->a); visit(op->b); }
void IRVisitor::visit_node(const Select* op) {
  visit(op->cond);
  visit(op->true_value);
  visit(op->false_value);
}
void IRVisitor::visit_node(const Cast* op) { visit(op->value); }
void IRVisitor::visit_node(const Call* op) {
  for (const Expr& a : op->args) visit(a);
}
void IRVisitor::visit_node(const For* op) {
  visit(op->begin);
  visit(op->end);
  visit(op->body);
}
void IRVisitor::visit_node(const Store* op) { visit(op->index); visit(op->value); }
void IRVisitor::visit_node(const Accumulate* op) { visit(op->index); visit(op->value); }
void IRVisitor::visit_node(const LetStmt* op) { visit(op->value); visit(op->body); }
void IRVisitor::visit_node(const Block* op) {
  for (const Stmt& s : op->stmts) visit(s);
}
void IRVisitor::visit_node(const IfThenElse* op) {
  visit(op->cond);
  visit(op->then_case);
  visit(op->else_case);
}
void IRVisitor::visit_node(const Allocate* op) { visit(op->body); }
void IRVisitor::visit_node(const Barrier*) {}
void IRVisitor::visit_node(const FirstThread* op) { visit(op->body); }
void IRVisitor::visit_node(const RowCopy* op) { visit(op->base); }
// A fold node's index is its one child: its combines are templates over placeholder variables.
void IRVisitor::visit_node(const FoldStart* op) { visit(op->fold.index); }
void IRVisitor::visit_node(const WarpReduce* op) { visit(op->fold.index); }
void IRVisitor::visit_node(const BlockReduce* op) { visit(op->fold.index); }

}  // namespace terrace::kernels
