// verify(): a visitor that keeps the scope of bound names and checks each node against it.
#include "kernels/verify.h"

#include <map>
#include <set>

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
    const ForKind row = row_;
    check_gpu_loop(op);
    ++loop_depth_;
    if (op->for_kind == ForKind::GpuRegisters) scope_["tr_k"] = DType::Int64;  // the element's register
    bind(op->var, DType::Int64, op->body);
    if (op->for_kind == ForKind::GpuRegisters) scope_.erase("tr_k");
    --loop_depth_;
    row_ = row;
  }
  // The GPU nodes need the row they work in: a warp's (lanes, shuffles) or a block's (its threads,
  // shared memory and block barriers too).
  void visit_node(const Barrier* op) override {
    in_row(op->scope == BarrierScope::Block ? ForKind::GpuBlock : ForKind::Serial, "barrier");
  }
  void visit_node(const FirstThread* op) override {
    in_row(ForKind::Serial, "first_thread");
    visit(op->body);
  }
  void visit_node(const Store* op) override {
    check_buffer(op->buffer);
    IRVisitor::visit_node(op);
  }
  // A fold's value does not read its accumulator: passes regroup the values (kernels/ir.h).
  void visit_node(const Accumulate* op) override {
    check_buffer(op->accumulator);
    struct Reads : IRVisitor {
      const std::string& name;
      bool found = false;
      explicit Reads(const std::string& n) : name(n) {}
      void visit_node(const Load* l) override {
        found = found || (l->buffer.slot == kLocalSlot && l->buffer.name == name);
        IRVisitor::visit_node(l);
      }
    } reads(op->accumulator.name);
    reads.visit(op->value);
    check(!reads.found, "fold ", op->name, "'s value reads its accumulator '", op->accumulator.name, "'");
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
    if (op->scope == MemoryScope::Shared) shared_.insert(name);
    visit(op->body);
    locals_.erase(name);
    shared_.erase(name);
  }
  // A fold node's accumulator is a thread's array in scope, its part (a block's) a shared one; its
  // index may read the slot variable tr_s.
  void visit_node(const RowCopy* op) override {
    in_row(ForKind::GpuBlock, "row_copy");
    check_buffer(op->buffer);
    check_buffer(op->row);
    check(op->registers != (shared_.count(op->row.name) > 0), "row copy '", op->row.name, "' in the wrong scope");
    visit(op->base);
  }
  void visit_node(const FoldStart* op) override {
    in_row(ForKind::Serial, "fold_start");
    check_fold(op->fold);
  }
  void visit_node(const WarpReduce* op) override {
    in_row(ForKind::Serial, "warp_reduce");
    check_fold(op->fold);
  }
  void visit_node(const BlockReduce* op) override {
    in_row(ForKind::GpuBlock, "block_reduce");
    check_fold(op->fold);
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
  // A row loop (GpuWarp, GpuBlock) starts a row, not inside another; a warp's lanes are in a warp's
  // row, a block's threads and registers in a block's.
  void check_gpu_loop(const For* op) {
    const ForKind k = op->for_kind;
    if (k == ForKind::GpuWarp || k == ForKind::GpuBlock) {
      check(row_ == ForKind::Serial, "row loop '", op->var, "' inside another row");
      row_ = k;
    }
    if (k == ForKind::GpuLane) check(row_ == ForKind::GpuWarp, "lane loop '", op->var, "' outside a warp's row");
    if (k == ForKind::GpuThread || k == ForKind::GpuRegisters)
      check(row_ == ForKind::GpuBlock, "thread loop '", op->var, "' outside a block's row");
  }
  // `what` is in a row; in a block's where `need` is GpuBlock.
  void in_row(ForKind need, const char* what) {
    check(row_ != ForKind::Serial, what, " outside a GPU row");
    check(need != ForKind::GpuBlock || row_ == ForKind::GpuBlock, what, " outside a block's row");
  }
  void check_fold(const GpuFold& f) {
    check_buffer(f.accumulator);
    check(!shared_.count(f.accumulator.name), "fold accumulator '", f.accumulator.name, "' is shared");
    if (!f.part.name.empty()) {
      check_buffer(f.part);
      check(shared_.count(f.part.name) > 0, "fold part '", f.part.name, "' is not shared");
    }
    if (f.slots == 0) return visit(f.index);
    check(scope_.count("tr_s") == 0, "'tr_s' bound twice");
    scope_["tr_s"] = DType::Int64;
    visit(f.index);
    scope_.erase("tr_s");
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
  std::set<std::string> shared_;         // those of them in MemoryScope::Shared
  int loop_depth_ = 0;
  ForKind row_ = ForKind::Serial;  // the GPU row loop around (GpuWarp, GpuBlock), Serial: none
};

}  // namespace

void verify(const LoweredFunc& f) {
  TERRACE_ASSERT(f.body.defined(), "kernel ", f.name, " has no body");
  TERRACE_ASSERT(f.parallel_extent >= 0 && f.work_per_iteration >= 1, "kernel ", f.name,
                 ": bad parallel range");
  Verifier(f).visit(f.body);
}

}  // namespace terrace::kernels
