// Kernel IR node constructors (with type checks) and name tables.
#include "kernels/ir.h"

#include <cmath>

namespace terrace::kernels {

const char* ir_node_name(IRNodeKind kind) {
  switch (kind) {
#define TERRACE_IR_EXPR(name) case IRNodeKind::name: return #name;
#define TERRACE_IR_STMT(name) case IRNodeKind::name: return #name;
#include "kernels/ir_nodes.def"
  }
  return "?";
}

namespace {
struct IntrinsicInfo {
  const char* name;
  int arity;
  bool returns_bool;
};
constexpr IntrinsicInfo kIntrinsics[] = {
#define TERRACE_IR_INTRINSIC(name, arity, returns_bool) {#name, arity, returns_bool},
#include "kernels/ir_nodes.def"
};
}  // namespace

const char* intrinsic_name(Intrinsic fn) { return kIntrinsics[size_t(fn)].name; }
int intrinsic_arity(Intrinsic fn) { return kIntrinsics[size_t(fn)].arity; }
bool intrinsic_returns_bool(Intrinsic fn) { return kIntrinsics[size_t(fn)].returns_bool; }

const char* unary_op_name(UnaryOp op) {
  constexpr const char* names[] = {"-", "!", "~"};
  return names[size_t(op)];
}
const char* binary_op_name(BinaryOp op) {
  constexpr const char* names[] = {"+", "-", "*", "/", "%", "&", "|", "^", "<<", ">>"};
  return names[size_t(op)];
}
const char* cmp_op_name(CmpOp op) {
  constexpr const char* names[] = {"==", "!=", "<", "<=", ">", ">="};
  return names[size_t(op)];
}
const char* for_kind_name(ForKind kind) {
  constexpr const char* names[] = {"serial",   "parallel", "vectorized", "gpu_block",
                                   "gpu_thread", "gpu_warp", "gpu_lane", "gpu_registers", "gpu_elements", "unrolled"};
  return names[size_t(kind)];
}
bool is_gpu_loop(ForKind kind) {
  return kind != ForKind::Serial && kind != ForKind::Parallel && kind != ForKind::Vectorized &&
         kind != ForKind::Unrolled;
}
const char* fold_op_name(FoldOp op) {
  constexpr const char* names[] = {"add", "mul", "or", "max", "min", "max_nan", "min_nan", "first_index", "last_index"};
  return names[size_t(op)];
}
const char* memory_scope_name(MemoryScope scope) { return scope == MemoryScope::Shared ? "shared" : "local"; }

namespace {
template <typename Node, typename... Args>
Expr expr(Args&&... args) {
  return Expr(std::make_shared<const Node>(std::forward<Args>(args)...));
}
template <typename Node, typename... Args>
Stmt stmt(Args&&... args) {
  return Stmt(std::make_shared<const Node>(std::forward<Args>(args)...));
}
void check_defined(const Expr& e, const char* what) {
  TERRACE_ASSERT(e.defined(), what, ": undefined operand");
}
}  // namespace

Expr IntImm::make(DType t, int64_t v) {
  TERRACE_ASSERT(is_integer(t) || t == DType::Bool, "IntImm of type ", dtype_name(t));
  return expr<IntImm>(t, t == DType::Bool ? int64_t(v != 0) : v);
}
Expr FloatImm::make(DType t, double v) {
  TERRACE_ASSERT(t == DType::Float32 || t == DType::Float64, "FloatImm of type ", dtype_name(t));
  return expr<FloatImm>(t, t == DType::Float32 ? double(float(v)) : v);
}
Expr Var::make(DType t, std::string name) { return expr<Var>(t, std::move(name)); }
Expr Load::make(Buffer buffer, Expr index, int vector_lanes) {
  check_defined(index, "Load");
  TERRACE_ASSERT(index.type() == DType::Int64, "Load index must be int64");
  TERRACE_ASSERT(vector_lanes >= 1, "Load of ", buffer.name, ": ", vector_lanes, " lanes");
  return expr<Load>(std::move(buffer), std::move(index), vector_lanes);
}
Expr Unary::make(UnaryOp op, Expr a) {
  check_defined(a, "Unary");
  TERRACE_ASSERT(op != UnaryOp::Not || a.type() == DType::Bool, "logical not of non-bool");
  return expr<Unary>(op, std::move(a));
}
Expr Binary::make(BinaryOp op, Expr a, Expr b) {
  check_defined(a, "Binary");
  check_defined(b, "Binary");
  TERRACE_ASSERT(a.type() == b.type(), "Binary ", binary_op_name(op), " of ", dtype_name(a.type()),
                 " and ", dtype_name(b.type()));
  return expr<Binary>(op, std::move(a), std::move(b));
}
Expr Compare::make(CmpOp op, Expr a, Expr b) {
  check_defined(a, "Compare");
  check_defined(b, "Compare");
  TERRACE_ASSERT(a.type() == b.type(), "Compare of ", dtype_name(a.type()), " and ",
                 dtype_name(b.type()));
  return expr<Compare>(op, std::move(a), std::move(b));
}
Expr Select::make(Expr cond, Expr t, Expr f) {
  check_defined(cond, "Select");
  check_defined(t, "Select");
  check_defined(f, "Select");
  TERRACE_ASSERT(cond.type() == DType::Bool, "Select condition must be bool");
  TERRACE_ASSERT(t.type() == f.type(), "Select of ", dtype_name(t.type()), " and ",
                 dtype_name(f.type()));
  return expr<Select>(std::move(cond), std::move(t), std::move(f));
}
Expr Cast::make(DType t, Expr value) {
  check_defined(value, "Cast");
  if (value.type() == t) return value;
  return expr<Cast>(t, std::move(value));
}
Expr Call::make(Intrinsic fn, std::vector<Expr> args) {
  TERRACE_ASSERT(int(args.size()) == intrinsic_arity(fn), intrinsic_name(fn), ": wrong arity");
  for (const Expr& a : args) {
    check_defined(a, intrinsic_name(fn));
    TERRACE_ASSERT(a.type() == args[0].type() &&
                       (a.type() == DType::Float32 || a.type() == DType::Float64),
                   intrinsic_name(fn), " takes float32 or float64 arguments of one type");
  }
  DType t = intrinsic_returns_bool(fn) ? DType::Bool : args[0].type();
  return expr<Call>(t, fn, std::move(args));
}

Stmt For::make(std::string var, Expr begin, Expr end, ForKind kind, Stmt body) {
  check_defined(begin, "For");
  check_defined(end, "For");
  TERRACE_ASSERT(body.defined(), "For without body");
  return stmt<For>(std::move(var), std::move(begin), std::move(end), kind, std::move(body));
}
Stmt Store::make(Buffer buffer, Expr index, Expr value, int vector_lanes) {
  check_defined(index, "Store");
  check_defined(value, "Store");
  TERRACE_ASSERT(index.type() == DType::Int64, "Store index must be int64");
  TERRACE_ASSERT(value.type() == buffer.dtype, "Store of ", dtype_name(value.type()), " into ",
                 dtype_name(buffer.dtype), " buffer ", buffer.name);
  TERRACE_ASSERT(vector_lanes >= 1, "Store to ", buffer.name, ": ", vector_lanes, " lanes");
  return stmt<Store>(std::move(buffer), std::move(index), std::move(value), vector_lanes);
}
Stmt Accumulate::make(Buffer accumulator, Expr index, Expr value, FoldOp op, std::string name) {
  check_defined(index, "Accumulate");
  check_defined(value, "Accumulate");
  TERRACE_ASSERT(accumulator.slot == kLocalSlot, "Accumulate into ", accumulator.name, ": not a local array");
  TERRACE_ASSERT(index.type() == DType::Int64, "Accumulate index must be int64");
  TERRACE_ASSERT(value.type() == accumulator.dtype, "Accumulate of ", dtype_name(value.type()), " into ",
                 dtype_name(accumulator.dtype), " accumulator ", accumulator.name);
  TERRACE_ASSERT((op != FoldOp::Or || is_integer(accumulator.dtype)) &&
                     ((op != FoldOp::FirstIndex && op != FoldOp::LastIndex) || accumulator.dtype == DType::Int64),
                 "Accumulate into ", accumulator.name, ": ", fold_op_name(op), " of ", dtype_name(accumulator.dtype));
  return stmt<Accumulate>(std::move(accumulator), std::move(index), std::move(value), op, std::move(name));
}
Stmt LetStmt::make(std::string name, Expr value, Stmt body) {
  check_defined(value, "LetStmt");
  TERRACE_ASSERT(body.defined(), "LetStmt without body");
  return stmt<LetStmt>(std::move(name), std::move(value), std::move(body));
}
Stmt Block::make(std::vector<Stmt> stmts) {
  if (stmts.size() == 1) return stmts[0];
  return stmt<Block>(std::move(stmts));
}
Stmt IfThenElse::make(Expr cond, Stmt then_case, Stmt else_case) {
  check_defined(cond, "IfThenElse");
  TERRACE_ASSERT(cond.type() == DType::Bool, "IfThenElse condition must be bool");
  return stmt<IfThenElse>(std::move(cond), std::move(then_case), std::move(else_case));
}
Stmt Allocate::make(Buffer buffer, int64_t extent, Stmt body, MemoryScope scope) {
  TERRACE_ASSERT(buffer.slot == kLocalSlot, "Allocate of ", buffer.name, ": slot must be kLocalSlot");
  TERRACE_ASSERT(extent >= 1, "Allocate of ", buffer.name, ": extent ", extent);
  TERRACE_ASSERT(buffer.dtype != DType::String, "Allocate of ", buffer.name, ": string dtype");
  TERRACE_ASSERT(body.defined(), "Allocate without body");
  return stmt<Allocate>(std::move(buffer), extent, std::move(body), scope);
}

Stmt Barrier::make(BarrierScope scope) { return stmt<Barrier>(scope); }
Stmt RowCopy::make(Buffer buffer, Buffer row, Expr base, int64_t length, int64_t threads, int64_t vector,
                   bool registers, bool to_memory) {
  check_defined(base, "RowCopy");
  TERRACE_ASSERT(buffer.slot != kLocalSlot && row.slot == kLocalSlot && row.dtype == buffer.dtype, "RowCopy of ",
                 buffer.name, " into ", row.name);
  TERRACE_ASSERT(length > 0 && threads > 0 && vector >= 1 && (registers || !to_memory), "RowCopy of ", buffer.name);
  return stmt<RowCopy>(std::move(buffer), std::move(row), std::move(base), length, threads, vector, registers,
                       to_memory);
}
Stmt FirstThread::make(Stmt body) {
  TERRACE_ASSERT(body.defined(), "FirstThread without body");
  return stmt<FirstThread>(std::move(body));
}

namespace {
void check_fold(const GpuFold& f) {
  TERRACE_ASSERT(f.accumulator.slot == kLocalSlot, "GPU fold of ", f.accumulator.name, ": not a local array");
  check_defined(f.index, "GPU fold index");
  check_defined(f.combined, "GPU fold combine");
  TERRACE_ASSERT(f.slots >= 0 && f.warps >= 1 && f.vector >= 0, "GPU fold of ", f.accumulator.name, ": bad counts");
  TERRACE_ASSERT(f.vector == 0 || (f.width > 0 && f.combined_mine.defined()), "GPU fold of ", f.accumulator.name,
                 ": slot registers without a width");
}
}  // namespace

Stmt FoldStart::make(GpuFold fold) {
  check_fold(fold);
  return stmt<FoldStart>(std::move(fold));
}
Stmt WarpReduce::make(GpuFold fold) {
  check_fold(fold);
  return stmt<WarpReduce>(std::move(fold));
}
Stmt BlockReduce::make(GpuFold fold, bool read_back) {
  check_fold(fold);
  TERRACE_ASSERT(!fold.part.name.empty(), "BlockReduce of ", fold.accumulator.name, " without a shared part");
  return stmt<BlockReduce>(std::move(fold), read_back);
}

Expr make_index(int64_t v) { return IntImm::make(DType::Int64, v); }
Expr make_const(DType t, double v) {
  if (t == DType::Float32 || t == DType::Float64) return FloatImm::make(t, v);
  return IntImm::make(t, int64_t(v));
}
Expr make_zero(DType t) { return make_const(t, 0); }
Expr make_one(DType t) { return make_const(t, 1); }
Expr operator+(Expr a, Expr b) { return Binary::make(BinaryOp::Add, std::move(a), std::move(b)); }
Expr operator-(Expr a, Expr b) { return Binary::make(BinaryOp::Sub, std::move(a), std::move(b)); }
Expr operator*(Expr a, Expr b) { return Binary::make(BinaryOp::Mul, std::move(a), std::move(b)); }
Expr operator/(Expr a, Expr b) { return Binary::make(BinaryOp::Div, std::move(a), std::move(b)); }

}  // namespace terrace::kernels
