// The printer of kernel IR as C++ or CUDA C that render_c.cpp drives (CRenderer), shared with
// render_cuda_loops.cpp, which holds its CUDA element loop and prints the GPU loops and nodes that
// kernels/gpu's passes leave in a row-wise kernel. Not for other files: kernels/render_c.h is the
// interface.
#pragma once
#include <map>
#include <optional>
#include <ostream>
#include <set>
#include <string>

#include "kernels/mutator.h"
#include "kernels/render_c.h"
#include "kernels/schedule_cuda.h"
#include "kernels/visitor.h"

namespace terrace::kernels::render_detail {

struct DialectTraits {
  const char* kernel_qualifier;
  const char* restrict_kw;
  bool buffers_as_array;         // void** buffers (C++) or one parameter per buffer (CUDA)
  const char* vectorize_pragma;  // before an innermost loop
};

const DialectTraits& traits(Dialect d);

const char* c_type(DType t);

// The unsigned type signed integer arithmetic wraps in (C leaves signed overflow undefined; the
// interpreter wraps).
const char* wrap_type(DType t);

std::string float_literal(double v, DType t);

std::string int_literal(int64_t v, DType t);

std::string lower_name(const char* s);

// True when `s` reads variable `name` other than in the index of a vector access (a lane whose
// every access is a vector's needs no index of its own: NVRTC would warn of an unused variable).
bool reads_var(const Stmt& s, const std::string& name);

// True where a node of kind N occurs in `x` (an Expr or a Stmt): contains<Load> reads memory,
// contains<For> holds a loop.
template <typename N, typename IR>
bool contains(const IR& x) {
  struct Finder : IRVisitor {
    bool found = false;
    void visit_node(const N*) override { found = true; }
  } f;
  f.visit(x);
  return f.found;
}

// Buffers the body stores to (the others are declared const).
class StoredBuffers : public IRVisitor {
 public:
  std::set<int> slots;
  using IRVisitor::visit;

 protected:
  void visit_node(const Store* op) override {
    slots.insert(op->buffer.slot);
    IRVisitor::visit_node(op);
  }
};

class CRenderer : public IRVisitor {
 public:
  CRenderer(std::ostream& os, Dialect d, const CudaSchedule* schedule = nullptr)
      : os_(os), dialect_(d), traits_(traits(d)), schedule_(schedule) {}

  std::string print(const Expr& e) {
    visit(e);
    return std::move(expr_);
  }
  void emit(const Stmt& s) { visit(s); }
  void indent(int n) { indent_ = n; }

 protected:
  void visit_node(const IntImm* op) override { expr_ = int_literal(op->value, op->type); }
  void visit_node(const FloatImm* op) override { expr_ = float_literal(op->value, op->type); }
  void visit_node(const Var* op) override {
    auto it = renamed_.find(op->name);
    expr_ = it != renamed_.end() ? it->second : op->name;
  }
  void visit_node(const Load* op) override {
    if (auto it = vector_name_.find(op); it != vector_name_.end() && in_lanes_) {
      expr_ = it->second + ".v[tr_k]";
      return;
    }
    if (in_register_loop_ && op->vector_lanes > 1) {
      // Its index is the loop's element: vector tr_lane + (tr_k / 4) * block, lane tr_k % 4,
      // written so that the four unrolled reads of one vector are visibly one load (an index
      // computed from the element was not merged: four loads each, a 4,096-column layernorm 16%
      // slower on the H100).
      const std::string lanes = std::to_string(op->vector_lanes);
      expr_ = "tr_ld4(" + op->buffer.name + ", tr_lane + (tr_k / " + lanes + ") * " +
              std::to_string(schedule_->block) + ", tr_k % " + lanes + ")";
      return;
    }
    if (op->buffer.slot == kLocalSlot && slot_register_.count(op->buffer.name)) {
      expr_ = slot_name(op->buffer.name);  // the schedule proved the index is the thread's slot
      return;
    }
    expr_ = element(op->buffer, op->index);
  }
  void visit_node(const Unary* op) override {
    std::string a = print(op->a);
    const char* w = wrap_type(op->type);
    if (op->op == UnaryOp::Neg && w)
      expr_ = cast(op->type, std::string("(0u - (") + w + ")" + a + ")");
    else
      expr_ = cast_if_int(op->type, std::string("(") + unary_op_name(op->op) + a + ")");
  }
  void visit_node(const Binary* op) override {
    std::string a = print(op->a), b = print(op->b);
    const char* w = wrap_type(op->type);
    bool wraps = w && (op->op == BinaryOp::Add || op->op == BinaryOp::Sub || op->op == BinaryOp::Mul);
    if (wraps) {
      a = std::string("(") + w + ")" + a;
      b = std::string("(") + w + ")" + b;
    }
    // Integer promotion makes a op b an int for small types; convert back to the node's type.
    expr_ = cast_if_int(op->type, "(" + a + " " + binary_op_name(op->op) + " " + b + ")");
  }
  void visit_node(const Compare* op) override {
    expr_ = "(" + print(op->a) + " " + cmp_op_name(op->op) + " " + print(op->b) + ")";
  }
  void visit_node(const Select* op) override {
    // A ternary with a read on one side stays a branch per element in clang's output (the read is
    // conditional, and clang does not speculate it): GPT-2's masked softmax (Where(mask, -inf, x /
    // 8)) ran its max pass one scalar at a time. Every read under a Select is in bounds whatever the
    // condition (a lowering guards a read that might not be with an IfThenElse statement, never a
    // Select), so on the CPU both sides are computed as tr_select's arguments and blended.
    if (dialect_ == Dialect::Cpp && (contains<Load>(op->true_value) || contains<Load>(op->false_value))) {
      expr_ = std::string("tr_select<") + c_type(op->type) + ">(" + print(op->cond) + ", " + print(op->true_value) +
              ", " + print(op->false_value) + ")";
      return;
    }
    expr_ = "(" + print(op->cond) + " ? " + print(op->true_value) + " : " +
            print(op->false_value) + ")";
  }
  void visit_node(const Cast* op) override { expr_ = convert(op->value.type(), op->type, print(op->value)); }
  void visit_node(const Call* op) override {
    std::string s = "tr_" + lower_name(intrinsic_name(op->fn)) +
                    (op->args[0].type() == DType::Float32 ? "_f32(" : "_f64(");
    for (size_t i = 0; i < op->args.size(); ++i) s += (i ? ", " : "") + print(op->args[i]);
    expr_ = s + ")";
  }

  void visit_node(const For* op) override {
    switch (op->for_kind) {
      case ForKind::GpuElements: return emit_per_element(op);
      case ForKind::GpuWarp: case ForKind::GpuBlock: return emit_row_loop(op);
      case ForKind::GpuLane: case ForKind::GpuThread: return emit_lane_loop(op);
      case ForKind::GpuRegisters: return emit_register_loop(op, op->body.as<For>());
      default: break;
    }
    if (in_row_) return emit_row_serial_loop(op);
    bool innermost = !contains<For>(op->body);
    if (innermost && (op->for_kind == ForKind::Vectorized || op->for_kind == ForKind::Parallel))
      line() << traits_.vectorize_pragma;
    line() << loop_header(op) << " {\n";
    ++indent_;
    visit(op->body);
    --indent_;
    line() << "}\n";
  }
  void visit_node(const Store* op) override {
    if (op->buffer.slot == kLocalSlot && slot_register_.count(op->buffer.name)) {
      line() << slot_name(op->buffer.name) << " = " << print(op->value) << ";\n";
      return;
    }
    if (auto it = vector_name_.find(op); it != vector_name_.end() && in_lanes_) {
      line() << it->second << ".v[tr_k] = " << print(op->value) << ";\n";
      return;
    }
    line() << (first_thread_ ? "if (tr_lane == 0) " : "") << element(op->buffer, op->index) << " = "
           << print(op->value) << ";\n";
  }
  void visit_node(const Accumulate* op) override {
    TERRACE_ASSERT(false, "render_c: fold ", op->name, " not made a store (kernels/plain_folds.h)");
  }
  // Let bodies stay in the enclosing C scope: verify() guarantees every name is bound once.
  void visit_node(const LetStmt* op) override {
    line() << "const " << c_type(op->value.type()) << " " << op->name << " = " << print(op->value)
           << ";\n";
    visit(op->body);
  }
  // A local array in the enclosing C scope (names are unique, as for LetStmt). A block's shared
  // arrays open a scope of their own (the row loop's, inside them).
  void visit_node(const Allocate* op) override {
    if (op->scope == MemoryScope::Local) {
      line() << c_type(op->buffer.dtype) << " " << op->buffer.name << "[" << op->extent << "];\n";
      visit(op->body);
      return;
    }
    TERRACE_ASSERT(dialect_ == Dialect::Cuda, "shared array '", op->buffer.name, "' in a C++ kernel");
    const bool open = !in_shared_scope_;
    if (open) {
      line() << "{\n";
      ++indent_;
      in_shared_scope_ = true;
    }
    line() << "__shared__ " << c_type(op->buffer.dtype) << " " << op->buffer.name << "[" << op->extent << "];\n";
    shared_arrays_.insert(op->buffer.name);
    visit(op->body);
    shared_arrays_.erase(op->buffer.name);
    if (open) {
      in_shared_scope_ = false;
      --indent_;
      line() << "}\n";
    }
  }
  // The GPU nodes (render_cuda_loops.cpp).
  void visit_node(const Barrier* op) override;
  void visit_node(const RowCopy* op) override;
  void visit_node(const FirstThread* op) override;
  void visit_node(const FoldStart* op) override;
  void visit_node(const WarpReduce* op) override;
  void visit_node(const BlockReduce* op) override;
  void visit_node(const IfThenElse* op) override {
    line() << "if (" << print(op->cond) << ") {\n";
    nested(op->then_case);
    if (op->else_case.defined()) {
      line() << "} else {\n";
      nested(op->else_case);
    }
    line() << "}\n";
  }

 private:
  std::ostream& line() { return os_ << std::string(size_t(2 * indent_), ' '); }
  void nested(const Stmt& s) {
    ++indent_;
    visit(s);
    --indent_;
  }

  // A GpuElements loop (and in 2-D the one inside it) as one grid-stride range [tr_lo, tr_hi) of
  // elements. With vector accesses of W lanes and every vector buffer aligned to W elements at
  // run time, each step takes W elements: vector loads, the body once per lane (unrolled; the
  // lanes live in registers), vector stores; the elements before the first and after the last
  // whole vector (1-D ranges only) run one by one.
  void emit_per_element(const For* op);
  void emit_vector_steps(const For* op);
  void emit_vector_step(const For* op, const std::vector<const IRNode*>& order);

  // The loops of kernels/gpu/map_rows: a row per warp or block, its lane loops, its other loops.
  void emit_row_loop(const For* op);
  void emit_lane_loop(const For* op);
  void emit_row_serial_loop(const For* op);
  bool narrow(const For* op) const;
  bool open_slots(const GpuFold& f);
  void close_slots(bool open);
  void start_slot_registers(const GpuFold& f);
  void reduce_slot_registers(const GpuFold& f);

  // A GpuRegisters loop (or a nest [0, J) x [0, W) flattened, `inner` the second loop).
  void emit_register_loop(const For* op, const For* inner);

  std::string slot_name(const std::string& accumulator) const {
    return "tr_slot_" + accumulator + "[tr_k % " + std::to_string(row_vector()) + "]";
  }
  int64_t row_vector() const { return schedule_ ? schedule_->row_vector : 1; }

  // An element of an array; of a shared one, in 32-bit arithmetic (its rows are shorter than 2^30
  // elements; 64-bit is several instructions each) with one element of padding every 32, so that a
  // stride of 16 or 32 elements does not hit one bank.
  std::string element(const Buffer& b, const Expr& index) {
    if (b.slot == kLocalSlot && shared_arrays_.count(b.name))
      return b.name + "[" + padded("(int)(" + print(index) + ")") + "]";
    return b.name + "[" + print(index) + "]";
  }
  static std::string padded(const std::string& x) { return x + " + (" + x + " >> 5)"; }
  void move_row(const RowCopy* op);
  void fill_shared_row(const RowCopy* op);

  // Element tr_t of the flattened range: binds the loop variables (the innermost one as
  // `inner_name`) and, in 2-D, the outer loop's lets.
  void element_prologue(const For* op, const std::string& inner_name) {
    if (!elements_.inner) {
      line() << "const int64_t " << inner_name << " = tr_t;\n";
      return;
    }
    const std::string n = std::to_string(elements_.inner_extent);
    line() << "const int64_t " << op->var << " = tr_t / " << n << ";\n";
    line() << "const int64_t " << inner_name << " = tr_t - " << op->var << " * " << n << ";\n";
    for (Stmt body = op->body; const LetStmt* let = body.as<LetStmt>(); body = let->body)
      line() << "const " << c_type(let->value.type()) << " " << let->name << " = " << print(let->value) << ";\n";
  }
  void scalar_element(const For* op) {
    element_prologue(op, elements_.inner ? elements_.inner->var : op->var);
    visit(elements_.lane_body());
  }

  // A GpuElements loop as the renderer walks it: the loop, the inner loop it flattens (2-D), and
  // its vector accesses in the order the body reaches them (the render is stable).
  struct ElementLoop {
    const For* outer = nullptr;
    const For* inner = nullptr;
    int64_t inner_extent = 1;
    int width = 1;  // the vector accesses' lanes, 1 where there are none
    std::vector<const IRNode*> vector_accesses;
    const Stmt& lane_body() const { return inner ? inner->body : outer->body; }
  };
  static ElementLoop element_loop(const For* outer);
  static const Buffer& buffer_of(const IRNode* access) {
    if (const Load* ld = dynamic_cast<const Load*>(access)) return ld->buffer;
    return static_cast<const Store*>(access)->buffer;
  }

  static std::string cast(DType t, const std::string& e) {
    return std::string("((") + c_type(t) + ")" + e + ")";
  }
  static std::string cast_if_int(DType t, const std::string& e) {
    return is_integer(t) ? cast(t, e) : e;
  }

  std::string loop_header(const For* op) {
    std::string v = op->var, b = print(op->begin), e = print(op->end);
    if (dialect_ == Dialect::Cuda) {
      switch (op->for_kind) {
        case ForKind::Parallel:  // a grid-stride loop over [begin, end)
          return "for (int64_t " + v + " = " + b + " + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; " +
                 v + " < " + e + "; " + v + " += (int64_t)gridDim.x * blockDim.x)";
        case ForKind::GpuBlock:
          return "for (int64_t " + v + " = " + b + " + blockIdx.x; " + v + " < " + e + "; " + v +
                 " += gridDim.x)";
        case ForKind::GpuThread:
          return "for (int64_t " + v + " = " + b + " + threadIdx.x; " + v + " < " + e + "; " + v +
                 " += blockDim.x)";
        default: break;
      }
    } else {
      TERRACE_ASSERT(!is_gpu_loop(op->for_kind), "GPU loop '", op->var, "' in a C++ kernel");
    }
    return "for (int64_t " + v + " = " + b + "; " + v + " < " + e + "; ++" + v + ")";
  }

  // ONNX Cast semantics between compute and storage types.
  std::string convert(DType from, DType to, const std::string& e) {
    if (from == DType::Float16 || from == DType::BFloat16) {
      TERRACE_ASSERT(to == DType::Float32, "16-bit floats are only widened to float32");
      return (from == DType::Float16 ? "tr_h2f(" : "tr_bf2f(") + e + ")";
    }
    if (to == DType::Float16 || to == DType::BFloat16) {
      std::string f = from == DType::Float32 ? e : cast(DType::Float32, convert(from, DType::Float32, e));
      return (to == DType::Float16 ? "tr_f2h(" : "tr_f2bf(") + f + ")";
    }
    if (to == DType::Bool) return "(" + e + " != 0)";
    if (is_float(from) && is_integer(to)) return saturating(from, to, e);
    return cast(to, e);
  }

  std::string saturating(DType from, DType to, const std::string& e) {
    double lo = 0, hi = 0;
    dispatch_dtype(to, [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_integral_v<T>) {
        lo = double(std::numeric_limits<T>::lowest());
        hi = double(std::numeric_limits<T>::max());
      }
    });
    int64_t tlo = 0, tmax = 0;  // the integer ends (not int64_t(hi): 2^63 overflows int64)
    dispatch_dtype(to, [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_integral_v<T>) tlo = int64_t(std::numeric_limits<T>::lowest());
      if constexpr (std::is_integral_v<T> && !std::is_same_v<T, uint64_t>)
        tmax = int64_t(std::numeric_limits<T>::max());
    });
    // The upper end of uint64 does not fit int64: spell it as ~0.
    std::string thi = to == DType::UInt64 ? "(~(uint64_t)0)" : int_literal(tmax, to);
    return std::string("tr_sat_cast<") + c_type(to) + ", " + c_type(from) + ">(" + e + ", " +
           float_literal(lo, from) + ", " + float_literal(hi, from) + ", " + int_literal(tlo, to) +
           ", " + thi + ")";
  }

  std::ostream& os_;
  Dialect dialect_;
  const DialectTraits& traits_;
  const CudaSchedule* schedule_;
  ElementLoop elements_;                                 // the GpuElements loop being printed
  std::string expr_;
  int indent_ = 1;
  std::map<std::string, std::string> renamed_;           // variables printed under another name
  std::map<const IRNode*, std::string> vector_name_;     // vector accesses: their register
  bool in_lanes_ = false;                                // rendering one lane of a vector step
  bool in_row_ = false;                                  // PerRowWarp: inside the row loop
  bool in_register_loop_ = false;                       // PerRowBlock: in emit_register_loop's body
  std::set<std::string> slot_register_;                 // PerRowBlock: slot arrays folded in tr_slot_<name>
  std::set<std::string> shared_arrays_;                  // the Shared arrays in scope
  bool in_shared_scope_ = false;                        // inside a block's shared arrays' scope
  bool first_thread_ = false;                             // in a FirstThread's body
};

}  // namespace terrace::kernels::render_detail
