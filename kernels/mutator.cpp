// IRMutator dispatch and the default rebuild-if-changed visits.
#include "kernels/mutator.h"

namespace terrace::kernels {

Expr IRMutator::mutate(const Expr& e) {
  switch (e.kind()) {
#define TERRACE_IR_EXPR(name) \
  case IRNodeKind::name: return visit(static_cast<const name*>(e.get()), e);
#include "kernels/ir_nodes.def"
    default: TERRACE_ASSERT(false, "statement kind in an expression");
  }
}

Stmt IRMutator::mutate(const Stmt& s) {
  if (!s.defined()) return s;
  switch (s.kind()) {
#define TERRACE_IR_STMT(name) \
  case IRNodeKind::name: return visit(static_cast<const name*>(s.get()), s);
#include "kernels/ir_nodes.def"
    default: TERRACE_ASSERT(false, "expression kind in a statement");
  }
}

Expr IRMutator::visit(const IntImm*, const Expr& self) { return self; }
Expr IRMutator::visit(const FloatImm*, const Expr& self) { return self; }
Expr IRMutator::visit(const Var*, const Expr& self) { return self; }
Expr IRMutator::visit(const Load* op, const Expr& self) {
  Expr index = mutate(op->index);
  return index.same_as(op->index) ? self : Load::make(op->buffer, index, op->vector_lanes);
}
Expr IRMutator::visit(const Unary* op, const Expr& self) {
  Expr a = mutate(op->a);
  return a.same_as(op->a) ? self : Unary::make(op->op, a);
}
Expr IRMutator::visit(const Binary* op, const Expr& self) {
  Expr a = mutate(op->a), b = mutate(op->b);
  return a.same_as(op->a) && b.same_as(op->b) ? self : Binary::make(op->op, a, b);
}
Expr IRMutator::visit(const Compare* op, const Expr& self) {
  Expr a = mutate(op->a), b = mutate(op->b);
  return a.same_as(op->a) && b.same_as(op->b) ? self : Compare::make(op->op, a, b);
}
Expr IRMutator::visit(const Select* op, const Expr& self) {
  Expr c = mutate(op->cond), t = mutate(op->true_value), f = mutate(op->false_value);
  bool same = c.same_as(op->cond) && t.same_as(op->true_value) && f.same_as(op->false_value);
  return same ? self : Select::make(c, t, f);
}
Expr IRMutator::visit(const Cast* op, const Expr& self) {
  Expr v = mutate(op->value);
  return v.same_as(op->value) ? self : Cast::make(op->type, v);
}
Expr IRMutator::visit(const Call* op, const Expr& self) {
  std::vector<Expr> args;
  bool same = true;
  for (const Expr& a : op->args) {
    args.push_back(mutate(a));
    same = same && args.back().same_as(a);
  }
  return same ? self : Call::make(op->fn, std::move(args));
}

Stmt IRMutator::visit(const For* op, const Stmt& self) {
  Expr begin = mutate(op->begin), end = mutate(op->end);
  Stmt body = mutate(op->body);
  bool same = begin.same_as(op->begin) && end.same_as(op->end) && body.same_as(op->body);
  return same ? self : For::make(op->var, begin, end, op->for_kind, body);
}
Stmt IRMutator::visit(const Store* op, const Stmt& self) {
  Expr index = mutate(op->index), value = mutate(op->value);
  bool same = index.same_as(op->index) && value.same_as(op->value);
  return same ? self : Store::make(op->buffer, index, value, op->vector_lanes);
}
Stmt IRMutator::visit(const Accumulate* op, const Stmt& self) {
  Expr index = mutate(op->index), value = mutate(op->value);
  bool same = index.same_as(op->index) && value.same_as(op->value);
  return same ? self : Accumulate::make(op->accumulator, index, value, op->op, op->name);
}
Stmt IRMutator::visit(const LetStmt* op, const Stmt& self) {
  Expr value = mutate(op->value);
  Stmt body = mutate(op->body);
  bool same = value.same_as(op->value) && body.same_as(op->body);
  return same ? self : LetStmt::make(op->name, value, body);
}
Stmt IRMutator::visit(const Block* op, const Stmt& self) {
  std::vector<Stmt> stmts;
  bool same = true;
  for (const Stmt& s : op->stmts) {
    stmts.push_back(mutate(s));
    same = same && stmts.back().same_as(s);
  }
  return same ? self : Block::make(std::move(stmts));
}
Stmt IRMutator::visit(const IfThenElse* op, const Stmt& self) {
  Expr c = mutate(op->cond);
  Stmt t = mutate(op->then_case), e = mutate(op->else_case);
  bool same = c.same_as(op->cond) && t.same_as(op->then_case) && e.same_as(op->else_case);
  return same ? self : IfThenElse::make(c, t, e);
}
Stmt IRMutator::visit(const Allocate* op, const Stmt& self) {
  Stmt body = mutate(op->body);
  return body.same_as(op->body) ? self : Allocate::make(op->buffer, op->extent, body, op->scope);
}
Stmt IRMutator::visit(const Barrier*, const Stmt& self) { return self; }
Stmt IRMutator::visit(const RowCopy* op, const Stmt& self) {
  Expr base = mutate(op->base);
  return base.same_as(op->base) ? self
                                : RowCopy::make(op->buffer, op->row, base, op->length, op->threads, op->vector,
                                                op->registers, op->to_memory);
}
Stmt IRMutator::visit(const FirstThread* op, const Stmt& self) {
  Stmt body = mutate(op->body);
  return body.same_as(op->body) ? self : FirstThread::make(body);
}
// The fold nodes' index is their one child (see IRVisitor).
Stmt IRMutator::visit(const FoldStart* op, const Stmt& self) {
  GpuFold f = op->fold;
  f.index = mutate(op->fold.index);
  return f.index.same_as(op->fold.index) ? self : FoldStart::make(std::move(f));
}
Stmt IRMutator::visit(const WarpReduce* op, const Stmt& self) {
  GpuFold f = op->fold;
  f.index = mutate(op->fold.index);
  return f.index.same_as(op->fold.index) ? self : WarpReduce::make(std::move(f));
}
Stmt IRMutator::visit(const BlockReduce* op, const Stmt& self) {
  GpuFold f = op->fold;
  f.index = mutate(op->fold.index);
  return f.index.same_as(op->fold.index) ? self : BlockReduce::make(std::move(f), op->read_back);
}

}  // namespace terrace::kernels
