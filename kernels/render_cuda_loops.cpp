// CRenderer's CUDA loops and GPU nodes (kernels/render_c_internal.h): the GpuElements loops with
// their 16-byte vector accesses (emit_per_element), and the row loops, lane loops, fold nodes and
// barriers, each printed as the node says; kernels/gpu's passes write them into the IR.
#include <string>

#include "kernels/render_c_internal.h"

namespace terrace::kernels::render_detail {

CRenderer::ElementLoop CRenderer::element_loop(const For* outer) {
  ElementLoop l;
  l.outer = outer;
  Stmt body = outer->body;
  while (const LetStmt* let = body.as<LetStmt>()) body = let->body;
  if (const For* inner = body.as<For>(); inner && inner->for_kind == ForKind::GpuElements) {
    l.inner = inner;
    l.inner_extent = std::max<int64_t>(1, inner->end.as<IntImm>()->value);
  }
  struct Order : IRVisitor {
    ElementLoop& l;
    std::set<const IRNode*> seen;  // a load shared by several expressions is one access
    explicit Order(ElementLoop& loop) : l(loop) {}
    void add(const IRNode* access, int lanes) {
      if (lanes == 1 || !seen.insert(access).second) return;
      l.vector_accesses.push_back(access);
      l.width = lanes;
    }
    void visit_node(const Load* op) override {
      add(op, op->vector_lanes);
      IRVisitor::visit_node(op);
    }
    void visit_node(const Store* op) override {
      add(op, op->vector_lanes);
      IRVisitor::visit_node(op);
    }
  } order(l);
  order.visit(l.lane_body());
  return l;
}

void CRenderer::emit_per_element(const For* op) {
  elements_ = element_loop(op);
  const ElementLoop& s = elements_;
  const int w = s.width;
  const std::string n = std::to_string(s.inner_extent);
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
    emit_vector_steps(op);
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

// Where every vector buffer is aligned: the whole vectors of the range a step each, then the
// elements before the first and after the last one by one. Leaves the `if` open for the else.
void CRenderer::emit_vector_steps(const For* op) {
  const int w = elements_.width;
  const std::string W = std::to_string(w);
  const std::vector<const IRNode*>& order = elements_.vector_accesses;
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
  emit_vector_step(op, order);
  --indent_;
  line() << "}\n";
  line() << "for (int64_t tr_j = tr_tid; tr_j < (tr_a - tr_lo) + (tr_hi - tr_b); tr_j += tr_nth) {\n";
  ++indent_;
  line() << "const int64_t tr_t = tr_j < tr_a - tr_lo ? tr_lo + tr_j : tr_b + (tr_j - (tr_a - tr_lo));\n";
  scalar_element(op);
  --indent_;
  line() << "}\n";
  --indent_;
}

// One step of W elements from tr_t: the vector loads, the body once per lane (unrolled: the lanes
// live in registers), the vector stores.
void CRenderer::emit_vector_step(const For* op, const std::vector<const IRNode*>& order) {
  const ElementLoop& s = elements_;
  const std::string W = std::to_string(s.width);
  const std::string lane = s.inner ? s.inner->var : op->var;
  auto vec_type = [&](const Buffer& buf) { return std::string("tr_vec<") + c_type(buf.dtype) + ", " + W + ">"; };
  element_prologue(op, "tr_i0");
  for (size_t k = 0; k < order.size(); ++k) vector_name_[order[k]] = "tr_vec" + std::to_string(k);
  renamed_[lane] = "tr_i0";
  for (const IRNode* a : order) {
    const std::string type = vec_type(buffer_of(a));
    if (const Load* ld = dynamic_cast<const Load*>(a))
      line() << "const " << type << " " << vector_name_[a] << " = *(const " << type << "*)(" << ld->buffer.name
             << " + " << print(ld->index) << ");\n";
    else
      line() << type << " " << vector_name_[a] << ";\n";
  }
  renamed_.erase(lane);
  line() << "#pragma unroll\n";
  line() << "for (int tr_k = 0; tr_k < " << W << "; ++tr_k) {\n";
  ++indent_;
  const Stmt& lane_body = s.lane_body();
  if (reads_var(lane_body, lane)) line() << "const int64_t " << lane << " = tr_i0 + tr_k;\n";
  in_lanes_ = true;
  visit(lane_body);
  in_lanes_ = false;
  --indent_;
  line() << "}\n";
  renamed_[lane] = "tr_i0";
  for (const IRNode* a : order)
    if (const Store* st = dynamic_cast<const Store*>(a))
      line() << "*(" << vec_type(st->buffer) << "*)(" << st->buffer.name << " + " << print(st->index)
             << ") = " << vector_name_[a] << ";\n";
  renamed_.erase(lane);
  vector_name_.clear();
}

// GpuWarp: a warp per row, grid-stride over the grid's warps. GpuBlock: a block per row. The
// scope that holds the thread's lane is the one its shared arrays opened, if any.
void CRenderer::emit_row_loop(const For* op) {
  const std::string v = op->var, b = print(op->begin), e = print(op->end);
  const bool open = !in_shared_scope_;
  if (open) {
    line() << "{\n";
    ++indent_;
  }
  if (op->for_kind == ForKind::GpuBlock) {
    line() << "const int tr_lane = threadIdx.x;\n";
    line() << "for (int64_t " << v << " = " << b << " + blockIdx.x; " << v << " < " << e << "; " << v
           << " += gridDim.x) {\n";
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
  line() << "}\n";
  if (open) {
    --indent_;
    line() << "}\n";
  }
}

// GpuRegisters: a loop from 0 (or a nest [0, J) x [0, W), flattened) over its n
// elements, element r on thread r % block as its register r / block: fully unrolled, so that
// the rows' arrays are indexed by constants and stay in registers.
void CRenderer::emit_register_loop(const For* op, const For* inner) {
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
  in_register_loop_ = true;
  visit(inner ? inner->body : op->body);
  in_register_loop_ = false;
  slot_register_.clear();  // the FoldStarts before the loop set them for its body
  if (partial) {
    --indent_;
    line() << "}\n";
  }
  --indent_;
  line() << "}\n";
}

// GpuLane / GpuThread: element r on lane r % 32 / thread r % block, strided from the lane's first
// element; unrolled so that a lane has several independent loads in flight on a long row (its
// fold's order is unchanged: the same elements in the same sequence).
void CRenderer::emit_lane_loop(const For* op) {
  const std::string v = op->var, b = print(op->begin), e = print(op->end);
  const std::string n = std::to_string(op->for_kind == ForKind::GpuThread ? schedule_->block : 32);
  line() << "#pragma unroll 4\n";
  line() << "for (" << (narrow(op) ? "int " : "int64_t ") << v << " = " << b << " + (int64_t)((tr_lane - (int)(("
         << b << ") % " << n << ") + " << n << ") % " << n << "); " << v << " < " << e << "; " << v << " += " << n
         << ") {\n";
  nested(op->body);
  line() << "}\n";
}

// A loop of a row that every thread runs whole (unrolled where map_rows made it Unrolled).
void CRenderer::emit_row_serial_loop(const For* op) {
  const IntImm* cb = op->begin.as<IntImm>();
  const IntImm* ce = op->end.as<IntImm>();
  const std::string v = op->var;
  if (op->for_kind == ForKind::Unrolled) line() << "#pragma unroll\n";
  if (narrow(op))
    line() << "for (int " << v << " = " << cb->value << "; " << v << " < " << ce->value << "; ++" << v << ") {\n";
  else
    line() << loop_header(op) << " {\n";
  nested(op->body);
  line() << "}\n";
}

// In a block's row, a loop over a constant range counts in 32 bits.
bool CRenderer::narrow(const For* op) const {
  const IntImm* cb = op->begin.as<IntImm>();
  const IntImm* ce = op->end.as<IntImm>();
  return schedule_->mapping == CudaMapping::PerRowBlock && in_row_ && cb && ce && cb->value >= 0 &&
         ce->value < (int64_t(1) << 30);
}

void CRenderer::visit_node(const Barrier* op) {
  line() << (op->scope == BarrierScope::Block ? "__syncthreads();" : "__syncwarp();") << "\n";
}

// A fold over every slot of its array runs its statements in a loop over them.
bool CRenderer::open_slots(const GpuFold& f) {
  if (f.slots == 0) return false;
  line() << "for (int64_t tr_s = 0; tr_s < " << f.slots << "; ++tr_s) {\n";
  ++indent_;
  return true;
}
void CRenderer::close_slots(bool open) {
  if (!open) return;
  --indent_;
  line() << "}\n";
}

void CRenderer::visit_node(const FoldStart* op) {
  const GpuFold& f = op->fold;
  if (f.vector) return start_slot_registers(f);
  const bool open = open_slots(f);
  line() << "if (tr_lane != 0) " << f.accumulator.name << "[" << print(f.index) << "] = " << print(f.identity)
         << ";\n";
  close_slots(open);
}

// Thread t's elements fold into the V slots (V t + j) % W, one register each (tr_slot_<acc>[j]),
// starting from the slot's value on the first thread to hold it, else from the identity. A whole
// fold's registers all start from every slot's value combined (indexed by constants, the array
// stays in registers; taken by every thread, which an idempotent combine allows).
void CRenderer::start_slot_registers(const GpuFold& f) {
  const std::string mine = "tr_slot_" + f.accumulator.name, type = c_type(f.accumulator.dtype);
  const std::string vec = std::to_string(f.vector), slot_w = std::to_string(f.width);
  line() << type << " " << mine << "[" << vec << "];\n";
  slot_register_.insert(f.accumulator.name);
  if (f.whole) {
    line() << mine << "[0] = " << f.accumulator.name << "[0];\n";
    line() << "#pragma unroll\n";
    line() << "for (int tr_s = 1; tr_s < " << slot_w << "; ++tr_s) {\n";
    line() << "  const " << type << " tr_mine = " << mine << "[0];\n";
    line() << "  const " << type << " tr_other = " << f.accumulator.name << "[tr_s];\n";
    line() << "  " << mine << "[0] = " << print(f.combined_mine) << ";\n";
    line() << "}\n";
    line() << "#pragma unroll\n";
    line() << "for (int tr_j = 1; tr_j < " << vec << "; ++tr_j) " << mine << "[tr_j] = " << mine << "[0];\n";
    return;
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

// The butterfly over the warp's lanes; then a warp's row broadcasts lane 0's value, a block's row
// leaves each warp's value in the part (per slot, in the part's row of that slot).
void CRenderer::visit_node(const WarpReduce* op) {
  const GpuFold& f = op->fold;
  if (f.vector) return reduce_slot_registers(f);
  const std::string type = c_type(f.accumulator.dtype);
  const bool open = open_slots(f);
  const std::string acc = f.accumulator.name + "[" + print(f.index) + "]";
  line() << "for (int tr_o = 16; tr_o > 0; tr_o >>= 1) {\n";
  ++indent_;
  line() << "const " << type << " tr_other = __shfl_xor_sync(0xffffffffu, " << acc << ", tr_o);\n";
  line() << acc << " = " << print(f.combined) << ";\n";
  --indent_;
  line() << "}\n";
  if (f.part.name.empty()) {
    line() << acc << " = __shfl_sync(0xffffffffu, " << acc << ", 0);\n";
  } else {
    const std::string part =
        f.part.name + "[" + (f.slots ? "tr_s * " + std::to_string(f.warps) + " + " : std::string());
    line() << "if ((tr_lane & 31) == 0) " << part << "(tr_lane >> 5)] = " << acc << ";\n";
  }
  close_slots(open);
}

// Slot registers: lanes t and t' hold the same slots where t = t' modulo W / V, so they combine
// by shuffles, and lane t < W / V of each warp leaves the warp's values of slots V t + j. A whole
// fold first combines the thread's V registers, then the warp's 32 lanes; lane 0 leaves it.
void CRenderer::reduce_slot_registers(const GpuFold& f) {
  const std::string type = c_type(f.accumulator.dtype), mine = "tr_slot_" + f.accumulator.name;
  const std::string vec = std::to_string(f.vector), lanes = std::to_string(f.width / f.vector);
  const std::string combine = print(f.combined_mine);
  if (f.whole) {
    line() << "#pragma unroll\n";
    line() << "for (int tr_j = 1; tr_j < " << vec << "; ++tr_j) {\n";
    line() << "  const " << type << " tr_mine = " << mine << "[0];\n";
    line() << "  const " << type << " tr_other = " << mine << "[tr_j];\n";
    line() << "  " << mine << "[0] = " << combine << ";\n";
    line() << "}\n";
    line() << "for (int tr_o = 16; tr_o > 0; tr_o >>= 1) {\n";
    line() << "  const " << type << " tr_mine = " << mine << "[0];\n";
    line() << "  const " << type << " tr_other = __shfl_xor_sync(0xffffffffu, tr_mine, tr_o);\n";
    line() << "  " << mine << "[0] = " << combine << ";\n";
    line() << "}\n";
    line() << "if ((tr_lane & 31) == 0) " << f.part.name << "[tr_lane >> 5] = " << mine << "[0];\n";
    return;
  }
  line() << "#pragma unroll\n";
  line() << "for (int tr_j = 0; tr_j < " << vec << "; ++tr_j) {\n";
  ++indent_;
  line() << "for (int tr_o = 16; tr_o >= " << lanes << "; tr_o >>= 1) {\n";
  ++indent_;
  line() << "const " << type << " tr_mine = " << mine << "[tr_j];\n";
  line() << "const " << type << " tr_other = __shfl_xor_sync(0xffffffffu, tr_mine, tr_o);\n";
  line() << mine << "[tr_j] = " << combine << ";\n";
  --indent_;
  line() << "}\n";
  line() << "if ((tr_lane & 31) < " << lanes << ") " << f.part.name << "[((tr_lane % " << lanes << ") * " << vec
         << " + tr_j) * " << f.warps << " + (tr_lane >> 5)] = " << mine << "[tr_j];\n";
  --indent_;
  line() << "}\n";
}

// Every thread combines the warps' values in warp order (all alike, so every thread holds the same
// value, NaN included); a whole fold's result then goes to every slot. Over slots, thread s
// combines slot s and leaves it first in its row of the part, for the read back.
void CRenderer::visit_node(const BlockReduce* op) {
  const GpuFold& f = op->fold;
  const std::string type = c_type(f.accumulator.dtype), part = f.part.name, warps = std::to_string(f.warps);
  const std::string acc = f.accumulator.name + "[" + print(f.index) + "]";
  if (op->read_back) {
    const bool open = open_slots(f);
    line() << acc << " = " << part << "[tr_s * " << warps << "];\n";
    return close_slots(open);
  }
  if (!f.whole && !f.slots) {
    line() << acc << " = " << part << "[0];\n";
    line() << "for (int tr_w = 1; tr_w < " << warps << "; ++tr_w) {\n";
    ++indent_;
    line() << "const " << type << " tr_other = " << part << "[tr_w];\n";
    line() << acc << " = " << print(f.combined) << ";\n";
    --indent_;
    line() << "}\n";
    return;
  }
  const std::string first = f.whole ? "0" : "tr_lane * " + warps, at = f.whole ? "" : "tr_lane * " + warps + " + ";
  if (f.whole) {
    line() << "{\n";
  } else {
    line() << "if (tr_lane < " << f.slots << ") {\n";
  }
  ++indent_;
  line() << type << " tr_mine = " << part << "[" << first << "];\n";
  line() << "for (int tr_w = 1; tr_w < " << warps << "; ++tr_w) {\n";
  if (f.whole) {
    line() << "  const " << type << " tr_other = " << part << "[tr_w];\n";
    line() << "  tr_mine = " << print(f.combined_mine) << ";\n";
    line() << "}\n";
    line() << "#pragma unroll\n";
    line() << "for (int tr_s = 0; tr_s < " << f.slots << "; ++tr_s) " << f.accumulator.name << "[tr_s] = tr_mine;\n";
  } else {
    ++indent_;
    line() << "const " << type << " tr_other = " << part << "[" << at << "tr_w];\n";
    line() << "tr_mine = " << print(f.combined_mine) << ";\n";
    --indent_;
    line() << "}\n";
    line() << part << "[tr_lane * " << warps << "] = tr_mine;\n";
  }
  --indent_;
  line() << "}\n";
}

// One statement for the row: lane 0 makes it (a store, or a row's store to its copy and to memory).
void CRenderer::visit_node(const FirstThread* op) {
  const Block* stores = op->body.as<Block>();
  if (!stores) {
    first_thread_ = true;
    visit(op->body);
    first_thread_ = false;
    return;
  }
  line() << "if (tr_lane == 0) {";
  for (const Stmt& s : stores->stmts) {
    const Store* st = s.as<Store>();
    TERRACE_ASSERT(st, "render_c: a first thread's statements are stores");
    os_ << " " << element(st->buffer, st->index) << " = " << print(st->value) << ";";
  }
  os_ << " }\n";
}

void CRenderer::visit_node(const RowCopy* op) {
  if (!op->registers) return fill_shared_row(op);
  if (op->vector > 1) return move_row(op);
  // Element by element: element tr_lane + k * threads into register k.
  const int64_t k = (op->length + op->threads - 1) / op->threads;
  line() << "#pragma unroll\n";
  line() << "for (int tr_k = 0; tr_k < " << k << "; ++tr_k) {\n";
  ++indent_;
  line() << "const int tr_x = tr_lane + tr_k * " << op->threads << ";\n";
  line() << (op->length % op->threads ? "if (tr_x < " + std::to_string(op->length) + ") " : std::string())
         << op->row.name << "[tr_k] = (" << op->buffer.name << " + " << print(op->base) << ")[tr_x];\n";
  --indent_;
  line() << "}\n";
}

// By vectors (the row 16-byte aligned): streaming 16-byte loads or stores; vector q on thread
// q % threads, registers 4 (q / threads) ... 4 (q / threads) + 3.
void CRenderer::move_row(const RowCopy* op) {
  const int64_t block = op->threads, vectors = op->length / op->vector;
  const std::string reg = op->row.name, ptr = "(" + op->buffer.name + " + " + print(op->base) + ")";
  line() << "#pragma unroll\n";
  line() << "for (int tr_k = 0; tr_k < " << (vectors + block - 1) / block << "; ++tr_k) {\n";
  ++indent_;
  line() << "const int tr_q = tr_lane + tr_k * " << block << ";\n";
  line() << (vectors % block ? "if (tr_q < " + std::to_string(vectors) + ") " : std::string()) << "{\n";
  ++indent_;
  if (!op->to_memory) {
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

// Into shared memory: 16 bytes at a time where the row is aligned at run time, else (and for
// vector 1) element by element.
void CRenderer::fill_shared_row(const RowCopy* op) {
  const std::string src = op->buffer.name + " + " + print(op->base), dst = op->row.name;
  const std::string n = std::to_string(op->threads);
  const int64_t w = op->vector;
  if (w > 1) {
    const std::string vec = "tr_vec<" + std::string(c_type(op->buffer.dtype)) + ", " + std::to_string(w) + ">";
    line() << "if (((unsigned long long)(" << src << ") & 15) == 0) {\n";
    ++indent_;
    line() << "#pragma unroll 4\n";
    line() << "for (int tr_q = tr_lane; tr_q < " << op->length / w << "; tr_q += " << n << ") {\n";
    ++indent_;
    line() << "const " << vec << " tr_v = *(const " << vec << "*)(" << src << " + tr_q * " << w << ");\n";
    line() << "#pragma unroll\n";
    line() << "for (int tr_k = 0; tr_k < " << w << "; ++tr_k) { const int tr_x = tr_q * " << w << " + tr_k; " << dst
           << "[" << padded("tr_x") << "] = tr_v.v[tr_k]; }\n";
    --indent_;
    line() << "}\n";
    --indent_;
    line() << "} else {\n";
    ++indent_;
  }
  line() << "for (int tr_x = tr_lane; tr_x < " << op->length << "; tr_x += " << n << ") " << dst << "["
         << padded("tr_x") << "] = (" << src << ")[tr_x];\n";
  if (w > 1) {
    --indent_;
    line() << "}\n";
  }
}

}  // namespace terrace::kernels::render_detail
