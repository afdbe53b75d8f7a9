// Kernel IR: small immutable expression and statement nodes with make(), listed in ir_nodes.def.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "interp/tensor.h"

namespace terrace::kernels {

enum class IRNodeKind : uint8_t {
#define TERRACE_IR_EXPR(name) name,
#define TERRACE_IR_STMT(name) name,
#include "kernels/ir_nodes.def"
};
const char* ir_node_name(IRNodeKind kind);

enum class Intrinsic : uint8_t {
#define TERRACE_IR_INTRINSIC(name, arity, returns_bool) name,
#include "kernels/ir_nodes.def"
};
const char* intrinsic_name(Intrinsic fn);  // "Exp"
int intrinsic_arity(Intrinsic fn);
bool intrinsic_returns_bool(Intrinsic fn);

enum class UnaryOp : uint8_t { Neg, Not /* logical, bool */, BitNot };
// Div and Mod on integers truncate toward zero (C semantics); the lowering guarantees b != 0.
// And/Or/Xor are logical on bools and bitwise on integers.
enum class BinaryOp : uint8_t { Add, Sub, Mul, Div, Mod, And, Or, Xor, Shl, Shr };
enum class CmpOp : uint8_t { EQ, NE, LT, LE, GT, GE };
const char* unary_op_name(UnaryOp op);
const char* binary_op_name(BinaryOp op);
const char* cmp_op_name(CmpOp op);

// How a loop runs. Parallel: the outermost loop, whose range the runtime splits across threads
// (the kernel receives [begin, end) of it). Vectorized: an innermost unit-stride loop. The GPU
// kinds are set by kernels/gpu's mapping passes, CUDA only: GpuBlock / GpuWarp, one block / one
// warp per iteration (grid-stride); GpuThread / GpuLane, iterations spread over the block's threads
// / the warp's 32 lanes (iteration r on thread r % count); GpuRegisters, as GpuThread from 0 over a
// constant range fully unrolled, so that the row it visits lives in registers (a nest of two loops
// is flattened into one range); GpuElements, the outermost loop (and, where its body is lets around
// one loop, that loop too, also GpuElements) flattened into one range of elements spread over the
// grid's threads, grid-stride, a step of the vector accesses' lanes at a time where they are aligned.
// A GpuRegisters loop's body may read Var "tr_k" (int64), the register of the element it visits.
// Unrolled: a short loop over a constant range that each thread runs whole, unrolled (CUDA: #pragma
// unroll), so that the local arrays it indexes by its variable stay in registers.
enum class ForKind : uint8_t {
  Serial, Parallel, Vectorized, GpuBlock, GpuThread, GpuWarp, GpuLane, GpuRegisters, GpuElements, Unrolled
};
const char* for_kind_name(ForKind kind);
bool is_gpu_loop(ForKind kind);

// Where an Allocate's array lives. Local: private to each thread (registers or its stack; the only
// scope on the CPU). Shared: one array per GPU block that all its threads see (CUDA __shared__).
enum class MemoryScope : uint8_t { Local, Shared };
const char* memory_scope_name(MemoryScope scope);

// How a fold combines its accumulator's value a with a value v (TVM's comm_reducer; kernels/fold.h
// writes each as an expression). Add, Mul; Or (integers: flags); Max, Min: v where it is greater
// (less), so a NaN v is never taken; MaxNaN, MinNaN: numpy's, a NaN wins; FirstIndex, LastIndex:
// the least (greatest) of positions, v where it is less (greater), the positions of the elements
// the fold visits, which its values name (an arg-extreme's second pass).
enum class FoldOp : uint8_t { Add, Mul, Or, Max, Min, MaxNaN, MinNaN, FirstIndex, LastIndex };
const char* fold_op_name(FoldOp op);

// Which threads a Barrier waits for: the 32 lanes of a warp, or every thread of a block.
enum class BarrierScope : uint8_t { Warp, Block };

// A kernel parameter: buffers[slot] viewed as an array of dtype; or, with slot kLocalSlot, a local
// array declared by an enclosing Allocate.
inline constexpr int kLocalSlot = -1;
struct Buffer {
  std::string name;
  DType dtype = DType::Float32;
  int slot = 0;
};

struct IRNode {
  explicit IRNode(IRNodeKind k) : kind(k) {}
  virtual ~IRNode() = default;
  const IRNodeKind kind;
};
struct BaseExprNode : IRNode {
  BaseExprNode(IRNodeKind k, DType t) : IRNode(k), type(t) {}
  const DType type;
};
struct BaseStmtNode : IRNode {
  using IRNode::IRNode;
};

// A shared handle to an immutable node; as<T>() is a checked downcast (nullptr on mismatch).
template <typename Base>
class IRHandle {
 public:
  IRHandle() = default;
  explicit IRHandle(std::shared_ptr<const Base> node) : node_(std::move(node)) {}
  bool defined() const { return node_ != nullptr; }
  IRNodeKind kind() const { return node_->kind; }
  const Base* get() const { return node_.get(); }
  const Base* operator->() const { return node_.get(); }
  bool same_as(const IRHandle& o) const { return node_ == o.node_; }
  template <typename T> const T* as() const {
    return node_ && node_->kind == T::kKind ? static_cast<const T*>(node_.get()) : nullptr;
  }

 private:
  std::shared_ptr<const Base> node_;
};

class Expr : public IRHandle<BaseExprNode> {
 public:
  using IRHandle::IRHandle;
  DType type() const { return get()->type; }
};
using Stmt = IRHandle<BaseStmtNode>;

// ---- Expressions ----
struct IntImm final : BaseExprNode {
  static constexpr IRNodeKind kKind = IRNodeKind::IntImm;
  int64_t value;
  IntImm(DType t, int64_t v) : BaseExprNode(kKind, t), value(v) {}
  static Expr make(DType t, int64_t v);  // integer or bool type
};
struct FloatImm final : BaseExprNode {
  static constexpr IRNodeKind kKind = IRNodeKind::FloatImm;
  double value;  // may be NaN or +-Inf
  FloatImm(DType t, double v) : BaseExprNode(kKind, t), value(v) {}
  static Expr make(DType t, double v);  // float32 or float64
};
struct Var final : BaseExprNode {
  static constexpr IRNodeKind kKind = IRNodeKind::Var;
  std::string name;
  Var(DType t, std::string n) : BaseExprNode(kKind, t), name(std::move(n)) {}
  static Expr make(DType t, std::string name);
};
// vector_lanes > 1 (set by kernels/gpu's passes): this access, made for each of that many
// consecutive elements (the lanes of a GpuElements loop's step, or the unrolled elements of a
// GpuRegisters loop), is one 16-byte access of all of them.
struct Load final : BaseExprNode {
  static constexpr IRNodeKind kKind = IRNodeKind::Load;
  Buffer buffer;
  Expr index;  // int64, in elements
  int vector_lanes;
  Load(Buffer b, Expr i, int lanes)
      : BaseExprNode(kKind, b.dtype), buffer(std::move(b)), index(std::move(i)), vector_lanes(lanes) {}
  static Expr make(Buffer buffer, Expr index, int vector_lanes = 1);
};
struct Unary final : BaseExprNode {
  static constexpr IRNodeKind kKind = IRNodeKind::Unary;
  UnaryOp op;
  Expr a;
  Unary(UnaryOp o, Expr x) : BaseExprNode(kKind, x.type()), op(o), a(std::move(x)) {}
  static Expr make(UnaryOp op, Expr a);
};
struct Binary final : BaseExprNode {
  static constexpr IRNodeKind kKind = IRNodeKind::Binary;
  BinaryOp op;
  Expr a, b;
  Binary(BinaryOp o, Expr x, Expr y)
      : BaseExprNode(kKind, x.type()), op(o), a(std::move(x)), b(std::move(y)) {}
  static Expr make(BinaryOp op, Expr a, Expr b);  // a and b of one type
};
struct Compare final : BaseExprNode {
  static constexpr IRNodeKind kKind = IRNodeKind::Compare;
  CmpOp op;
  Expr a, b;
  Compare(CmpOp o, Expr x, Expr y)
      : BaseExprNode(kKind, DType::Bool), op(o), a(std::move(x)), b(std::move(y)) {}
  static Expr make(CmpOp op, Expr a, Expr b);
};
struct Select final : BaseExprNode {
  static constexpr IRNodeKind kKind = IRNodeKind::Select;
  Expr cond, true_value, false_value;
  Select(Expr c, Expr t, Expr f)
      : BaseExprNode(kKind, t.type()), cond(std::move(c)), true_value(std::move(t)),
        false_value(std::move(f)) {}
  static Expr make(Expr cond, Expr true_value, Expr false_value);
};
struct Cast final : BaseExprNode {
  static constexpr IRNodeKind kKind = IRNodeKind::Cast;
  Expr value;
  Cast(DType t, Expr v) : BaseExprNode(kKind, t), value(std::move(v)) {}
  static Expr make(DType t, Expr value);  // returns value itself when it already has type t
};
struct Call final : BaseExprNode {
  static constexpr IRNodeKind kKind = IRNodeKind::Call;
  Intrinsic fn;
  std::vector<Expr> args;
  Call(DType t, Intrinsic f, std::vector<Expr> a) : BaseExprNode(kKind, t), fn(f), args(std::move(a)) {}
  static Expr make(Intrinsic fn, std::vector<Expr> args);  // float args of one type
};

// ---- Statements ----
struct For final : BaseStmtNode {
  static constexpr IRNodeKind kKind = IRNodeKind::For;
  std::string var;  // an int64 loop variable
  Expr begin, end;  // half-open range, int64
  ForKind for_kind;
  Stmt body;
  For(std::string v, Expr b, Expr e, ForKind k, Stmt s)
      : BaseStmtNode(kKind), var(std::move(v)), begin(std::move(b)), end(std::move(e)),
        for_kind(k), body(std::move(s)) {}
  static Stmt make(std::string var, Expr begin, Expr end, ForKind kind, Stmt body);
};
struct Store final : BaseStmtNode {
  static constexpr IRNodeKind kKind = IRNodeKind::Store;
  Buffer buffer;
  Expr index, value;
  int vector_lanes;  // as Load's
  Store(Buffer b, Expr i, Expr v, int lanes)
      : BaseStmtNode(kKind), buffer(std::move(b)), index(std::move(i)), value(std::move(v)), vector_lanes(lanes) {}
  static Stmt make(Buffer buffer, Expr index, Expr value, int vector_lanes = 1);
};
// One step of a fold (Halide's update over an RVar): accumulator[index] = combine(accumulator[index],
// value) by `op`. The loops around it that `index` does not read are the fold's: it visits their
// iterations in order, and passes may regroup them wherever the op allows (split_lanes.h, the GPU's
// threads). `value` does not read the accumulator. `name` names what passes derive from the fold
// (its lanes "<name>lanes", its value "<name>v"), unique in the kernel.
struct Accumulate final : BaseStmtNode {
  static constexpr IRNodeKind kKind = IRNodeKind::Accumulate;
  Buffer accumulator;  // a Local array
  Expr index, value;
  FoldOp op;
  std::string name;
  Accumulate(Buffer b, Expr i, Expr v, FoldOp o, std::string n)
      : BaseStmtNode(kKind), accumulator(std::move(b)), index(std::move(i)), value(std::move(v)), op(o),
        name(std::move(n)) {}
  static Stmt make(Buffer accumulator, Expr index, Expr value, FoldOp op, std::string name);
};
struct LetStmt final : BaseStmtNode {
  static constexpr IRNodeKind kKind = IRNodeKind::LetStmt;
  std::string name;
  Expr value;
  Stmt body;
  LetStmt(std::string n, Expr v, Stmt b)
      : BaseStmtNode(kKind), name(std::move(n)), value(std::move(v)), body(std::move(b)) {}
  static Stmt make(std::string name, Expr value, Stmt body);
};
struct Block final : BaseStmtNode {
  static constexpr IRNodeKind kKind = IRNodeKind::Block;
  std::vector<Stmt> stmts;
  explicit Block(std::vector<Stmt> s) : BaseStmtNode(kKind), stmts(std::move(s)) {}
  static Stmt make(std::vector<Stmt> stmts);  // a single statement is returned as is
};
struct IfThenElse final : BaseStmtNode {
  static constexpr IRNodeKind kKind = IRNodeKind::IfThenElse;
  Expr cond;
  Stmt then_case, else_case;  // else_case may be undefined
  IfThenElse(Expr c, Stmt t, Stmt e)
      : BaseStmtNode(kKind), cond(std::move(c)), then_case(std::move(t)), else_case(std::move(e)) {}
  static Stmt make(Expr cond, Stmt then_case, Stmt else_case = Stmt());
};

// A local array of `extent` elements of buffer.dtype (slot kLocalSlot), uninitialised, read and
// written through Load and Store in body: reductions keep their accumulators in one (a scalar is
// extent 1, which the C compiler keeps in a register). MemoryScope::Local: private to each
// iteration of the loops around it (in CUDA: to each thread); Shared: one per GPU block.
struct Allocate final : BaseStmtNode {
  static constexpr IRNodeKind kKind = IRNodeKind::Allocate;
  Buffer buffer;
  int64_t extent;
  Stmt body;
  MemoryScope scope;
  Allocate(Buffer b, int64_t n, Stmt s, MemoryScope m)
      : BaseStmtNode(kKind), buffer(std::move(b)), extent(n), body(std::move(s)), scope(m) {}
  // extent >= 1
  static Stmt make(Buffer buffer, int64_t extent, Stmt body, MemoryScope scope = MemoryScope::Local);
};

// A GPU barrier: every thread of the scope reaches it before any goes on, and their earlier
// writes to memory are visible after it.
struct Barrier final : BaseStmtNode {
  static constexpr IRNodeKind kKind = IRNodeKind::Barrier;
  BarrierScope scope;
  explicit Barrier(BarrierScope s) : BaseStmtNode(kKind), scope(s) {}
  static Stmt make(BarrierScope scope);
};

// A statement of a row that one thread makes for all (a store outside the row's spread loops):
// lane 0 of the row's warp, or thread 0 of its block. A Barrier after it shows its result to the
// others.
struct FirstThread final : BaseStmtNode {
  static constexpr IRNodeKind kKind = IRNodeKind::FirstThread;
  Stmt body;
  explicit FirstThread(Stmt b) : BaseStmtNode(kKind), body(std::move(b)) {}
  static Stmt make(Stmt body);
};

// A block's row of a kernel buffer copied between memory and the row's copy (kernels/gpu/
// cache_rows.h), by all the block's threads: `length` elements from element `base` of `buffer`.
// In shared memory (`row` a Shared array, one element of padding every 32): into it only, 16 bytes
// at a time where the row is aligned at run time (`vector` elements; 1: element by element). In
// registers (`row` each thread's Local array): element r on thread (r / vector) % threads, in its
// register (r / (vector * threads)) * vector + r % vector; by 16-byte streaming accesses where
// vector is 4 (the row 16-byte aligned), element by element where 1.
struct RowCopy final : BaseStmtNode {
  static constexpr IRNodeKind kKind = IRNodeKind::RowCopy;
  Buffer buffer, row;
  Expr base;
  int64_t length, threads, vector;
  bool registers, to_memory;
  RowCopy(Buffer b, Buffer r, Expr at, int64_t n, int64_t t, int64_t v, bool regs, bool out)
      : BaseStmtNode(kKind), buffer(std::move(b)), row(std::move(r)), base(std::move(at)), length(n), threads(t),
        vector(v), registers(regs), to_memory(out) {}
  static Stmt make(Buffer buffer, Buffer row, Expr base, int64_t length, int64_t threads, int64_t vector,
                   bool registers, bool to_memory);
};

// A fold whose partial values, one per GPU thread of a row, are combined across the row's threads
// (schedule_cuda reads the folds from the kernel's Accumulates; kernels/gpu/map_rows.h writes the
// nodes below).
struct GpuFold {
  Buffer accumulator;  // a Local array
  Expr index;          // the element folded; with slots, Var "tr_s" (int64) over [0, slots)
  // Two partial values combined: `combined` reads the accumulator's element (a Load) and the Var
  // "tr_other", the other thread's value; `combined_mine` reads Var "tr_mine" for the former.
  Expr combined, combined_mine;
  // The value threads other than the first start from (0 for a sum), so that what the
  // accumulator held before is counted once; undefined for max and min (taken any number of times).
  Expr identity;
  int64_t slots = 0;   // > 0: every element of the array [0, slots), each folded alike
  bool whole = false;  // the slots combined into one value, which every slot then holds
  Buffer part;         // a block's row: the Shared array the warps' values meet in (empty name: a warp's row)
  int64_t warps = 1;   // warps in the block
  // A flattened nest in registers: the thread folds into `vector` registers tr_slot_<accumulator>,
  // its slots (vector * thread + j) % width; 0: the accumulator itself.
  int64_t vector = 0, width = 0;
};

// Before a loop spread over threads: threads other than the first start the fold from its
// identity, or (vector > 0) each declares and starts its slot registers.
struct FoldStart final : BaseStmtNode {
  static constexpr IRNodeKind kKind = IRNodeKind::FoldStart;
  GpuFold fold;
  explicit FoldStart(GpuFold f) : BaseStmtNode(kKind), fold(std::move(f)) {}
  static Stmt make(GpuFold fold);
};

// After it: the fold's values combined across each warp by a butterfly of shuffles. A warp's row
// then gives every lane lane 0's value (the same bits everywhere, NaN included); a block's row
// leaves each warp's value in fold.part for a BlockReduce.
struct WarpReduce final : BaseStmtNode {
  static constexpr IRNodeKind kKind = IRNodeKind::WarpReduce;
  GpuFold fold;
  explicit WarpReduce(GpuFold f) : BaseStmtNode(kKind), fold(std::move(f)) {}
  static Stmt make(GpuFold fold);
};

// After a block Barrier: the warps' values in fold.part combined in warp order by every thread (the
// same value in all). read_back: the second step of a fold over slots, after another Barrier, where
// thread s combined slot s into the part and every thread now reads the slots back.
struct BlockReduce final : BaseStmtNode {
  static constexpr IRNodeKind kKind = IRNodeKind::BlockReduce;
  GpuFold fold;
  bool read_back;
  BlockReduce(GpuFold f, bool back) : BaseStmtNode(kKind), fold(std::move(f)), read_back(back) {}
  static Stmt make(GpuFold fold, bool read_back);
};

// One compiled unit: `void name(void** buffers, int64_t begin, int64_t end)`. The body's
// outermost loop (ForKind::Parallel) runs over [begin, end) of [0, parallel_extent); the runtime
// splits that range across threads. Var "begin"/"end" (int64) name the range in the body.
struct LoweredFunc {
  std::string name;
  std::vector<Buffer> buffers;  // in slot order
  Stmt body;
  int64_t parallel_extent = 1;
  int64_t work_per_iteration = 1;  // elements computed per outer iteration (sets the grain)
};

// Small constructors for the lowering's convenience.
Expr make_index(int64_t v);                   // an int64 constant
Expr make_const(DType t, double v);           // a constant of any numeric or bool type
Expr make_zero(DType t);
Expr make_one(DType t);
Expr operator+(Expr a, Expr b);
Expr operator-(Expr a, Expr b);
Expr operator*(Expr a, Expr b);
Expr operator/(Expr a, Expr b);

}  // namespace terrace::kernels
