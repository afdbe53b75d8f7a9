// schedule_cuda(): a lowered kernel's mapping onto GPU threads and its vector accesses.
#include "kernels/schedule_cuda.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "kernels/fold.h"
#include "kernels/split_lanes.h"
#include "kernels/visitor.h"

namespace terrace::kernels {
namespace {

// The Parallel loops of a kernel, and whether it has loops or allocations below a node.
struct LoopFinder : IRVisitor {
  std::vector<const For*> parallel;
  int loops = 0, allocates = 0;
  void visit_node(const For* op) override {
    if (op->for_kind == ForKind::Parallel) parallel.push_back(op);
    ++loops;
    IRVisitor::visit_node(op);
  }
  void visit_node(const Allocate* op) override {
    ++allocates;
    IRVisitor::visit_node(op);
  }
};

bool mentions(const Expr& e, const std::string& name) {
  struct Finder : IRVisitor {
    const std::string& name;
    bool found = false;
    explicit Finder(const std::string& n) : name(n) {}
    void visit_node(const Var* op) override { found = found || op->name == name; }
  } f(name);
  f.visit(e);
  return f.found;
}

// A visitor that counts the conditions (Select, IfThenElse) around what it visits.
class ConditionalVisitor : public IRVisitor {
 protected:
  int conditional_ = 0;
  virtual void entering_if() {}
  void visit_node(const Select* op) override {
    visit(op->cond);
    ++conditional_;
    visit(op->true_value);
    visit(op->false_value);
    --conditional_;
  }
  void visit_node(const IfThenElse* op) override {
    visit(op->cond);
    entering_if();
    ++conditional_;
    visit(op->then_case);
    visit(op->else_case);
    --conditional_;
  }
};

// The loads and stores of the lane body (the innermost loop's body) that may move as vectors,
// with the base of their index (index = base + lane var; undefined base: 0).
class Accesses : public ConditionalVisitor {
 public:
  struct Access {
    const IRNode* node;
    DType dtype;
    Expr base;
  };
  explicit Accesses(std::string lane) : lane_(std::move(lane)) {}
  std::vector<Access> found;

 protected:
  void visit_node(const Load* op) override {
    consider(op, op->buffer, op->index);
    IRVisitor::visit_node(op);
  }
  void visit_node(const Store* op) override {
    consider(op, op->buffer, op->index);
    IRVisitor::visit_node(op);
  }

 private:
  // What is under a condition may not run for every lane: a vector access would be speculative.
  void consider(const IRNode* node, const Buffer& b, const Expr& index) {
    if (conditional_ || b.slot == kLocalSlot) return;
    if (const Var* v = index.as<Var>(); v && v->name == lane_) {
      found.push_back({node, b.dtype, Expr()});
      return;
    }
    const Binary* add = index.as<Binary>();
    if (!add || add->op != BinaryOp::Add) return;
    for (int k = 0; k < 2; ++k) {
      const Expr& x = k ? add->b : add->a;
      const Expr& rest = k ? add->a : add->b;
      if (const Var* v = x.as<Var>(); v && v->name == lane_ && !mentions(rest, lane_)) {
        found.push_back({node, b.dtype, rest});
        return;
      }
    }
  }
  std::string lane_;
};

// True when `e` is a multiple of w for every value of the variables it reads. `lets` are the
// bindings in scope (the 2-D kernel's per-row lets); a variable bound elsewhere is unknown.
bool divisible(const Expr& e, int64_t w, const std::map<std::string, Expr>& lets) {
  if (const IntImm* c = e.as<IntImm>()) return c->value % w == 0;
  if (const Var* v = e.as<Var>()) {
    auto it = lets.find(v->name);
    return it != lets.end() && divisible(it->second, w, lets);
  }
  if (const Binary* b = e.as<Binary>()) {
    if (b->op == BinaryOp::Mul) return divisible(b->a, w, lets) || divisible(b->b, w, lets);
    if (b->op == BinaryOp::Add || b->op == BinaryOp::Sub) return divisible(b->a, w, lets) && divisible(b->b, w, lets);
  }
  return false;
}

// True when every variable `e` reads is bound before the lane loop: a let of `lets`, the
// Parallel loop's variable or the kernel's range. The vector access is made there.
bool bound_before_lanes(const Expr& e, const std::map<std::string, Expr>& lets, const std::string& outer) {
  struct Vars : IRVisitor {
    std::set<std::string> names;
    void visit_node(const Var* op) override { names.insert(op->name); }
  } vars;
  vars.visit(e);
  for (const std::string& n : vars.names)
    if (!lets.count(n) && n != outer && n != "begin" && n != "end") return false;
  return true;
}

// ---- PerRowWarp ----

bool shuffles(DType t) {  // __shfl_xor_sync's types
  return t == DType::Float32 || t == DType::Float64 || t == DType::Int32 || t == DType::UInt32 ||
         t == DType::Int64 || t == DType::UInt64;
}

// Loads of the local array `name` in a statement or expression.
struct LocalReads : IRVisitor {
  const std::string& name;
  int count = 0;
  explicit LocalReads(const std::string& n) : name(n) {}
  void visit_node(const Load* op) override {
    if (op->buffer.slot == kLocalSlot && op->buffer.name == name) ++count;
    IRVisitor::visit_node(op);
  }
};
template <typename Node>
int local_reads(const Node& n, const std::string& name) {
  LocalReads r(name);
  r.visit(n);
  return r.count;
}
// The stores below a node: to kernel buffers, to local arrays, and the folds' (Accumulates).
struct Stores : IRVisitor {
  std::vector<const Store*> global, local;
  std::vector<const Accumulate*> folds;
  int loops = 0, allocates = 0;
  void visit_node(const Store* op) override {
    (op->buffer.slot == kLocalSlot ? local : global).push_back(op);
    IRVisitor::visit_node(op);
  }
  void visit_node(const Accumulate* op) override {
    folds.push_back(op);
    IRVisitor::visit_node(op);
  }
  bool writes(const std::string& local_array) const {
    for (const Store* x : local)
      if (x->buffer.name == local_array) return true;
    for (const Accumulate* x : folds)
      if (x->accumulator.name == local_array) return true;
    return false;
  }
  void visit_node(const For* op) override {
    ++loops;
    IRVisitor::visit_node(op);
  }
  void visit_node(const Allocate* op) override {
    ++allocates;
    IRVisitor::visit_node(op);
  }
};

// The ops whose partial values the GPU combines across threads: all but a float max or min in
// which NaN wins, whose fold stays in one thread (a row's is split into lanes first, and those
// combine; spreading it by its own combine is a change of its own, to be timed on the GPU).
bool crosses_threads(FoldOp op, DType t) { return !fold_nan_wins(op) || !is_float(t); }

// The fold `a` makes in a loop over `loop_var`, as the GPU combines two partial values of it; or
// nothing where it cannot. `slot`: the index the combine uses (a loop over every slot of the
// array), or undefined: the fold's own.
std::optional<CudaSchedule::Fold> fold_of(const Accumulate* a, const std::string& loop_var, Expr slot = Expr()) {
  const Buffer& acc = a->accumulator;
  if (!shuffles(acc.dtype) || !crosses_threads(a->op, acc.dtype) || mentions(a->index, loop_var)) return std::nullopt;
  const Expr at = slot.defined() ? slot : a->index;
  const Expr mine = Load::make(acc, at), other = Var::make(acc.dtype, "tr_other");
  // Threads after the first start a sum, product or or from its identity; a select may take the
  // first thread's start again.
  const bool arithmetic = a->op == FoldOp::Add || a->op == FoldOp::Mul || a->op == FoldOp::Or;
  const Expr identity = arithmetic ? fold_identity(a->op, acc.dtype) : Expr();
  return CudaSchedule::Fold{acc, at, fold_combine(a->op, mine, other), identity, 0, false, a->op};
}

// True when `index` is var plus something that does not move with it: distinct iterations store
// to distinct elements.
bool unit_stride(const Expr& index, const std::string& var) {
  if (const Var* v = index.as<Var>()) return v->name == var;
  const Binary* add = index.as<Binary>();
  if (!add || add->op != BinaryOp::Add) return false;
  const Var* a = add->a.as<Var>();
  const Var* b = add->b.as<Var>();
  return (a && a->name == var && !mentions(add->b, var)) || (b && b->name == var && !mentions(add->a, var));
}

// Global loads a statement makes, each weighted by the trip counts of the loops around it inside
// the statement (a loop whose extent is not a constant counts once).
struct LoadWork : IRVisitor {
  double work = 0, scale = 1;
  void visit_node(const Load* op) override {
    if (op->buffer.slot != kLocalSlot) work += scale;
    IRVisitor::visit_node(op);
  }
  void visit_node(const For* op) override {
    const IntImm* b = op->begin.as<IntImm>();
    const IntImm* e = op->end.as<IntImm>();
    const double trips = b && e ? double(std::max<int64_t>(0, e->value - b->value)) : 1;
    scale *= trips;
    visit(op->body);
    scale /= trips;
  }
};
double load_work(const Stmt& s) {
  LoadWork w;
  w.visit(s);
  return w.work;
}

// Sorts the loops of a row (those not inside another loop) into lane loops, with their folds, and
// the others; false when some other loop stores to a buffer (every lane would store).
// `spread_work` and `other_work` weigh the row's reads in each kind (LoadWork).
class RowLoops {
 public:
  bool ok = true;
  double spread_work = 0, other_work = 0;

 private:
  std::map<std::string, int64_t> extents_;  // the local arrays in scope

 public:
  std::set<const For*> lane_loops;
  std::map<const For*, std::vector<CudaSchedule::Fold>> folds;

  void visit(const Stmt& s) {
    if (!s.defined() || !ok) return;
    if (const For* f = s.as<For>()) return loop(f);
    if (const Block* b = s.as<Block>()) {
      for (const Stmt& x : b->stmts) visit(x);
    } else if (const LetStmt* l = s.as<LetStmt>()) {
      visit(l->body);
    } else if (const Allocate* a = s.as<Allocate>()) {
      extents_[a->buffer.name] = a->extent;
      visit(a->body);
    } else if (const IfThenElse* i = s.as<IfThenElse>()) {
      visit(i->then_case);
      visit(i->else_case);
    }
  }

 private:
  void loop(const For* f) {
    Stores st;
    st.visit(f->body);
    std::vector<CudaSchedule::Fold> fs;
    // A loop with loops inside (a fold split into 16 vector lanes) is spread when it only folds:
    // its accumulators are then combined slot by slot.
    const bool nest = st.loops > 0;
    bool spread = st.allocates == 0 && (!nest || st.global.empty());
    for (const Store* g : st.global) spread = spread && unit_stride(g->index, f->var);
    // Every lane would write a local array that is not a fold's.
    spread = spread && st.local.empty();
    for (const Accumulate* l : st.folds) {
      if (!spread) break;
      // At most 32 slots, which stay in registers (a reduction over outer axes folds into blocks
      // of up to 512 columns: a thread per block, until a mapping spreads the columns instead).
      auto extent = extents_.find(l->accumulator.name);
      const bool small = extent != extents_.end() && extent->second <= 32;
      std::optional<CudaSchedule::Fold> fold =
          !nest ? fold_of(l, f->var) : small ? fold_of(l, f->var, Var::make(DType::Int64, "tr_s")) : std::nullopt;
      if (fold && nest) fold->slots = extent->second;
      // The accumulator is read nowhere in the loop (its fold's own read is implicit).
      spread = fold && local_reads(f->body, l->accumulator.name) == 0;
      if (fold) fs.push_back(*fold);
    }
    Stmt whole = For::make(f->var, f->begin, f->end, f->for_kind, f->body);
    if (spread) {
      lane_loops.insert(f);
      folds[f] = std::move(fs);
      spread_work += load_work(whole);
    } else if (!st.global.empty()) {
      ok = false;
    } else {
      other_work += load_work(whole);
    }
  }
};

// ---- PerRowBlock ----

// An index offset as a sum of variables times constants plus a constant.
struct Affine {
  std::map<std::string, int64_t> coef;
  int64_t constant = 0;
};
std::optional<Affine> affine(const Expr& e) {
  if (const IntImm* c = e.as<IntImm>()) return Affine{{}, c->value};
  if (const Var* v = e.as<Var>()) return Affine{{{v->name, 1}}, 0};
  const Binary* b = e.as<Binary>();
  if (!b || (b->op != BinaryOp::Add && b->op != BinaryOp::Mul)) return std::nullopt;
  if (b->op == BinaryOp::Add) {
    auto x = affine(b->a), y = affine(b->b);
    if (!x || !y) return std::nullopt;
    for (auto& [n, c] : y->coef) x->coef[n] += c;
    x->constant += y->constant;
    return x;
  }
  const IntImm* k = b->b.as<IntImm>();
  Expr other = b->a;
  if (!k) {
    k = b->a.as<IntImm>();
    other = b->b;
  }
  if (!k) return std::nullopt;
  auto x = affine(other);
  if (!x) return std::nullopt;
  for (auto& [n, c] : x->coef) c *= k->value;
  x->constant *= k->value;
  return x;
}

// The global accesses of a row whose index is a row-start let plus an offset over the loops
// around it, with the offsets' range; whether some loop runs under a condition.
class RowAccesses : public ConditionalVisitor {
 public:
  struct Access {
    const IRNode* node;
    bool store;
    std::string base;         // empty: not of the form let + offset
    Expr offset;
    int64_t lo = 0, hi = -1;  // the offset's range (hi < lo: unknown)
    int64_t dense = 0;        // > 0: the offset takes every value of [0, dense) once, unconditionally
    int loop = 0;             // the row's top-level loop it is in (1, 2, ...), 0: none
    int seq = 0;              // top-level loops started before it (its loop's number if in one)
  };
  std::map<std::string, std::vector<Access>> by_buffer;
  std::map<std::string, Buffer> buffers;
  std::vector<const For*> top_loops;  // the row's top-level loops: loop n is top_loops[n - 1]
  bool conditional_control = false;  // a loop or a row-level statement under a condition
  std::map<std::string, Expr> let_values;  // the row's leading lets (the rows' bases among them)

  void scan(const Stmt& row) {
    Stmt s = row;
    while (const LetStmt* let = s.as<LetStmt>()) {
      row_lets_.insert(let->name);
      let_values[let->name] = let->value;
      s = let->body;
    }
    visit(row);
  }

 protected:
  void visit_node(const For* op) override {
    const bool top = depth_ == 0;
    if (top) {
      current_ = ++loops_;
      top_loops.push_back(op);
    }
    if (conditional_) conditional_control = true;
    const IntImm* b = op->begin.as<IntImm>();
    const IntImm* e = op->end.as<IntImm>();
    ranges_.push_back({op->var, b && e && e->value > b->value ? std::pair{b->value, e->value} : std::pair{int64_t(0), int64_t(0)}});
    visit(op->begin);
    visit(op->end);
    ++depth_;
    visit(op->body);
    --depth_;
    ranges_.pop_back();
    if (top) current_ = 0;
  }
  void entering_if() override {
    if (depth_ == 0) conditional_control = true;
  }
  void visit_node(const Load* op) override {
    record(op, op->buffer, op->index, false);
    IRVisitor::visit_node(op);
  }
  void visit_node(const Store* op) override {
    record(op, op->buffer, op->index, true);
    IRVisitor::visit_node(op);
  }

 private:
  void record(const IRNode* node, const Buffer& buf, const Expr& index, bool store) {
    if (buf.slot == kLocalSlot) return;
    buffers[buf.name] = buf;
    Access a{node, store, "", Expr(), 0, -1, 0, current_, current_ ? current_ : loops_};
    Expr base, offset;
    if (const Var* v = index.as<Var>(); v && row_lets_.count(v->name)) {
      base = index;
      offset = make_index(0);
    } else if (const Binary* add = index.as<Binary>(); add && add->op == BinaryOp::Add) {
      for (int k = 0; k < 2 && !base.defined(); ++k) {
        const Var* v = (k ? add->b : add->a).as<Var>();
        const Expr& rest = k ? add->a : add->b;
        if (v && row_lets_.count(v->name) && !mentions(rest, v->name)) {
          base = k ? add->b : add->a;
          offset = rest;
        }
      }
    }
    if (base.defined()) measure(a, base.as<Var>()->name, offset);
    by_buffer[buf.name].push_back(a);
  }
  void measure(Access& a, const std::string& base, const Expr& offset) {
    const auto aff = affine(offset);
    if (!aff) return;
    int64_t lo = aff->constant, hi = aff->constant;
    std::vector<std::pair<int64_t, int64_t>> terms;  // (coefficient, extent), loops from 0 only
    bool from_zero = aff->constant == 0;
    for (const auto& [name, c] : aff->coef) {
      if (c == 0) continue;
      auto r = std::find_if(ranges_.rbegin(), ranges_.rend(), [&](const auto& x) { return x.first == name; });
      if (r == ranges_.rend() || r->second.second <= r->second.first) return;  // not a loop of constant range
      const auto [b, e] = r->second;
      lo += c > 0 ? c * b : c * (e - 1);
      hi += c > 0 ? c * (e - 1) : c * b;
      from_zero = from_zero && b == 0 && c > 0;
      terms.push_back({c, e - b});
    }
    a.base = base;
    a.offset = offset;
    a.lo = lo;
    a.hi = hi;
    // Dense: the coefficients, smallest first, are 1 and each the product of the extents below it.
    std::sort(terms.begin(), terms.end());
    int64_t next = 1;
    for (const auto& [c, n] : terms) {
      from_zero = from_zero && c == next;
      next = c * n;
    }
    if (from_zero && !conditional_ && !terms.empty()) a.dense = next;
  }

  std::set<std::string> row_lets_;
  std::vector<std::pair<std::string, std::pair<int64_t, int64_t>>> ranges_;  // loops open, innermost last
  int depth_ = 0, loops_ = 0, current_ = 0;
};

// The row caches of a PerRowWarp kernel's row (see CudaSchedule::RowCache) from its accesses,
// or none where a buffer's accesses do not allow one. They take at most `budget` bytes.
void plan_row_caches(const RowAccesses& scan, CudaSchedule& s, size_t budget) {
  if (scan.conditional_control) return;
  size_t used = 0;
  for (auto& [name, accesses] : scan.by_buffer) {
    const std::string base = accesses[0].base;
    int64_t hi = -1;
    bool stored = false, loaded = false, ok = !base.empty();
    for (const RowAccesses::Access& a : accesses) {
      ok = ok && a.base == base && a.lo >= 0 && a.hi >= a.lo;
      hi = std::max(hi, a.hi);
      (a.store ? stored : loaded) = true;
    }
    if (!ok || !loaded) continue;
    // The row: an input's, the longest range a read covers (so the copy reads nothing the kernel
    // does not); an output's, the range its first covering store writes, before any read.
    int64_t length = 0;
    int first_store = 0, last_store = 0;
    for (const RowAccesses::Access& a : accesses) {
      if (!stored) {
        length = std::max(length, a.dense);
      } else if (a.store && a.dense > 0 && (!first_store || a.dense == length)) {
        if (!first_store) {
          first_store = a.loop;
          length = a.dense;
        }
        last_store = a.loop;
      }
    }
    if (length == 0 || hi >= length) continue;
    if (stored) {
      bool reads_after = true;
      for (const RowAccesses::Access& a : accesses)
        if (!a.store) reads_after = reads_after && (a.loop ? a.seq > first_store : a.seq >= first_store);
      if (!reads_after) continue;
      // Stores before the last loop that writes the whole row again are made to shared memory only.
      for (const RowAccesses::Access& a : accesses)
        if (a.store && a.loop > 0 && a.loop < last_store) s.dead_stores.insert(a.node);
    }
    const Buffer& buf = scan.buffers.at(name);
    const size_t bytes = size_t(length + length / 32) * dtype_size(buf.dtype);
    if (used + bytes > budget) {
      for (const RowAccesses::Access& a : accesses) s.dead_stores.erase(a.node);
      continue;
    }
    used += bytes;
    s.row_caches.push_back({buf, base, length, !stored});
    for (const RowAccesses::Access& a : accesses) s.cached_accesses[a.node] = a.offset;
  }
}

int64_t longest_row(const CudaSchedule& s) {
  int64_t longest = 0;
  for (const CudaSchedule::RowCache& c : s.row_caches) longest = std::max(longest, c.length);
  return longest;
}

// A lane loop of a block's row as one range of elements from 0: a loop from 0 of constant extent
// with no loop inside, or a nest of two such loops (a fold split into lanes, split_lanes.h), whose
// J * W elements are flattened. elements 0: neither.
struct FlatLoop {
  int64_t elements = 0;
  const For* inner = nullptr;
};
FlatLoop flat_loop(const For* f) {
  auto extent = [](const For* l) -> int64_t {
    const IntImm* b = l->begin.as<IntImm>();
    const IntImm* e = l->end.as<IntImm>();
    return b && e && b->value == 0 && e->value > 0 ? e->value : 0;
  };
  const int64_t n = extent(f);
  LoopFinder below;
  below.visit(f->body);
  if (n == 0 || below.allocates) return {};
  if (below.loops == 0) return {n, nullptr};
  const For* inner = f->body.as<For>();
  if (below.loops != 1 || !inner || extent(inner) == 0) return {};
  return {n * extent(inner), inner};
}

// True when every access of a nest's slot accumulators in its inner loop is at the inner loop's
// variable: a thread of a flattened nest then folds into one slot only (see plan_registers).
bool slots_at_inner_var(const For* inner, const std::vector<CudaSchedule::Fold>& folds) {
  struct Check : IRVisitor {
    std::set<std::string> accs;
    std::string var;
    bool ok = true;
    void at(const Buffer& b, const Expr& index) {
      if (b.slot != kLocalSlot || !accs.count(b.name)) return;
      const Var* v = index.as<Var>();
      ok = ok && v && v->name == var;
    }
    void visit_node(const Load* op) override {
      at(op->buffer, op->index);
      IRVisitor::visit_node(op);
    }
    void visit_node(const Store* op) override {
      at(op->buffer, op->index);
      IRVisitor::visit_node(op);
    }
    void visit_node(const Accumulate* op) override {
      at(op->accumulator, op->index);
      IRVisitor::visit_node(op);
    }
  } c;
  const IntImm* w = inner->end.as<IntImm>();
  for (const CudaSchedule::Fold& f : folds) {
    if (!w || f.slots != w->value) return false;
    c.accs.insert(f.accumulator.name);
  }
  c.var = inner->var;
  c.visit(inner->body);
  return c.ok;
}

// The lane loop (and its inner loop) an access of a row is in, where it is at exactly the element
// the loop visits (of the flattened range, for a nest); nullopt where it is not.
std::optional<std::pair<const For*, const For*>> register_loop_of(const RowAccesses& scan, CudaSchedule& s,
                                                                   const RowAccesses::Access& a) {
  if (a.loop == 0) return std::nullopt;
  const For* f = scan.top_loops.at(size_t(a.loop - 1));
  const FlatLoop flat = f && s.lane_loops.count(f) ? flat_loop(f) : FlatLoop{};
  const auto offset = a.offset.defined() ? affine(a.offset) : std::nullopt;
  if (flat.elements == 0 || !offset || offset->constant != 0) return std::nullopt;
  std::map<std::string, int64_t> want{{f->var, 1}}, got;
  if (flat.inner) want = {{f->var, flat.inner->end.as<IntImm>()->value}, {flat.inner->var, 1}};
  for (const auto& [name, c] : offset->coef)
    if (c != 0) got[name] = c;
  if (got != want) return std::nullopt;
  if (flat.inner && !slots_at_inner_var(flat.inner, s.folds[f])) return std::nullopt;
  return std::pair{f, flat.inner};
}

// By vectors, an output row written once, unconditionally, by one register loop and never read
// (layernorm's) also goes through registers, so that its stores move 16 bytes at a time, where
// the thread's `words` for its rows stay within `most`.
void add_written_rows(const RowAccesses& scan, CudaSchedule& s, int64_t words, int64_t most) {
  const int64_t per = int64_t(s.row_vector) * s.block;
  for (const auto& [name, accesses] : scan.by_buffer) {
    const Buffer& buf = scan.buffers.at(name);
    bool cached = false;
    for (const CudaSchedule::RowCache& c : s.row_caches) cached = cached || c.buffer.name == name;
    if (cached || accesses.size() != 1 || buf.slot == kLocalSlot) continue;
    const RowAccesses::Access& a = accesses[0];
    const int64_t length = a.dense;
    if (!a.store || a.base.empty() || length <= 0 || a.lo != 0 || a.hi != length - 1 || buf.dtype != DType::Float32 ||
        length % s.row_vector != 0 || !divisible(Var::make(DType::Int64, a.base), s.row_vector, scan.let_values))
      continue;
    const auto loop = register_loop_of(scan, s, a);
    if (!loop || !s.register_loops.count(loop->first) || flat_loop(loop->first).elements != length) continue;
    const int64_t more = (length + per - 1) / per * s.row_vector;
    if (words + more > most) continue;
    words += more;
    s.row_caches.push_back({buf, a.base, length, false});
    s.cached_accesses[a.node] = a.offset;
  }
}

// By vectors, the register loops' unconditional loads of float32 buffers other than the rows at
// exactly the loop's element (CudaSchedule::vector_loads).
void add_vector_loads(CudaSchedule& s) {
  struct Loads : ConditionalVisitor {
    const CudaSchedule& s;
    std::string var;
    std::set<const IRNode*> found;
    explicit Loads(const CudaSchedule& sched) : s(sched) {}
    void visit_node(const Load* op) override {
      const Var* v = op->index.as<Var>();
      if (!conditional_ && op->buffer.slot != kLocalSlot && op->buffer.dtype == DType::Float32 && v && v->name == var &&
          !s.cached_accesses.count(op))
        found.insert(op);
      IRVisitor::visit_node(op);
    }
  } loads(s);
  for (const auto& [loop, inner] : s.register_loops) {
    if (inner) continue;
    loads.var = loop->var;
    loads.visit(loop->body);
  }
  s.vector_loads = std::move(loads.found);
}

// PerRowBlock with its rows in registers (CudaSchedule::rows_in_registers) where every access of
// a cached buffer is in a lane loop at exactly the element the loop visits (of the flattened
// range, for a nest) and the rows take at most 32 registers a thread with at most 1,024 threads;
// by 16-byte vectors where they can (row_vector). Sets the block: the fewest threads that fit
// (see below). A flattened nest of W slots needs W to divide the block: thread t's elements then
// fold into the slots (V t + j) % W, V the vector width.
bool plan_registers(const RowAccesses& scan, CudaSchedule& s) {
  std::map<const For*, const For*> loops;
  for (const CudaSchedule::RowCache& c : s.row_caches)
    for (const RowAccesses::Access& a : scan.by_buffer.at(c.buffer.name)) {
      const auto loop = register_loop_of(scan, s, a);
      if (!loop) return false;
      loops[loop->first] = loop->second;
    }
  // 16-byte accesses (CudaSchedule::row_vector) where every row is float32 with a start, a length,
  // every register loop an extent and every slot fold a slot count that is a multiple of 4, and
  // every store of a cached row is unconditional (its memory write moves after the loop, from the
  // registers).
  constexpr int kVector = 4;
  bool vector = true;
  for (const CudaSchedule::RowCache& c : s.row_caches) {
    // The row's start a multiple of 4 elements: aligned wherever the buffer is (cuda_aligned_params).
    vector = vector && c.buffer.dtype == DType::Float32 && c.length % kVector == 0 &&
             divisible(Var::make(DType::Int64, c.base), kVector, scan.let_values);
    for (const RowAccesses::Access& a : scan.by_buffer.at(c.buffer.name)) vector = vector && (!a.store || a.dense > 0);
  }
  for (const auto& [loop, inner] : loops) {
    vector = vector && flat_loop(loop).elements % kVector == 0;
    if (inner) vector = vector && inner->end.as<IntImm>()->value % kVector == 0;
  }
  // The fewest threads that fit, from 128 (element by element) or from 256 (by vectors), at most
  // 32 words a thread: the faster start for each on the H100's rows. By vectors, first 128 threads
  // with up to 64 words where the kernel reads no per-column vectors (a layernorm's scale and bias
  // would take that many more): no slower for a softmax (timings: bench/RESULTS.md).
  struct Try {
    int block;
    int64_t most;  // words a thread
  };
  std::vector<Try> tries;
  if (vector) tries.push_back({128, 64});
  for (int block = vector ? 256 : 128; block <= 1024; block *= 2) tries.push_back({block, 32});
  for (const Try& t : tries) {
    int64_t words = 0;  // a thread's 32-bit registers for its elements of every row
    const int64_t per = vector ? kVector * t.block : t.block;
    for (const CudaSchedule::RowCache& c : s.row_caches)
      words += (c.length + per - 1) / per * (per / t.block) * int64_t((dtype_size(c.buffer.dtype) + 3) / 4);
    bool slots_divide = true;
    for (const auto& [loop, inner] : loops)
      slots_divide = slots_divide && (!inner || t.block % inner->end.as<IntImm>()->value == 0);
    if (words > t.most || !slots_divide) continue;
    CudaSchedule c = s;
    c.block = t.block;
    c.rows_in_registers = true;
    c.row_vector = vector ? kVector : 1;
    c.register_loops = loops;
    if (vector) {
      add_written_rows(scan, c, words, t.most);
      add_vector_loads(c);
    }
    if (t.most > 32 && !c.vector_loads.empty()) continue;
    s = std::move(c);
    return true;
  }
  return false;
}

// True when `s` is `for v in [0, f.slots): acc[i] = op(acc[i], slots[v])`, f's op folding every
// slot of f's array into another accumulator of its type.
bool folds_every_slot(const Stmt& s, const CudaSchedule::Fold& f) {
  const For* loop = s.as<For>();
  if (!loop) return false;
  const IntImm* b = loop->begin.as<IntImm>();
  const IntImm* e = loop->end.as<IntImm>();
  Stmt body = loop->body;
  if (const Block* one = body.as<Block>(); one && one->stmts.size() == 1) body = one->stmts[0];
  const Accumulate* a = body.as<Accumulate>();
  if (!b || b->value != 0 || !e || e->value != f.slots || !a || a->op != f.op ||
      a->accumulator.name == f.accumulator.name || a->accumulator.dtype != f.accumulator.dtype ||
      mentions(a->index, loop->var))
    return false;
  const Load* slot = a->value.as<Load>();
  const Var* v = slot ? slot->index.as<Var>() : nullptr;
  return slot && slot->buffer.slot == kLocalSlot && slot->buffer.name == f.accumulator.name && v && v->name == loop->var;
}

// Marks CudaSchedule::Fold::whole: the slot folds of register loops whose array (an Allocate's)
// is read after the fold's loop, in the Allocate's body, only by one loop that folds_every_slot,
// and stored to by nothing after the fold's loop.
void mark_whole_folds(CudaSchedule& s) {
  struct Scan : IRVisitor {
    CudaSchedule& s;
    explicit Scan(CudaSchedule& sched) : s(sched) {}
    void visit_node(const Allocate* op) override {
      const Block* body = op->body.as<Block>();
      for (size_t i = 0; body && i < body->stmts.size(); ++i) {
        const For* loop = body->stmts[i].as<For>();
        auto folds = loop ? s.folds.find(loop) : s.folds.end();
        auto reg = loop ? s.register_loops.find(loop) : s.register_loops.end();
        if (folds == s.folds.end() || reg == s.register_loops.end() || !reg->second) continue;
        for (CudaSchedule::Fold& f : folds->second) {
          if (f.slots == 0 || f.accumulator.name != op->buffer.name || !fold_idempotent(f.op)) continue;
          int readers = 0;
          bool ok = true;
          for (size_t j = i + 1; j < body->stmts.size() && ok; ++j) {
            Stores st;
            st.visit(body->stmts[j]);
            ok = !st.writes(f.accumulator.name);
            if (local_reads(body->stmts[j], f.accumulator.name) == 0) continue;
            ++readers;
            ok = folds_every_slot(body->stmts[j], f);
          }
          f.whole = ok && readers == 1;
        }
      }
      IRVisitor::visit_node(op);
    }
  } scan(s);
  scan.visit(s.parallel->body);
}

}  // namespace

const char* cuda_mapping_name(CudaMapping m) {
  switch (m) {
    case CudaMapping::Single: return "single";
    case CudaMapping::PerIteration: return "per-iteration";
    case CudaMapping::PerElement: return "per-element";
    case CudaMapping::PerRowWarp: return "per-row-warp";
    case CudaMapping::PerRowBlock: return "per-row-block";
  }
  return "?";
}

namespace {

// A kernel that is not elementwise: PerRowWarp where it can (see schedule_cuda.h), else `s` as it
// is (PerIteration).
CudaSchedule row_schedule(const LoweredFunc& f, CudaSchedule s) {
  if (f.work_per_iteration < 32) return s;
  RowLoops rows;
  rows.visit(s.parallel->body);
  // Most of the row's reads must be spread over the lanes: the loops left run in all 32 (a
  // reduction over outer axes keeps its whole fold there, and is faster a thread per row).
  if (!rows.ok || rows.lane_loops.empty() || rows.spread_work < rows.other_work) return s;
  s.mapping = CudaMapping::PerRowWarp;
  s.block = 256;
  s.lane_loops = std::move(rows.lane_loops);
  s.folds = std::move(rows.folds);
  // Long rows: a block per row, the row in registers or in shared memory.
  RowAccesses scan;
  scan.scan(s.parallel->body);
  CudaSchedule b = s;
  plan_row_caches(scan, b, SIZE_MAX);
  if (longest_row(b) < 1024) return s;
  b.mapping = CudaMapping::PerRowBlock;
  // A loop that neither reads nor writes memory (it folds the row's combined local arrays, as
  // softmax's max over its 16 lanes) runs whole in every thread, which hold the same
  // values: no combine across the block, and its arrays indexed by constants stay in registers.
  for (auto it = b.lane_loops.begin(); it != b.lane_loops.end();) {
    Stores st;
    st.visit((*it)->body);
    if (st.global.empty() && load_work((*it)->body) == 0) {
      b.folds.erase(*it);
      it = b.lane_loops.erase(it);
    } else {
      ++it;
    }
  }
  // In registers a row is read from memory with every load in flight at once and no copy through
  // shared memory: a row-wise kernel then runs at the device-to-device copy's speed.
  if (plan_registers(scan, b)) {
    mark_whole_folds(b);
    return b;
  }
  // Else shared memory (at most 40 KB of the 48 a block may declare; the folds' partial values
  // take the rest).
  b.row_caches.clear();
  b.cached_accesses.clear();
  b.dead_stores.clear();
  plan_row_caches(scan, b, 40 << 10);
  if (longest_row(b) < 1024) return s;
  // 128 threads (32 elements each for 4,096): on the H100 a 4,096-column softmax took 0.16 ms
  // with 128, 0.18-0.27 with 256, 0.44 with 512, 0.60 with 1,024 and 0.23 with 64 (bench/RESULTS.md).
  b.block = 128;
  return b;
}

}  // namespace

CudaSchedule schedule_cuda(const LoweredFunc& f) {
  CudaSchedule s;
  // The schedule's node pointers name this body: run_gpu_passes starts from it.
  s.body = split_lanes(f.body);
  LoopFinder all;
  all.visit(s.body);
  if (all.parallel.empty()) {
    s.block = 1;
    return s;
  }
  s.mapping = CudaMapping::PerIteration;
  s.parallel = all.parallel[0];
  s.block = 128;  // a thread per row of serial work: more blocks spread it over more SMs
  if (all.parallel.size() != 1) return s;

  // PerElement: the Parallel loop's body is lets around one Vectorized loop of constant extent
  // with no loop or allocation inside (2-D), or holds no loop or allocation at all (1-D).
  std::map<std::string, Expr> lets;
  Stmt body = s.parallel->body;
  while (const LetStmt* let = body.as<LetStmt>()) {
    lets[let->name] = let->value;
    body = let->body;
  }
  Stmt lane_body;
  std::string lane;
  if (const For* inner = body.as<For>()) {
    const IntImm* b = inner->begin.as<IntImm>();
    const IntImm* e = inner->end.as<IntImm>();
    LoopFinder below;
    below.visit(inner->body);
    if (inner->for_kind != ForKind::Vectorized || !b || b->value != 0 || !e || below.loops || below.allocates)
      return row_schedule(f, s);
    s.inner = inner;
    s.inner_extent = std::max<int64_t>(1, e->value);
    lane_body = inner->body;
    lane = inner->var;
  } else {
    LoopFinder below;
    below.visit(s.parallel->body);
    if (below.loops || below.allocates) return row_schedule(f, s);
    lets.clear();  // 1-D: the lets are per element, inside the lane body
    lane_body = s.parallel->body;
    lane = s.parallel->var;
  }
  s.mapping = CudaMapping::PerElement;
  s.block = 256;

  // The vector width: 16 bytes of the widest element accessed as a vector, at most 8 lanes, and
  // in 2-D a divisor of the row length.
  Accesses acc(lane);
  acc.visit(lane_body);
  const std::string outer = s.inner ? s.parallel->var : "";
  std::erase_if(acc.found, [&](const Accesses::Access& a) {
    return a.base.defined() && (!s.inner || !bound_before_lanes(a.base, lets, outer));
  });
  size_t widest = 0;
  for (const Accesses::Access& a : acc.found) widest = std::max(widest, dtype_size(a.dtype));
  if (widest == 0) return s;
  int w = int(std::min<size_t>(8, 16 / widest));
  while (w > 1 && s.inner && s.inner_extent % w != 0) w /= 2;
  if (w < 2) return s;
  for (const Accesses::Access& a : acc.found)
    if (!a.base.defined() || divisible(a.base, w, lets)) s.vector_accesses.insert(a.node);
  if (!s.vector_accesses.empty()) s.vector_width = w;
  return s;
}

size_t row_block_shared_bytes(const CudaSchedule& s) {
  size_t bytes = 0;
  if (!s.rows_in_registers)
    for (const CudaSchedule::RowCache& c : s.row_caches) bytes += size_t(c.length + c.length / 32) * dtype_size(c.buffer.dtype);
  for (const auto& [loop, folds] : s.folds)
    for (const CudaSchedule::Fold& f : folds)
      bytes += size_t(f.whole ? 1 : std::max<int64_t>(1, f.slots)) * (s.block / 32) * dtype_size(f.accumulator.dtype);
  return bytes;
}

int row_block_min_blocks(const CudaSchedule& s) {
  const size_t per_sm = 227 << 10;  // an H100's shared memory for blocks
  const size_t fit = per_sm / std::max<size_t>(1, row_block_shared_bytes(s) + 1024);  // 1 KB: the runtime's own
  const int threads = s.rows_in_registers ? 512 : 1024;  // 65,536 registers: 128 or 64 a thread
  return int(std::clamp<size_t>(std::min<size_t>(fit, size_t(threads / s.block)), 1, 32));
}

CudaLaunch cuda_launch(const CudaSchedule& s, int64_t begin, int64_t end, int multiprocessors) {
  CudaLaunch l;
  if (s.mapping == CudaMapping::Single) return l;
  const int64_t sms = multiprocessors > 0 ? multiprocessors : 132;
  int64_t items = std::max<int64_t>(0, end - begin);
  if (s.mapping == CudaMapping::PerElement) items = (items * s.inner_extent + s.vector_width - 1) / s.vector_width;
  if (s.mapping == CudaMapping::PerRowWarp) items *= 32;
  if (s.mapping == CudaMapping::PerRowBlock) items *= s.block;
  l.block = unsigned(s.block);
  const int64_t blocks = (items + s.block - 1) / s.block;
  // A block a row up to 64 an SM: a block that ends frees its SM for the next row (8,192 rows of
  // 4,096 on the H100: 1% faster as 8,192 blocks than as 4,224 of two rows each).
  const int64_t most = s.mapping == CudaMapping::PerRowBlock ? sms * 64 : sms * 32;
  l.grid = unsigned(std::clamp<int64_t>(blocks, 1, most));
  return l;
}

}  // namespace terrace::kernels
