// cache_rows(): a block's rows in shared memory or registers as IR (kernels/gpu/cache_rows.h).
#include "kernels/gpu/cache_rows.h"

#include <algorithm>
#include <set>
#include <vector>

#include "kernels/mutator.h"

namespace terrace::kernels::gpu {
namespace {

class CacheRows : public IRMutator {
 public:
  explicit CacheRows(const CudaSchedule& s) : s_(s) {}

 protected:
  Stmt visit(const For* op, const Stmt& self) override {
    if (op->for_kind == ForKind::GpuBlock) {
      Stmt body = with_fill(mutate(op->body));
      return For::make(op->var, op->begin, op->end, op->for_kind, body);
    }
    if (op->for_kind != ForKind::GpuRegisters) return IRMutator::visit(op, self);
    in_registers_ = true;
    Stmt loop = IRMutator::visit(op, self);
    in_registers_ = false;
    // By vectors: the rows the loop wrote, from their registers to memory after it.
    const For* inner = op->body.as<For>();
    const int64_t n = op->end.as<IntImm>()->value * (inner ? inner->end.as<IntImm>()->value : 1);
    std::vector<Stmt> out{loop};
    for (const CudaSchedule::RowCache& c : s_.row_caches)
      if (written_.count(c.buffer.name))
        out.push_back(RowCopy::make(c.buffer, row_of(c.buffer), base_of(c), std::min(n, c.length), s_.block,
                                    s_.row_vector, true, true));
    written_.clear();
    return Block::make(std::move(out));
  }
  Expr visit(const Load* op, const Expr& self) override {
    if (auto it = s_.cached_accesses.find(op); it != s_.cached_accesses.end())
      return Load::make(row_of(op->buffer), at(it->second));
    // The four unrolled reads of one vector are one 16-byte load (render_c: tr_ld4).
    if (s_.row_vector > 1 && s_.vector_loads.count(op)) return Load::make(op->buffer, op->index, s_.row_vector);
    return IRMutator::visit(op, self);
  }
  // A row's store goes to its copy, and to memory unless a later loop writes the whole row again.
  Stmt visit(const Store* op, const Stmt& self) override {
    auto it = s_.cached_accesses.find(op);
    if (it == s_.cached_accesses.end()) return IRMutator::visit(op, self);
    const Buffer row = row_of(op->buffer);
    const Expr offset = at(it->second);
    Stmt to_row = Store::make(row, offset, mutate(op->value));
    Stmt to_memory = Store::make(op->buffer, mutate(op->index), Load::make(row, offset));
    if (in_first_thread_) return Block::make({to_row, to_memory});
    if (s_.dead_stores.count(op)) return to_row;
    if (in_registers_ && s_.row_vector > 1) {  // to memory after the loop, by vectors
      written_.insert(op->buffer.name);
      return to_row;
    }
    return Block::make({to_row, to_memory});
  }
  Stmt visit(const FirstThread* op, const Stmt& self) override {
    in_first_thread_ = true;
    Stmt s = IRMutator::visit(op, self);
    in_first_thread_ = false;
    return s;
  }

 private:
  Buffer row_of(const Buffer& b) const {
    return Buffer{(s_.rows_in_registers ? "tr_reg_" : "tr_row_") + b.name, b.dtype, kLocalSlot};
  }
  // The schedule put every access of a row in registers in a register loop, at the element it visits.
  Expr at(const Expr& offset) const { return s_.rows_in_registers ? Var::make(DType::Int64, "tr_k") : offset; }
  static Expr base_of(const CudaSchedule::RowCache& c) { return Var::make(DType::Int64, c.base); }

  // The row's copies filled once its leading lets (the row's base among them) are bound: in
  // registers, each thread's array declared and the inputs' loaded at once; in shared memory, the
  // inputs' copied, then a barrier before any thread reads them.
  Stmt with_fill(const Stmt& s) const {
    if (const LetStmt* let = s.as<LetStmt>()) return LetStmt::make(let->name, let->value, with_fill(let->body));
    if (!s_.rows_in_registers) {
      std::vector<Stmt> out;
      for (const CudaSchedule::RowCache& c : s_.row_caches) {
        const int64_t w = int64_t(16 / dtype_size(c.buffer.dtype));
        if (c.fill)
          out.push_back(RowCopy::make(c.buffer, row_of(c.buffer), base_of(c), c.length, s_.block,
                                      w > 1 && c.length % w == 0 ? w : 1, false, false));
      }
      out.push_back(Barrier::make(BarrierScope::Block));
      out.push_back(s);
      return Block::make(std::move(out));
    }
    Stmt rest = s;
    const int64_t per = int64_t(s_.row_vector) * s_.block;
    for (auto c = s_.row_caches.rbegin(); c != s_.row_caches.rend(); ++c) {
      if (c->fill)  // (schedule_cuda: by vectors, lengths are multiples of row_vector)
        rest = Block::make({RowCopy::make(c->buffer, row_of(c->buffer), base_of(*c), c->length, s_.block,
                                          s_.row_vector, true, false),
                            rest});
      rest = Allocate::make(row_of(c->buffer), (c->length + per - 1) / per * s_.row_vector, rest);
    }
    return rest;
  }

  const CudaSchedule& s_;
  bool in_registers_ = false, in_first_thread_ = false;
  std::set<std::string> written_;  // rows stored in the register loop being mapped
};

}  // namespace

Stmt cache_rows(const Stmt& body, const CudaSchedule& s) {
  if (s.mapping != CudaMapping::PerRowBlock || s.row_caches.empty()) return body;
  return CacheRows(s).mutate(body);
}

}  // namespace terrace::kernels::gpu
