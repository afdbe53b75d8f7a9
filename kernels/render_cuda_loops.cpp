// CRenderer's CUDA loops (kernels/render_c_internal.h): the Parallel loop per element, with 16-byte
// vector loads and stores (emit_per_element), and a warp or a block per row of a reduction
// (emit_row_warp_loop; a block's row in shared memory), as the kernel's schedule
// (kernels/schedule_cuda.h) maps them onto threads.
#include <string>

#include "kernels/render_c_internal.h"

namespace terrace::kernels::render_detail {

void CRenderer::emit_per_element(const For* op) {
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

void CRenderer::emit_row_warp_loop(const For* op) {
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

}  // namespace terrace::kernels::render_detail
