// IRPrinter: one line per statement, nested blocks indented; expressions fully parenthesised.
#include "kernels/printer.h"

#include <cstdio>
#include <sstream>

#include "kernels/visitor.h"

namespace terrace::kernels {
namespace {

class IRPrinter : public IRVisitor {
 public:
  explicit IRPrinter(std::ostream& os) : os_(os) {}
  using IRVisitor::visit;

 protected:
  void visit_node(const IntImm* op) override {
    if (op->type == DType::Bool) os_ << (op->value ? "true" : "false");
    else if (op->type == DType::Int64) os_ << op->value;
    else os_ << dtype_name(op->type) << "(" << op->value << ")";
  }
  void visit_node(const FloatImm* op) override {
    char buf[40];
    std::snprintf(buf, sizeof buf, op->type == DType::Float32 ? "%.9g" : "%.17g", op->value);
    os_ << buf << (op->type == DType::Float32 ? "f" : "");
  }
  void visit_node(const Var* op) override { os_ << op->name; }
  void visit_node(const Load* op) override {
    os_ << op->buffer.name << "[";
    visit(op->index);
    os_ << "]";
    if (op->vector_lanes > 1) os_ << "<" << op->vector_lanes << ">";
  }
  void visit_node(const Unary* op) override {
    os_ << unary_op_name(op->op);
    visit(op->a);
  }
  void visit_node(const Binary* op) override { infix(op->a, binary_op_name(op->op), op->b); }
  void visit_node(const Compare* op) override { infix(op->a, cmp_op_name(op->op), op->b); }
  void visit_node(const Select* op) override {
    os_ << "select(";
    visit(op->cond);
    os_ << ", ";
    visit(op->true_value);
    os_ << ", ";
    visit(op->false_value);
    os_ << ")";
  }
  void visit_node(const Cast* op) override {
    os_ << dtype_name(op->type) << "(";
    visit(op->value);
    os_ << ")";
  }
  void visit_node(const Call* op) override {
    os_ << intrinsic_name(op->fn) << "(";
    for (size_t i = 0; i < op->args.size(); ++i) {
      if (i) os_ << ", ";
      visit(op->args[i]);
    }
    os_ << ")";
  }

  void visit_node(const For* op) override {
    line() << "for " << op->var << " in [";
    visit(op->begin);
    os_ << ", ";
    visit(op->end);
    os_ << ") " << for_kind_name(op->for_kind) << " {\n";
    nested(op->body);
    line() << "}\n";
  }
  void visit_node(const Store* op) override {
    line() << op->buffer.name << "[";
    visit(op->index);
    os_ << "]";
    if (op->vector_lanes > 1) os_ << "<" << op->vector_lanes << ">";
    os_ << " = ";
    visit(op->value);
    os_ << "\n";
  }
  void visit_node(const Accumulate* op) override {
    line() << "fold " << op->name << ": " << op->accumulator.name << "[";
    visit(op->index);
    os_ << "] <- " << fold_op_name(op->op) << "(";
    visit(op->value);
    os_ << ")\n";
  }
  void visit_node(const LetStmt* op) override {
    line() << "let " << op->name << ": " << dtype_name(op->value.type()) << " = ";
    visit(op->value);
    os_ << "\n";
    visit(op->body);
  }
  void visit_node(const Allocate* op) override {
    line() << "allocate " << (op->scope == MemoryScope::Local ? "" : "shared ") << op->buffer.name << ": "
           << dtype_name(op->buffer.dtype) << "[" << op->extent << "]\n";
    visit(op->body);
  }
  void visit_node(const Barrier* op) override {
    line() << "barrier " << (op->scope == BarrierScope::Warp ? "warp" : "block") << "\n";
  }
  void visit_node(const RowCopy* op) override {
    line() << "row_copy " << (op->to_memory ? op->buffer.name : op->row.name) << " <- "
           << (op->to_memory ? op->row.name : op->buffer.name) << " at ";
    visit(op->base);
    os_ << ", " << op->length << " elements by " << op->threads << " threads"
        << (op->registers ? " in registers" : "") << (op->vector > 1 ? " by " + std::to_string(op->vector) : "")
        << "\n";
  }
  void visit_node(const FirstThread* op) override {
    line() << "first_thread {\n";
    nested(op->body);
    line() << "}\n";
  }
  void visit_node(const FoldStart* op) override { fold("fold_start", op->fold) << "\n"; }
  void visit_node(const WarpReduce* op) override { fold("warp_reduce", op->fold) << "\n"; }
  void visit_node(const BlockReduce* op) override {
    fold("block_reduce", op->fold) << (op->read_back ? " read_back" : "") << "\n";
  }
  void visit_node(const IfThenElse* op) override {
    line() << "if (";
    visit(op->cond);
    os_ << ") {\n";
    nested(op->then_case);
    if (op->else_case.defined()) {
      line() << "} else {\n";
      nested(op->else_case);
    }
    line() << "}\n";
  }

 private:
  // `what acc[index] by combine`, then the fold's options.
  std::ostream& fold(const char* what, const GpuFold& f) {
    line() << what << " " << f.accumulator.name << "[";
    visit(f.index);
    os_ << "] by ";
    visit(f.combined);
    if (f.identity.defined()) {
      os_ << " from ";
      visit(f.identity);
    }
    if (f.slots) os_ << " slots " << f.slots << (f.whole ? " whole" : "");
    if (!f.part.name.empty()) os_ << " via " << f.part.name << " of " << f.warps << " warps";
    if (f.vector) os_ << " in registers " << f.vector << " of " << f.width;
    return os_;
  }
  void infix(const Expr& a, const char* op, const Expr& b) {
    os_ << "(";
    visit(a);
    os_ << " " << op << " ";
    visit(b);
    os_ << ")";
  }
  std::ostream& line() { return os_ << std::string(size_t(2 * indent_), ' '); }
  void nested(const Stmt& s) {
    ++indent_;
    visit(s);
    --indent_;
  }
  std::ostream& os_;
  int indent_ = 0;
};

template <typename Node>
std::string print(const Node& n) {
  std::ostringstream os;
  IRPrinter(os).visit(n);
  return os.str();
}

}  // namespace

std::string to_string(const Expr& e) { return print(e); }
std::string to_string(const Stmt& s) { return print(s); }

std::string to_string(const LoweredFunc& f) {
  std::ostringstream os;
  os << "kernel " << f.name << "(";
  for (size_t i = 0; i < f.buffers.size(); ++i)
    os << (i ? ", " : "") << f.buffers[i].name << ": " << dtype_name(f.buffers[i].dtype) << "*";
  os << ") over [0, " << f.parallel_extent << "), " << f.work_per_iteration
     << " elements per iteration\n"
     << to_string(f.body);
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Expr& e) { return os << to_string(e); }
std::ostream& operator<<(std::ostream& os, const Stmt& s) { return os << to_string(s); }

}  // namespace terrace::kernels
