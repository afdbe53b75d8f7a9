// verify(): a visitor that keeps the scope of bound names and checks each node against it.
#include "kernels/verify.h"

#include <map>

#include "kernels/printer.h"
#include "kernels/visitor.h"

namespace terrace::kernels {
namespace {

bool is_storage_only(DType t) { return t == DType::Float16 || t == DType::BFloat16; }

class Verifier : public IRVisitor {
 public:
  explicit Verifier(const LoweredFunc& f) : f_(f) {
    scope_["begin"] = DType::Int64;
    scope_["end"] = DType::Int64;
  }
  using IRVisitor::visit;

 protected:
  void visit_node(const Var* op) override {
    auto it = scope_.find(op->name);
    check(it != scope_.end(), "variable '", op->name, "' used out of scope");
    check(it->second == op->type, "variable '", op->name, "' used as ", dtype_name(op->type),
          " but bound as ", dtype_name(it->second));
  }
  void visit_node(const Load* op) override {
    check_buffer(op->buffer);
    IRVisitor::visit_node(op);
  }
  void visit_node(const Unary* op) override { arith(op->a); IRVisitor::visit_node(op); }
  void visit_node(const Binary* op) override { arith(op->a); IRVisitor::visit_node(op); }
  void visit_node(const Compare* op) override { arith(op->a); IRVisitor::visit_node(op); }
  void visit_node(const Select* op) override {
    arith(op->true_value);
    IRVisitor::visit_node(op);
  }
  void visit_node(const For* op) override {
    check(op->begin.type() == DType::Int64 && op->end.type() == DType::Int64,
          "loop '", op->var, "' bounds must be int64");
    check(op->for_kind != ForKind::Parallel || loop_depth_ == 0,
          "parallel loop '", op->var, "' is not outermost");
    visit(op->begin);
    visit(op->end);
    ++loop_depth_;
    bind(op->var, DType::Int64, op->body);
    --loop_depth_;
  }
  void visit_node(const Store* op) override {
    check_buffer(op->buffer);
    IRVisitor::visit_node(op);
  }
  void visit_node(const LetStmt* op) override {
    visit(op->value);
    bind(op->name, op->value.type(), op->body);
  }
  void visit_node(const Allocate* op) override {
    const std::string& name = op->buffer.name;
    check(locals_.count(name) == 0 && scope_.count(name) == 0, "'", name, "' bound twice");
    for (const Buffer& p : f_.buffers) check(p.name != name, "local array '", name, "' shadows a parameter");
    locals_[name] = op->buffer.dtype;
    visit(op->body);
    locals_.erase(name);
  }

 private:
  template <typename... Args>
  void check(bool cond, const Args&... msg) {
    if (!cond) fail(ErrorCode::Internal, "kernel ", f_.name, ": ", msg...);
  }
  void arith(const Expr& e) {
    check(!is_storage_only(e.type()), "arithmetic on ", dtype_name(e.type()), " value ",
          to_string(e), " (cast to float32 first)");
  }
  void check_buffer(const Buffer& b) {
    if (b.slot == kLocalSlot) {
      auto it = locals_.find(b.name);
      check(it != locals_.end(), "local array '", b.name, "' used out of scope");
      check(it->second == b.dtype, "local array '", b.name, "' used as ", dtype_name(b.dtype),
            " but allocated as ", dtype_name(it->second));
      return;
    }
    check(b.slot >= 0 && size_t(b.slot) < f_.buffers.size(), "buffer ", b.name, " slot ", b.slot,
          " is not a parameter");
    const Buffer& p = f_.buffers[size_t(b.slot)];
    check(p.name == b.name && p.dtype == b.dtype, "buffer ", b.name, " does not match parameter ",
          p.name);
  }
  void bind(const std::string& name, DType t, const Stmt& body) {
    check(scope_.count(name) == 0 && locals_.count(name) == 0, "'", name, "' bound twice");
    scope_[name] = t;
    visit(body);
    scope_.erase(name);
  }

  const LoweredFunc& f_;
  std::map<std::string, DType> scope_;
  std::map<std::string, DType> locals_;  // Allocate'd arrays in scope
  int loop_depth_ = 0;
};

}  // namespace

void verify(const LoweredFunc& f) {
  TERRACE_ASSERT(f.body.defined(), "kernel ", f.name, " has no body");
  TERRACE_ASSERT(f.parallel_extent >= 0 && f.work_per_iteration >= 1, "kernel ", f.name,
                 ": bad parallel range");
  Verifier(f).visit(f.body);
}

}  // namespace terrace::kernels
