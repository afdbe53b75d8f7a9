// map_rows(): a row-wise kernel's Parallel and lane loops given GPU kinds, its folds' combines as
// IR nodes after their loops, its shared arrays as Allocates (kernels/gpu/map_rows.h).
#include "kernels/gpu/map_rows.h"

#include <algorithm>
#include <string>
#include <vector>

#include "kernels/mutator.h"

namespace terrace::kernels::gpu {
namespace {

// `combined` with the accumulator's element read from the variable tr_mine (a thread that
// combines a slot in a register, not in the array).
Expr combined_mine(const CudaSchedule::Fold& f) {
  struct Mine : IRMutator {
    const Buffer& acc;
    explicit Mine(const Buffer& a) : acc(a) {}
    Expr visit(const Load* op, const Expr& self) override {
      if (op->buffer.slot == kLocalSlot && op->buffer.name == acc.name) return Var::make(acc.dtype, "tr_mine");
      return IRMutator::visit(op, self);
    }
  } mine(f.accumulator);
  return mine.mutate(f.combined);
}

int64_t part_extent(const CudaSchedule& s, const CudaSchedule::Fold& f) {
  return (f.whole ? 1 : std::max<int64_t>(1, f.slots)) * (s.block / 32);
}

class MapRows : public IRMutator {
 public:
  explicit MapRows(const CudaSchedule& s) : s_(s), block_(s.mapping == CudaMapping::PerRowBlock) {}

  // The row loop inside its shared arrays: the rows' copies first, then the parts. (Its
  // Unrolled loops: see visit(For).)
  Stmt row(const For* op) {
    in_row_ = true;
    Stmt body = mutate(op->body);
    in_row_ = false;
    if (block_) body = before_end(body, Barrier::make(BarrierScope::Block));  // the next row's copies wait
    Stmt loop = For::make(op->var, op->begin, op->end, block_ ? ForKind::GpuBlock : ForKind::GpuWarp, body);
    std::vector<std::pair<Buffer, int64_t>> shared;
    if (block_ && !s_.rows_in_registers)
      for (const CudaSchedule::RowCache& c : s_.row_caches)
        shared.push_back({Buffer{"tr_row_" + c.buffer.name, c.buffer.dtype, kLocalSlot}, c.length + c.length / 32});
    shared.insert(shared.end(), parts_.begin(), parts_.end());
    for (auto it = shared.rbegin(); it != shared.rend(); ++it)
      loop = Allocate::make(it->first, it->second, loop, MemoryScope::Shared);
    return loop;
  }

 protected:
  Stmt visit(const For* op, const Stmt& self) override {
    if (op == s_.parallel) return row(op);
    if (s_.lane_loops.count(op)) return lane_loop(op);
    ++depth_;
    Stmt s = IRMutator::visit(op, self);
    --depth_;
    // A block's short loop over a constant range (a local array's slots, a fold's 16 lanes)
    // unrolled, so that the array is indexed by constants and stays in registers, not the stack.
    const IntImm* b = op->begin.as<IntImm>();
    const IntImm* e = op->end.as<IntImm>();
    if (!block_ || !b || !e || b->value < 0 || e->value >= (int64_t(1) << 30) || e->value - b->value > 32) return s;
    const For* loop = s.as<For>();
    return For::make(loop->var, loop->begin, loop->end, ForKind::Unrolled, loop->body);
  }
  // A store of the row outside its loops: one thread makes it, the others see it after a barrier.
  Stmt visit(const Store* op, const Stmt& self) override {
    if (!in_row_ || depth_ > 0 || op->buffer.slot == kLocalSlot) return self;
    return Block::make({FirstThread::make(self), Barrier::make(block_ ? BarrierScope::Block : BarrierScope::Warp)});
  }

 private:
  // A lane loop: each fold started before it, combined after it.
  Stmt lane_loop(const For* op) {
    auto reg = s_.register_loops.find(op);
    const bool registers = block_ && s_.rows_in_registers && reg != s_.register_loops.end();
    const ForKind kind = !block_ ? ForKind::GpuLane : registers ? ForKind::GpuRegisters : ForKind::GpuThread;
    std::vector<GpuFold> folds;
    for (const CudaSchedule::Fold& f : s_.folds.at(op)) folds.push_back(fold(f, registers ? reg->second : nullptr));
    std::vector<Stmt> out;
    for (const GpuFold& f : folds)
      if (f.vector || f.identity.defined()) out.push_back(FoldStart::make(f));
    ++depth_;
    out.push_back(For::make(op->var, op->begin, op->end, kind, mutate(op->body)));
    --depth_;
    for (const GpuFold& f : folds) out.push_back(WarpReduce::make(f));
    if (block_ && !folds.empty()) {
      out.push_back(Barrier::make(BarrierScope::Block));
      bool slots = false;
      for (const GpuFold& f : folds) {
        out.push_back(BlockReduce::make(f, false));
        slots = slots || (f.slots && !f.whole);
      }
      if (slots) out.push_back(Barrier::make(BarrierScope::Block));
      for (const GpuFold& f : folds)
        if (f.slots && !f.whole) out.push_back(BlockReduce::make(f, true));
    }
    // The lanes' stores are seen by every lane before the row's next reads.
    out.push_back(Barrier::make(block_ ? BarrierScope::Block : BarrierScope::Warp));
    return Block::make(std::move(out));
  }

  // `f` as the IR's fold; `slot_loop`: the inner loop of a flattened nest in registers, whose
  // slots the thread folds in registers of its own.
  GpuFold fold(const CudaSchedule::Fold& f, const For* slot_loop) {
    GpuFold g;
    g.accumulator = f.accumulator;
    g.index = f.index;
    g.combined = f.combined;
    g.combined_mine = combined_mine(f);
    g.identity = f.identity;
    g.slots = f.slots;
    g.whole = f.whole;
    if (block_) {  // numbered in the order of the row's folds
      g.part = Buffer{"tr_part" + std::to_string(parts_.size()), f.accumulator.dtype, kLocalSlot};
      parts_.push_back({g.part, part_extent(s_, f)});
    }
    g.warps = std::max(1, s_.block / 32);
    if (slot_loop) {
      g.vector = s_.row_vector;
      g.width = slot_loop->end.as<IntImm>()->value;
    }
    return g;
  }

  // `s` with `last` run at its end, inside its leading lets (the renderer copies the row's inputs in
  // once those are bound).
  static Stmt before_end(const Stmt& s, Stmt last) {
    if (const LetStmt* let = s.as<LetStmt>()) return LetStmt::make(let->name, let->value, before_end(let->body, last));
    return Block::make({s, std::move(last)});
  }

  const CudaSchedule& s_;
  const bool block_;
  std::vector<std::pair<Buffer, int64_t>> parts_;
  bool in_row_ = false;
  int depth_ = 0;  // loops open inside the row  // the folds' shared parts and their extents
};

}  // namespace

Stmt map_rows(const Stmt& body, const CudaSchedule& s) {
  if (s.mapping != CudaMapping::PerRowWarp && s.mapping != CudaMapping::PerRowBlock) return body;
  return MapRows(s).mutate(body);
}

}  // namespace terrace::kernels::gpu
