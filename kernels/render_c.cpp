// render_c(): kernel IR -> C++ or CUDA C. The dialects differ in the entries of DialectTraits, in
// how a loop header is spelled (loop_header) and, in CUDA, in the Parallel loop, which the
// kernel's schedule (kernels/schedule_cuda.h) maps onto threads: a grid-stride loop per iteration,
// or per element with 16-byte vector loads and stores (emit_per_element), or a warp or a block
// per row of a reduction (emit_row_warp_loop; a block's row in shared memory).
#include "kernels/render_c.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "kernels/mutator.h"
#include "kernels/schedule_cuda.h"
#include "kernels/visitor.h"

namespace terrace::kernels {
namespace {

struct DialectTraits {
  const char* kernel_qualifier;
  const char* restrict_kw;
  bool buffers_as_array;         // void** buffers (C++) or one parameter per buffer (CUDA)
  const char* vectorize_pragma;  // before an innermost loop
};

const DialectTraits& traits(Dialect d) {
  // Four vectors in flight per iteration: LLVM's cost model declines to interleave a long math
  // chain (exp, a division), which then waits on its own latency. On one Zen 3 core,
  // bench/elementwise_bench's chain took 46 ms not interleaved, 36 by 2 (by 4 spilled registers
  // while tanh used exp), and with the rational tanh 28.5 by 2 and 20.6 by 4.
  static const DialectTraits cpp{"extern \"C\" void", "__restrict", true,
                                 "#pragma clang loop vectorize(enable) interleave_count(4)\n"};
  static const DialectTraits cuda{"extern \"C\" __global__ void", "__restrict__", false, ""};
  return d == Dialect::Cpp ? cpp : cuda;
}

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

const char* c_type(DType t) {
  switch (t) {
    case DType::Float32: return "float";
    case DType::Float64: return "double";
    case DType::Int8: return "int8_t";
    case DType::UInt8: return "uint8_t";
    case DType::Int16: return "int16_t";
    case DType::UInt16: return "uint16_t";
    case DType::Int32: return "int32_t";
    case DType::UInt32: return "uint32_t";
    case DType::Int64: return "int64_t";
    case DType::UInt64: return "uint64_t";
    case DType::Bool: return "bool";
    case DType::Float16: case DType::BFloat16: return "uint16_t";  // storage bits
    default: fail(ErrorCode::NotImplemented, "render_c: dtype ", dtype_name(t));
  }
}

// The unsigned type signed integer arithmetic wraps in (C leaves signed overflow undefined; the
// interpreter wraps).
const char* wrap_type(DType t) {
  switch (t) {
    case DType::Int8: case DType::Int16: case DType::Int32: return "uint32_t";
    case DType::Int64: return "uint64_t";
    default: return nullptr;
  }
}

std::string float_literal(double v, DType t) {
  const char* f = t == DType::Float32 ? "f" : "";
  if (std::isnan(v)) return std::string("(0.0") + f + " / 0.0" + f + ")";
  if (std::isinf(v)) return std::string(v < 0 ? "(-1.0" : "(1.0") + f + " / 0.0" + f + ")";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", v);  // hex: exact
  return std::string(buf) + f;
}

std::string int_literal(int64_t v, DType t) {
  if (t == DType::Bool) return v ? "true" : "false";
  std::string lit = v == std::numeric_limits<int64_t>::min() ? "(-9223372036854775807LL - 1)"
                                                             : std::to_string(v) + "LL";
  return std::string("((") + c_type(t) + ")" + lit + ")";
}

std::string lower_name(const char* s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
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

// True when `s` reads variable `name` other than in the index of a vector access (a lane whose
// every access is a vector's needs no index of its own: NVRTC would warn of an unused variable).
bool reads_var(const Stmt& s, const std::string& name, const std::set<const IRNode*>& vector_accesses) {
  struct Finder : IRVisitor {
    const std::string& name;
    const std::set<const IRNode*>& skip;
    bool found = false;
    Finder(const std::string& n, const std::set<const IRNode*>& v) : name(n), skip(v) {}
    void visit_node(const Var* op) override { found = found || op->name == name; }
    void visit_node(const Load* op) override {
      if (!skip.count(op)) IRVisitor::visit_node(op);
    }
    void visit_node(const Store* op) override {
      if (!skip.count(op)) visit(op->index);
      visit(op->value);
    }
  } f(name, vector_accesses);
  f.visit(s);
  return f.found;
}

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
    if (const Expr* offset = cached_offset(op)) {
      expr_ = row_element(op->buffer.name, *offset);
      return;
    }
    if (in_register_loop_ && row_vector() > 1 && schedule_->vector_loads.count(op)) {
      // Its index is the loop's element: vector tr_lane + (tr_k / 4) * block, lane tr_k % 4,
      // written so that the four unrolled reads of one vector are visibly one load (an index
      // computed from the element was not merged: four loads each, a 4,096-column layernorm 16%
      // slower on the H100).
      expr_ = "tr_ld4(" + op->buffer.name + ", tr_lane + (tr_k / " + std::to_string(row_vector()) + ") * " +
              std::to_string(schedule_->block) + ", tr_k % " + std::to_string(row_vector()) + ")";
      return;
    }
    if (op->buffer.slot == kLocalSlot && slot_register_.count(op->buffer.name)) {
      expr_ = slot_name(op->buffer.name);  // the schedule proved the index is the thread's slot
      return;
    }
    expr_ = op->buffer.name + "[" + print(op->index) + "]";
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
    if (schedule_ && op == schedule_->parallel && schedule_->mapping == CudaMapping::PerElement) {
      emit_per_element(op);
      return;
    }
    if (schedule_ && (schedule_->mapping == CudaMapping::PerRowWarp || schedule_->mapping == CudaMapping::PerRowBlock)) {
      emit_row_warp_loop(op);
      return;
    }
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
    if (const Expr* offset = cached_offset(op)) {
      // A row kept in shared memory: the value goes there, and to memory unless a later loop
      // writes the whole row again.
      const std::string row = row_element(op->buffer.name, *offset);
      const bool dead = schedule_->dead_stores.count(op) > 0;
      const std::string value = print(op->value);
      const std::string to_memory = op->buffer.name + "[" + print(op->index) + "] = " + row + ";";
      if (in_row_ && row_loop_depth_ == 0) {
        line() << "if (tr_lane == 0) { " << row << " = " << value << "; " << to_memory << " }\n";
        line() << sync() << "\n";
      } else {
        line() << row << " = " << value << ";\n";
        if (!dead && in_register_loop_ && row_vector() > 1)
          written_rows_.insert(op->buffer.name);  // to memory after the loop, by vectors
        else if (!dead)
          line() << to_memory << "\n";
      }
      return;
    }
    if (in_row_ && row_loop_depth_ == 0 && op->buffer.slot != kLocalSlot) {
      // A row's store outside its loops: one lane makes it, the others see it after the sync.
      line() << "if (tr_lane == 0) " << op->buffer.name << "[" << print(op->index) << "] = " << print(op->value)
             << ";\n";
      line() << sync() << "\n";
      return;
    }
    line() << op->buffer.name << "[" << print(op->index) << "] = " << print(op->value) << ";\n";
  }
  // Let bodies stay in the enclosing C scope: verify() guarantees every name is bound once.
  void visit_node(const LetStmt* op) override {
    line() << "const " << c_type(op->value.type()) << " " << op->name << " = " << print(op->value)
           << ";\n";
    fill_after_lets(op->body);
    visit(op->body);
  }
  // A local array in the enclosing C scope (names are unique, as for LetStmt).
  void visit_node(const Allocate* op) override {
    line() << c_type(op->buffer.dtype) << " " << op->buffer.name << "[" << op->extent << "];\n";
    visit(op->body);
  }
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

  // The PerElement schedule: the Parallel loop (and in 2-D the Vectorized loop inside it) as one
  // grid-stride range [tr_lo, tr_hi) of elements. With vector_width W > 1 and every vector
  // buffer aligned to W elements at run time, each step takes W elements: vector loads, the
  // body once per lane (unrolled; the lanes live in registers), vector stores; the elements
  // before the first and after the last whole vector (1-D ranges only) run one by one.
  void emit_per_element(const For* op) {
    const CudaSchedule& s = *schedule_;
    const int w = s.vector_width;
    const std::string n = std::to_string(s.inner_extent), W = std::to_string(w);
    const std::string b = print(op->begin), e = print(op->end);
    line() << "{\n";
    ++indent_;
    line() << "const int64_t tr_tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;\n";
    line() << "const int64_t tr_nth = (int64_t)gridDim.x * blockDim.x;\n";
    if (s.inner)
      line() << "const int64_t tr_lo = (" << b << ") * " << n << ", tr_hi = (" << e << ") * " << n << ";\n";
    else
      line() << "const int64_t tr_lo = " << b << ", tr_hi = " << e << ";\n";
    if (w > 1) {
      std::vector<const IRNode*> order = vector_accesses_in_order(s);
      std::string aligned;
      std::set<std::string> seen;
      for (const IRNode* a : order) {
        const Buffer& buf = buffer_of(a);
        if (!seen.insert(buf.name).second) continue;
        aligned += std::string(aligned.empty() ? "" : " && ") + "((unsigned long long)" + buf.name + " & " +
                   std::to_string(size_t(w) * dtype_size(buf.dtype) - 1) + ") == 0";
      }
      line() << "if (" << aligned << ") {\n";
      ++indent_;
      line() << "const int64_t tr_a0 = (tr_lo + " << w - 1 << ") / " << W << " * " << W
             << ", tr_a = tr_a0 < tr_hi ? tr_a0 : tr_hi;\n";
      line() << "const int64_t tr_b0 = tr_hi / " << W << " * " << W << ", tr_b = tr_b0 > tr_a ? tr_b0 : tr_a;\n";
      line() << "for (int64_t tr_v = tr_a / " << W << " + tr_tid; tr_v < tr_b / " << W << "; tr_v += tr_nth) {\n";
      ++indent_;
      line() << "const int64_t tr_t = tr_v * " << W << ";\n";
      const std::string lane = s.inner ? s.inner->var : op->var;
      element_prologue(op, "tr_i0");
      for (size_t k = 0; k < order.size(); ++k) vector_name_[order[k]] = "tr_vec" + std::to_string(k);
      renamed_[lane] = "tr_i0";
      for (const IRNode* a : order) {
        const Buffer& buf = buffer_of(a);
        const std::string type = std::string("tr_vec<") + c_type(buf.dtype) + ", " + W + ">";
        if (const Load* ld = dynamic_cast<const Load*>(a))
          line() << "const " << type << " " << vector_name_[a] << " = *(const " << type << "*)(" << buf.name
                 << " + " << print(ld->index) << ");\n";
        else
          line() << type << " " << vector_name_[a] << ";\n";
      }
      renamed_.erase(lane);
      line() << "#pragma unroll\n";
      line() << "for (int tr_k = 0; tr_k < " << W << "; ++tr_k) {\n";
      ++indent_;
      const Stmt& lane_body = s.inner ? s.inner->body : op->body;
      if (reads_var(lane_body, lane, s.vector_accesses)) line() << "const int64_t " << lane << " = tr_i0 + tr_k;\n";
      in_lanes_ = true;
      visit(lane_body);
      in_lanes_ = false;
      --indent_;
      line() << "}\n";
      renamed_[lane] = "tr_i0";
      for (const IRNode* a : order)
        if (const Store* st = dynamic_cast<const Store*>(a)) {
          const std::string type = std::string("tr_vec<") + c_type(st->buffer.dtype) + ", " + W + ">";
          line() << "*(" << type << "*)(" << st->buffer.name << " + " << print(st->index) << ") = " << vector_name_[a]
                 << ";\n";
        }
      renamed_.erase(lane);
      vector_name_.clear();
      --indent_;
      line() << "}\n";
      line() << "for (int64_t tr_j = tr_tid; tr_j < (tr_a - tr_lo) + (tr_hi - tr_b); tr_j += tr_nth) {\n";
      ++indent_;
      line() << "const int64_t tr_t = tr_j < tr_a - tr_lo ? tr_lo + tr_j : tr_b + (tr_j - (tr_a - tr_lo));\n";
      scalar_element(op);
      --indent_;
      line() << "}\n";
      --indent_;
      line() << "} else {\n";
      ++indent_;
    }
    line() << "for (int64_t tr_t = tr_lo + tr_tid; tr_t < tr_hi; tr_t += tr_nth) {\n";
    ++indent_;
    scalar_element(op);
    --indent_;
    line() << "}\n";
    if (w > 1) {
      --indent_;
      line() << "}\n";
    }
    --indent_;
    line() << "}\n";
  }

  // The PerRowWarp schedule: the Parallel loop over warps (one row per warp, grid-stride), the
  // lane loops strided by 32 with element r always on lane r % 32, each fold combined by a
  // butterfly of shuffles and lane 0's result broadcast (every lane then holds the same value,
  // NaN included); a __syncwarp after each lane loop orders the lanes' stores before the next
  // reads. The other loops run in every lane.
  void emit_row_warp_loop(const For* op) {
    const CudaSchedule& s = *schedule_;
    const std::string v = op->var, b = print(op->begin), e = print(op->end);
    const bool block = s.mapping == CudaMapping::PerRowBlock;
    if (op == s.parallel) {
      line() << "{\n";
      ++indent_;
      if (block) {
        for (const CudaSchedule::RowCache& c : s.row_caches)
          if (!s.rows_in_registers)
            line() << "__shared__ " << c_type(c.buffer.dtype) << " tr_row_" << c.buffer.name << "["
                 << c.length + c.length / 32 << "];\n";
        int k = 0;
        for (const auto& [loop, folds] : s.folds)
          for (const CudaSchedule::Fold& f : folds) {
            part_name_[&f] = "tr_part" + std::to_string(k++);
            line() << "__shared__ " << c_type(f.accumulator.dtype) << " " << part_name_[&f] << "["
                   << (f.whole ? 1 : std::max<int64_t>(1, f.slots)) * (s.block / 32) << "];\n";
          }
        line() << "const int tr_lane = threadIdx.x;\n";
        line() << "for (int64_t " << v << " = " << b << " + blockIdx.x; " << v << " < " << e << "; " << v
               << " += gridDim.x) {\n";
        fill_pending_ = !s.row_caches.empty();
        ++indent_;
        fill_after_lets(op->body);
        --indent_;
      } else {
        line() << "const int tr_lane = threadIdx.x & 31;\n";
        line() << "const int64_t tr_warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;\n";
        line() << "const int64_t tr_nwarps = ((int64_t)gridDim.x * blockDim.x) >> 5;\n";
        line() << "for (int64_t " << v << " = " << b << " + tr_warp; " << v << " < " << e << "; " << v
               << " += tr_nwarps) {\n";
      }
      in_row_ = true;
      nested(op->body);
      in_row_ = false;
      // The next row's copies into shared memory wait for this row's reads.
      if (block) line() << "  __syncthreads();\n";
      line() << "}\n";
      --indent_;
      line() << "}\n";
      return;
    }
    // In a block's row, a loop over a constant range counts in 32 bits.
    const IntImm* cb = op->begin.as<IntImm>();
    const IntImm* ce = op->end.as<IntImm>();
    const bool narrow = block && in_row_ && cb && ce && cb->value >= 0 && ce->value < (int64_t(1) << 30);
    const std::string counter = narrow ? "int " : "int64_t ";
    if (!in_row_ || !s.lane_loops.count(op)) {
      // A short loop over a local array (the CPU's 16 vector slots) unrolled, so that the array is
      // indexed by constants and stays in registers instead of the stack.
      if (narrow && ce->value - cb->value <= 32) line() << "#pragma unroll\n";
      if (narrow)
        line() << "for (int " << v << " = " << cb->value << "; " << v << " < " << ce->value << "; ++" << v << ") {\n";
      else
        line() << loop_header(op) << " {\n";
      ++row_loop_depth_;
      nested(op->body);
      --row_loop_depth_;
      line() << "}\n";
      return;
    }
    const std::vector<CudaSchedule::Fold>& folds = s.folds.at(op);
    auto over_slots = [&](const CudaSchedule::Fold& f) {  // a fold into every slot of its array
      if (f.slots == 0) return false;
      line() << "for (int64_t tr_s = 0; tr_s < " << f.slots << "; ++tr_s) {\n";
      ++indent_;
      return true;
    };
    auto end_slots = [&](bool open) {
      if (!open) return;
      --indent_;
      line() << "}\n";
    };
    // A flattened nest in registers: each thread folds into slots of its own, in registers.
    auto reg = s.register_loops.find(op);
    const For* slot_loop = block && s.rows_in_registers && reg != s.register_loops.end() ? reg->second : nullptr;
    const std::string slot_w = slot_loop ? std::to_string(slot_loop->end.as<IntImm>()->value) : std::string();
    // Thread t's elements fold into the V slots (V t + j) % W (V: row_vector, 1 element by
    // element), one register each (tr_slot_<acc>[j]), starting from the slot's value on the first
    // thread to hold it, else from the identity.
    const int64_t vec = slot_loop ? row_vector() : 1;
    for (const CudaSchedule::Fold& f : folds) {
      if (!slot_loop) continue;
      const std::string mine = "tr_slot_" + f.accumulator.name;
      line() << c_type(f.accumulator.dtype) << " " << mine << "[" << vec << "];\n";
      slot_register_.insert(f.accumulator.name);
      if (f.whole) {
        // Every register starts from all the slots' values (combined: indexed by constants, the
        // array stays in registers; taken by every thread, which an idempotent combine allows).
        const std::string type = c_type(f.accumulator.dtype);
        line() << mine << "[0] = " << f.accumulator.name << "[0];\n";
        line() << "#pragma unroll\n";
        line() << "for (int tr_s = 1; tr_s < " << slot_w << "; ++tr_s) {\n";
        line() << "  const " << type << " tr_mine = " << mine << "[0];\n";
        line() << "  const " << type << " tr_other = " << f.accumulator.name << "[tr_s];\n";
        line() << "  " << mine << "[0] = " << print(slot_combined(f)) << ";\n";
        line() << "}\n";
        line() << "#pragma unroll\n";
        line() << "for (int tr_j = 1; tr_j < " << vec << "; ++tr_j) " << mine << "[tr_j] = " << mine << "[0];\n";
        continue;
      }
      line() << "#pragma unroll\n";
      line() << "for (int tr_j = 0; tr_j < " << vec << "; ++tr_j) {\n";
      ++indent_;
      line() << mine << "[tr_j] = " << f.accumulator.name << "[(tr_lane * " << vec << " + tr_j) % " << slot_w << "];\n";
      if (f.identity.defined())
        line() << "if (tr_lane * " << vec << " + tr_j >= " << slot_w << ") " << mine << "[tr_j] = " << print(f.identity)
               << ";\n";
      --indent_;
      line() << "}\n";
    }
    for (const CudaSchedule::Fold& f : folds)
      if (f.identity.defined() && !slot_loop) {
        const bool open = over_slots(f);
        line() << "if (tr_lane != 0) " << f.accumulator.name << "[" << print(f.index) << "] = " << print(f.identity)
               << ";\n";
        end_slots(open);
      }
    if (block && s.rows_in_registers && reg != s.register_loops.end()) {
      emit_register_loop(op, reg->second);
    } else {
      // Unrolled so that a lane has several independent loads in flight on a long row (its fold's
      // order is unchanged: the same elements in the same sequence).
      const std::string n = std::to_string(block ? s.block : 32);
      line() << "#pragma unroll 4\n";
      line() << "for (" << counter << v << " = " << b << " + (int64_t)((tr_lane - (int)((" << b << ") % " << n
             << ") + " << n << ") % " << n << "); " << v << " < " << e << "; " << v << " += " << n << ") {\n";
      ++row_loop_depth_;
      nested(op->body);
      --row_loop_depth_;
      line() << "}\n";
    }
    slot_register_.clear();
    for (const CudaSchedule::Fold& f : folds) {
      const std::string type = c_type(f.accumulator.dtype);
      if (slot_loop) {
        // Lanes t and t' hold the same slots where t = t' modulo W / V: they combine by shuffles,
        // and lane t < W / V of each warp leaves the warp's values of slots V t + j (V = 1: slot
        // t % W on thread t).
        const std::string mine = "tr_slot_" + f.accumulator.name, lanes = std::to_string(std::stoll(slot_w) / vec);
        if (f.whole) {
          // One value for every slot: the thread's V registers, then the warp's 32 lanes by
          // shuffles; each warp's lane 0 leaves it.
          line() << "#pragma unroll\n";
          line() << "for (int tr_j = 1; tr_j < " << vec << "; ++tr_j) {\n";
          line() << "  const " << type << " tr_mine = " << mine << "[0];\n";
          line() << "  const " << type << " tr_other = " << mine << "[tr_j];\n";
          line() << "  " << mine << "[0] = " << print(slot_combined(f)) << ";\n";
          line() << "}\n";
          line() << "for (int tr_o = 16; tr_o > 0; tr_o >>= 1) {\n";
          line() << "  const " << type << " tr_mine = " << mine << "[0];\n";
          line() << "  const " << type << " tr_other = __shfl_xor_sync(0xffffffffu, tr_mine, tr_o);\n";
          line() << "  " << mine << "[0] = " << print(slot_combined(f)) << ";\n";
          line() << "}\n";
          line() << "if ((tr_lane & 31) == 0) " << part_name_.at(&f) << "[tr_lane >> 5] = " << mine << "[0];\n";
          continue;
        }
        line() << "#pragma unroll\n";
        line() << "for (int tr_j = 0; tr_j < " << vec << "; ++tr_j) {\n";
        ++indent_;
        line() << "for (int tr_o = 16; tr_o >= " << lanes << "; tr_o >>= 1) {\n";
        ++indent_;
        line() << "const " << type << " tr_mine = " << mine << "[tr_j];\n";
        line() << "const " << type << " tr_other = __shfl_xor_sync(0xffffffffu, tr_mine, tr_o);\n";
        line() << mine << "[tr_j] = " << print(slot_combined(f)) << ";\n";
        --indent_;
        line() << "}\n";
        line() << "if ((tr_lane & 31) < " << lanes << ") " << part_name_.at(&f) << "[((tr_lane % " << lanes << ") * "
               << vec << " + tr_j) * " << s.block / 32 << " + (tr_lane >> 5)] = " << mine << "[tr_j];\n";
        --indent_;
        line() << "}\n";
        continue;
      }
      const bool open = over_slots(f);
      const std::string acc = f.accumulator.name + "[" + print(f.index) + "]";
      line() << "for (int tr_o = 16; tr_o > 0; tr_o >>= 1) {\n";
      ++indent_;
      line() << "const " << type << " tr_other = __shfl_xor_sync(0xffffffffu, " << acc << ", tr_o);\n";
      line() << acc << " = " << print(f.combined) << ";\n";
      --indent_;
      line() << "}\n";
      if (!block) {
        line() << acc << " = __shfl_sync(0xffffffffu, " << acc << ", 0);\n";
      } else {
        // Each warp's lane 0 leaves its value; every thread then combines them in warp order (all
        // alike, so every thread holds the same value, NaN included).
        const std::string warps = std::to_string(s.block / 32);
        const std::string part = part_name_.at(&f) + "[" + (f.slots ? "tr_s * " + warps + " + " : std::string());
        line() << "if ((tr_lane & 31) == 0) " << part << "(tr_lane >> 5)] = " << acc << ";\n";
      }
      end_slots(open);
    }
    if (block && !folds.empty()) {
      line() << "__syncthreads();\n";
      const std::string warps = std::to_string(s.block / 32);
      for (const CudaSchedule::Fold& f : folds) {
        const std::string acc = f.accumulator.name + "[" + print(f.index) + "]";
        const std::string type = c_type(f.accumulator.dtype);
        if (f.whole) {
          // Every thread combines the warps' values in warp order, then holds the result in every slot.
          const std::string part = part_name_.at(&f);
          line() << "{\n";
          ++indent_;
          line() << type << " tr_mine = " << part << "[0];\n";
          line() << "for (int tr_w = 1; tr_w < " << warps << "; ++tr_w) {\n";
          line() << "  const " << type << " tr_other = " << part << "[tr_w];\n";
          line() << "  tr_mine = " << print(slot_combined(f)) << ";\n";
          line() << "}\n";
          line() << "#pragma unroll\n";
          line() << "for (int tr_s = 0; tr_s < " << f.slots << "; ++tr_s) " << f.accumulator.name << "[tr_s] = tr_mine;\n";
          --indent_;
          line() << "}\n";
          continue;
        }
        if (!f.slots) {
          const std::string part = part_name_.at(&f) + "[";
          line() << acc << " = " << part << "0];\n";
          line() << "for (int tr_w = 1; tr_w < " << warps << "; ++tr_w) {\n";
          ++indent_;
          line() << "const " << type << " tr_other = " << part << "tr_w];\n";
          line() << acc << " = " << print(f.combined) << ";\n";
          --indent_;
          line() << "}\n";
          continue;
        }
        // An array of slots: thread s combines slot s's warps' values in warp order and leaves
        // the result first in its row of the parts; every thread then reads the slots back.
        const std::string part = part_name_.at(&f);
        line() << "if (tr_lane < " << f.slots << ") {\n";
        ++indent_;
        line() << type << " tr_mine = " << part << "[tr_lane * " << warps << "];\n";
        line() << "for (int tr_w = 1; tr_w < " << warps << "; ++tr_w) {\n";
        ++indent_;
        line() << "const " << type << " tr_other = " << part << "[tr_lane * " << warps << " + tr_w];\n";
        line() << "tr_mine = " << print(slot_combined(f)) << ";\n";
        --indent_;
        line() << "}\n";
        line() << part << "[tr_lane * " << warps << "] = tr_mine;\n";
        --indent_;
        line() << "}\n";
      }
      bool any_slots = false;
      for (const CudaSchedule::Fold& f : folds) any_slots = any_slots || (f.slots && !f.whole);
      if (any_slots) line() << "__syncthreads();\n";
      for (const CudaSchedule::Fold& f : folds) {
        if (!f.slots || f.whole) continue;
        const bool open = over_slots(f);
        line() << f.accumulator.name << "[" << print(f.index) << "] = " << part_name_.at(&f) << "[tr_s * " << warps
               << "];\n";
        end_slots(open);
      }
    }
    line() << sync() << "\n";
  }

  // PerRowBlock in registers: a lane loop from 0 (or a nest [0, J) x [0, W), flattened) over its n
  // elements, element r on thread r % block as its register r / block: fully unrolled, so that
  // the rows' arrays are indexed by constants and stay in registers.
  void emit_register_loop(const For* op, const For* inner) {
    const int64_t block = schedule_->block, vec = row_vector();
    const int64_t w = inner ? inner->end.as<IntImm>()->value : 1;
    const int64_t n = op->end.as<IntImm>()->value * w;
    const std::string r = inner ? "tr_r" : op->var;
    line() << "#pragma unroll\n";
    line() << "for (int tr_k = 0; tr_k < " << (n + vec * block - 1) / (vec * block) * vec << "; ++tr_k) {\n";
    ++indent_;
    const bool partial = n % (vec * block) != 0;
    if (vec > 1) {
      line() << "const int " << r << " = (tr_lane + (tr_k / " << vec << ") * " << block << ") * " << vec << " + tr_k % "
             << vec << ";\n";
    } else {
      line() << "const int " << r << " = tr_lane + tr_k * " << block << ";\n";
    }
    if (partial) {
      line() << "if (" << r << " < " << n << ") {\n";
      ++indent_;
    }
    if (inner) {
      line() << "const int " << op->var << " = tr_r / " << w << ";\n";
      line() << "const int " << inner->var << " = tr_r % " << w << ";\n";
    }
    ++row_loop_depth_;
    in_register_loop_ = true;
    visit(inner ? inner->body : op->body);
    in_register_loop_ = false;
    --row_loop_depth_;
    if (partial) {
      --indent_;
      line() << "}\n";
    }
    --indent_;
    line() << "}\n";
    // By vectors: the rows the loop wrote, from their registers to memory.
    for (const CudaSchedule::RowCache& c : schedule_->row_caches)
      if (written_rows_.count(c.buffer.name)) move_row(c, false, std::min(n, c.length));
    written_rows_.clear();
  }

  // By vectors (row_vector 4, the row 16-byte aligned): a cached row between memory and its
  // registers by streaming 16-byte loads or stores; vector q on thread q % block, registers
  // 4 (q / block) ... 4 (q / block) + 3. A store moves the loop's elements [0, count) only.
  void move_row(const CudaSchedule::RowCache& c, bool load, int64_t count = -1) {
    const int64_t block = schedule_->block, vec = row_vector(), vectors = (count < 0 ? c.length : count) / vec;
    const std::string reg = "tr_reg_" + c.buffer.name, ptr = "(" + c.buffer.name + " + " + c.base + ")";
    line() << "#pragma unroll\n";
    line() << "for (int tr_k = 0; tr_k < " << (vectors + block - 1) / block << "; ++tr_k) {\n";
    ++indent_;
    line() << "const int tr_q = tr_lane + tr_k * " << block << ";\n";
    line() << (vectors % block ? "if (tr_q < " + std::to_string(vectors) + ") " : std::string()) << "{\n";
    ++indent_;
    if (load) {
      line() << "const float4 tr_v = __ldcs((const float4*)" << ptr << " + tr_q);\n";
      line() << reg << "[tr_k * 4] = tr_v.x; " << reg << "[tr_k * 4 + 1] = tr_v.y; " << reg << "[tr_k * 4 + 2] = tr_v.z; "
             << reg << "[tr_k * 4 + 3] = tr_v.w;\n";
    } else {
      line() << "__stcs((float4*)" << ptr << " + tr_q, make_float4(" << reg << "[tr_k * 4], " << reg << "[tr_k * 4 + 1], "
             << reg << "[tr_k * 4 + 2], " << reg << "[tr_k * 4 + 3]));\n";
    }
    --indent_;
    line() << "}\n";
    --indent_;
    line() << "}\n";
  }
  std::string slot_name(const std::string& accumulator) const {
    return "tr_slot_" + accumulator + "[tr_k % " + std::to_string(row_vector()) + "]";
  }
  int64_t row_vector() const { return schedule_ ? schedule_->row_vector : 1; }

  // A slot fold's combine with its accumulator's element read from the variable tr_mine (the
  // thread that combines a slot holds it in a register, not in the array).
  static Expr slot_combined(const CudaSchedule::Fold& f) {
    struct Mine : IRMutator {
      const CudaSchedule::Fold& f;
      explicit Mine(const CudaSchedule::Fold& fold) : f(fold) {}
      Expr visit(const Load* op, const Expr& self) override {
        if (op->buffer.slot == kLocalSlot && op->buffer.name == f.accumulator.name) return Var::make(f.accumulator.dtype, "tr_mine");
        return IRMutator::visit(op, self);
      }
    } mine(f);
    return mine.mutate(f.combined);
  }

  // PerRowBlock: the element at `offset` of a buffer's row in shared memory (one element of
  // padding every 32, so that a stride of 16 or 32 elements does not hit one bank).
  std::string row_element(const std::string& buffer, const Expr& offset) {
    if (schedule_->rows_in_registers) {
      // The schedule put every access of a row in a register loop, at the element it visits.
      TERRACE_CHECK(in_register_loop_, Internal, "render_c: an access of ", buffer,
                    "'s row in registers outside a register loop");
      return "tr_reg_" + buffer + "[tr_k]";
    }
    // Offsets are below the row's length: 32-bit arithmetic (64-bit is several instructions each).
    return "tr_row_" + buffer + "[" + padded("(int)(" + print(offset) + ")") + "]";
  }
  static std::string padded(const std::string& x) { return x + " + (" + x + " >> 5)"; }
  // The row's inputs are copied in once its leading lets (the row's base among them) are bound:
  // before `next`, the statement after a let, unless that is another let.
  void fill_after_lets(const Stmt& next) {
    if (!fill_pending_ || next.as<LetStmt>()) return;
    fill_pending_ = false;
    fill_row_caches();
  }
  const Expr* cached_offset(const IRNode* access) const {
    if (!schedule_) return nullptr;
    auto it = schedule_->cached_accesses.find(access);
    return it == schedule_->cached_accesses.end() ? nullptr : &it->second;
  }
  // The inputs' rows copied into shared memory, 16 bytes at a time where the row is aligned; or
  // into registers, every load made at once (the outputs' rows declared).
  void fill_row_caches() {
    const CudaSchedule& s = *schedule_;
    const std::string n = std::to_string(s.block);
    if (s.rows_in_registers && row_vector() > 1) {
      for (const CudaSchedule::RowCache& c : s.row_caches) {
        const int64_t per = row_vector() * s.block, k = (c.length + per - 1) / per * row_vector();
        line() << c_type(c.buffer.dtype) << " tr_reg_" << c.buffer.name << "[" << k << "];\n";
        if (c.fill) move_row(c, true);  // (schedule_cuda: lengths are multiples of row_vector)
      }
      return;
    }
    if (s.rows_in_registers) {
      for (const CudaSchedule::RowCache& c : s.row_caches) {
        const int64_t k = (c.length + s.block - 1) / s.block;
        line() << c_type(c.buffer.dtype) << " tr_reg_" << c.buffer.name << "[" << k << "];\n";
        if (!c.fill) continue;
        line() << "#pragma unroll\n";
        line() << "for (int tr_k = 0; tr_k < " << k << "; ++tr_k) {\n";
        ++indent_;
        line() << "const int tr_x = tr_lane + tr_k * " << n << ";\n";
        line() << (c.length % s.block ? "if (tr_x < " + std::to_string(c.length) + ") " : std::string()) << "tr_reg_"
               << c.buffer.name << "[tr_k] = (" << c.buffer.name << " + " << c.base << ")[tr_x];\n";
        --indent_;
        line() << "}\n";
      }
      return;
    }
    for (const CudaSchedule::RowCache& c : s.row_caches) {
      if (!c.fill) continue;
      const std::string src = c.buffer.name + " + " + c.base, dst = "tr_row_" + c.buffer.name;
      const int64_t w = int64_t(16 / dtype_size(c.buffer.dtype));
      const std::string len = std::to_string(c.length), type = c_type(c.buffer.dtype);
      if (w > 1 && c.length % w == 0) {
        const std::string vec = "tr_vec<" + type + ", " + std::to_string(w) + ">";
        line() << "if (((unsigned long long)(" << src << ") & 15) == 0) {\n";
        ++indent_;
        line() << "#pragma unroll 4\n";
        line() << "for (int tr_q = tr_lane; tr_q < " << c.length / w << "; tr_q += " << n << ") {\n";
        ++indent_;
        line() << "const " << vec << " tr_v = *(const " << vec << "*)(" << src << " + tr_q * " << w << ");\n";
        line() << "#pragma unroll\n";
        line() << "for (int tr_k = 0; tr_k < " << w << "; ++tr_k) { const int tr_x = tr_q * " << w
               << " + tr_k; " << dst << "[" << padded("tr_x") << "] = tr_v.v[tr_k]; }\n";
        --indent_;
        line() << "}\n";
        --indent_;
        line() << "} else {\n";
        ++indent_;
      }
      line() << "for (int tr_x = tr_lane; tr_x < " << len << "; tr_x += " << n << ") " << dst << "["
             << padded("tr_x") << "] = (" << src << ")[tr_x];\n";
      if (w > 1 && c.length % w == 0) {
        --indent_;
        line() << "}\n";
      }
    }
    line() << "__syncthreads();\n";
  }
  const char* sync() const {
    return schedule_ && schedule_->mapping == CudaMapping::PerRowBlock ? "__syncthreads();" : "__syncwarp();";
  }

  // Element tr_t of the flattened range: binds the loop variables (the innermost one as
  // `inner_name`) and, in 2-D, the Parallel loop's lets.
  void element_prologue(const For* op, const std::string& inner_name) {
    const CudaSchedule& s = *schedule_;
    if (!s.inner) {
      line() << "const int64_t " << inner_name << " = tr_t;\n";
      return;
    }
    const std::string n = std::to_string(s.inner_extent);
    line() << "const int64_t " << op->var << " = tr_t / " << n << ";\n";
    line() << "const int64_t " << inner_name << " = tr_t - " << op->var << " * " << n << ";\n";
    for (Stmt body = op->body; const LetStmt* let = body.as<LetStmt>(); body = let->body)
      line() << "const " << c_type(let->value.type()) << " " << let->name << " = " << print(let->value) << ";\n";
  }
  void scalar_element(const For* op) {
    const CudaSchedule& s = *schedule_;
    element_prologue(op, s.inner ? s.inner->var : op->var);
    visit(s.inner ? s.inner->body : op->body);
  }

  // The schedule's vector accesses in the order the body reaches them (the render is stable).
  static std::vector<const IRNode*> vector_accesses_in_order(const CudaSchedule& s) {
    struct Order : IRVisitor {
      const std::set<const IRNode*>& want;
      std::vector<const IRNode*> out;
      explicit Order(const std::set<const IRNode*>& w) : want(w) {}
      std::set<const IRNode*> seen;  // a load shared by several expressions is one access
      void visit_node(const Load* op) override {
        if (want.count(op) && seen.insert(op).second) out.push_back(op);
        IRVisitor::visit_node(op);
      }
      void visit_node(const Store* op) override {
        if (want.count(op) && seen.insert(op).second) out.push_back(op);
        IRVisitor::visit_node(op);
      }
    } order(s.vector_accesses);
    order.visit(s.inner ? s.inner->body : s.parallel->body);
    return order.out;
  }
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
      TERRACE_ASSERT(op->for_kind != ForKind::GpuBlock && op->for_kind != ForKind::GpuThread,
                     "GPU loop '", op->var, "' in a C++ kernel");
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
  std::string expr_;
  int indent_ = 1;
  std::map<std::string, std::string> renamed_;           // variables printed under another name
  std::map<const IRNode*, std::string> vector_name_;     // vector accesses: their register
  bool in_lanes_ = false;                                // rendering one lane of a vector step
  bool in_row_ = false;                                  // PerRowWarp: inside the row loop
  bool fill_pending_ = false;                            // PerRowBlock: the row's caches still to fill
  bool in_register_loop_ = false;                       // PerRowBlock: in emit_register_loop's body
  std::set<std::string> slot_register_;                 // PerRowBlock: slot arrays folded in tr_slot_<name>
  std::set<std::string> written_rows_;                  // PerRowBlock by vectors: rows to write after the loop
  std::map<const CudaSchedule::Fold*, std::string> part_name_;  // PerRowBlock: a fold's warps' values
  int row_loop_depth_ = 0;                               // PerRowWarp: loops open inside the row
};

}  // namespace

namespace {

// The kernel alone, without the prelude.
// `element_copy`: a kernel whose rows move by vectors (CudaSchedule::row_vector) rendered element
// by element instead, as cuda_element_copy_name(f.name) (same parameters, launch and results).
std::string render_kernel(const LoweredFunc& f, Dialect dialect, bool element_copy = false) {
  const DialectTraits& t = traits(dialect);
  StoredBuffers stored;
  stored.visit(f.body);
  std::ostringstream os;
  auto decl = [&](const Buffer& b) {
    bool is_const = stored.slots.count(b.slot) == 0;
    return std::string(is_const ? "const " : "") + c_type(b.dtype) + "* " + t.restrict_kw + " " + b.name;
  };
  std::optional<CudaSchedule> schedule;
  if (dialect == Dialect::Cuda) schedule = schedule_cuda(f);
  if (element_copy) schedule->row_vector = 1;
  os << t.kernel_qualifier << " ";
  if (schedule && schedule->mapping == CudaMapping::PerRowBlock)
    os << "__launch_bounds__(" << schedule->block << ", " << row_block_min_blocks(*schedule) << ") ";
  os << (element_copy ? cuda_element_copy_name(f.name) : f.name) << "(";
  if (t.buffers_as_array) {
    os << "void** buffers, int64_t begin, int64_t end) {\n";
    for (const Buffer& b : f.buffers)
      os << "  " << decl(b) << " = (" << (stored.slots.count(b.slot) ? "" : "const ")
         << c_type(b.dtype) << "*)buffers[" << b.slot << "];\n";
  } else {
    for (const Buffer& b : f.buffers) os << decl(b) << ", ";
    os << "int64_t begin, int64_t end) {\n";
  }
  if (schedule && schedule->mapping == CudaMapping::Single)  // any launch: one thread runs it
    os << "  if (blockIdx.x != 0 || threadIdx.x != 0) return;\n";
  CRenderer r(os, dialect, schedule ? &*schedule : nullptr);
  r.emit(f.body);
  os << "}\n";
  return os.str();
}

}  // namespace

std::string render_c(const LoweredFunc& f, Dialect dialect) {
  std::string kernel = render_kernel(f, dialect);
  return "// Generated by Terrace from kernel " + f.name + ".\n" + render_prelude(dialect, kernel) +
         "\n" + kernel;
}

std::string cuda_element_copy_name(const std::string& kernel) { return kernel + "_e"; }

std::vector<size_t> cuda_aligned_params(const LoweredFunc& f) {
  std::vector<size_t> params;
  const CudaSchedule s = schedule_cuda(f);
  if (s.row_vector == 1) return params;
  std::set<std::string> names;
  for (const CudaSchedule::RowCache& c : s.row_caches) names.insert(c.buffer.name);
  for (const IRNode* n : s.vector_loads) names.insert(static_cast<const Load*>(n)->buffer.name);
  for (size_t i = 0; i < f.buffers.size(); ++i)
    if (names.count(f.buffers[i].name)) params.push_back(i);
  return params;
}

std::string render_cuda_program(std::span<const LoweredFunc> funcs, std::string_view comment) {
  std::set<std::string> names;
  std::string kernels;
  for (const LoweredFunc& f : funcs) {
    TERRACE_CHECK(names.insert(f.name).second, InvalidArgument, "render_cuda_program: two kernels are named '",
                  f.name, "' (", comment, ")");
    kernels += render_kernel(f, Dialect::Cuda) + "\n";
    if (!cuda_aligned_params(f).empty()) kernels += render_kernel(f, Dialect::Cuda, true) + "\n";
  }
  return "// Generated by Terrace: " + std::string(comment) + " (" + std::to_string(funcs.size()) + " kernels).\n" +
         render_prelude(Dialect::Cuda, kernels) + "\n" + kernels;
}

}  // namespace terrace::kernels
