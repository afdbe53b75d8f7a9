// split_lanes(): a row's max or min folded in kLanes vector lanes (kernels/split_lanes.h).
#include "kernels/split_lanes.h"

#include <limits>
#include <string>
#include <vector>

#include "kernels/fold.h"
#include "kernels/mutator.h"

namespace terrace::kernels {
namespace {

Expr idx(int64_t v) { return make_index(v); }
Expr var(const std::string& name) { return Var::make(DType::Int64, name); }

Stmt seq(std::vector<Stmt> s) {
  std::erase_if(s, [](const Stmt& x) { return !x.defined(); });
  return Block::make(std::move(s));
}

// `e` with the loop variable `name` replaced by `by`.
Expr substitute(const Expr& e, const std::string& name, const Expr& by) {
  struct Put : IRMutator {
    const std::string& name;
    const Expr& by;
    Put(const std::string& n, const Expr& b) : name(n), by(b) {}
    Expr visit(const Var* op, const Expr& self) override { return op->name == name ? by : self; }
  } put(name, by);
  return put.mutate(e);
}

bool mentions(const Expr& e, const std::string& name) {
  return !substitute(e, name, idx(0)).same_as(e);
}

// A fold to split: `loops`, outermost first, each the only statement of the one around it, of
// constant extent from 0, around `fold`, whose index reads none of them.
struct Nest {
  std::vector<const For*> loops;
  const Accumulate* fold = nullptr;
};

bool splits(FoldOp op) {
  return op == FoldOp::Max || op == FoldOp::Min || op == FoldOp::MaxNaN || op == FoldOp::MinNaN;
}

Nest nest_at(const For* top) {
  Nest n;
  Stmt s = Stmt();
  for (const For* f = top; f; f = s.as<For>()) {
    const IntImm* b = f->begin.as<IntImm>();
    if (!b || b->value != 0 || !f->end.as<IntImm>()) return {};
    n.loops.push_back(f);
    s = f->body;
  }
  n.fold = s.as<Accumulate>();
  if (!n.fold || !splits(n.fold->op)) return {};
  for (const For* f : n.loops)
    if (mentions(n.fold->index, f->var)) return {};
  return n;
}

// The split of nest `n` (see split_lanes.h).
class Split {
 public:
  explicit Split(const Nest& n)
      : n_(n), f_(*n.fold), t_(f_.accumulator.dtype), lane_op_(fold_ignoring_nan(f_.op)),
        flags_(fold_nan_wins(f_.op) && is_float(t_)), lanes_{f_.name + "lanes", t_, kLocalSlot},
        nans_{f_.name + "nans", DType::Int32, kLocalSlot} {}

  Stmt run() const {
    const std::string li = f_.name + "li", lm = f_.name + "lm";
    std::vector<Stmt> init{Store::make(lanes_, var(li), fold_identity(f_.op, t_))};
    if (flags_) init.push_back(Store::make(nans_, var(li), IntImm::make(DType::Int32, 0)));
    Stmt merged = seq({For::make(li, idx(0), idx(kLanes), ForKind::Vectorized, seq(init)), over_lanes(),
                       For::make(lm, idx(0), idx(kLanes), ForKind::Serial,
                                 Accumulate::make(f_.accumulator, f_.index, Load::make(lanes_, var(lm)), lane_op_,
                                                  f_.name + "merge"))});
    if (flags_) merged = with_nan(merged, lm + "n");
    return Allocate::make(lanes_, kLanes, merged);
  }

 private:
  // The innermost loop's elements a vector of lanes at a time, then the rest into lane 0; the
  // outer loops around them.
  Stmt over_lanes() const {
    const For* last = n_.loops.back();
    const int64_t len = last->end.as<IntImm>()->value, full = len / kLanes;
    std::vector<Stmt> parts;
    if (full > 0) {
      Expr k = var("j") * idx(kLanes) + var("l");
      parts.push_back(For::make("j", idx(0), idx(full), ForKind::Serial,
                                For::make("l", idx(0), idx(kLanes), ForKind::Vectorized, update(var("l"), k))));
    }
    if (full * kLanes < len)
      parts.push_back(For::make("t", idx(full * kLanes), idx(len), ForKind::Serial, update(idx(0), var("t"))));
    Stmt s = seq(std::move(parts));
    for (size_t d = n_.loops.size() - 1; d-- > 0;)
      s = For::make(n_.loops[d]->var, idx(0), n_.loops[d]->end, ForKind::Serial, s);
    return s;
  }
  // Lane l folds the element at position k of the innermost loop (and its NaN flag).
  Stmt update(Expr l, Expr k) const {
    const std::string name = f_.name + "v";
    const Expr v = Var::make(t_, name);
    Stmt fold = Accumulate::make(lanes_, l, v, lane_op_, f_.name + "lane");
    if (flags_) {
      Expr is_nan = Cast::make(DType::Int32, Compare::make(CmpOp::NE, v, v));
      fold = seq({fold, Accumulate::make(nans_, l, is_nan, FoldOp::Or, f_.name + "nan")});
    }
    return LetStmt::make(name, substitute(f_.value, n_.loops.back()->var, k), fold);
  }
  // After the merge: the result NaN where a lane saw one.
  Stmt with_nan(const Stmt& merged, const std::string& lmn) const {
    const Buffer any{f_.name + "anynan", DType::Int32, kLocalSlot};
    const Expr nan = make_const(t_, std::numeric_limits<double>::quiet_NaN());
    Stmt s = seq({merged, Store::make(any, idx(0), IntImm::make(DType::Int32, 0)),
                  For::make(lmn, idx(0), idx(kLanes), ForKind::Serial,
                            Accumulate::make(any, idx(0), Load::make(nans_, var(lmn)), FoldOp::Or, f_.name + "anynan")),
                  IfThenElse::make(Compare::make(CmpOp::NE, Load::make(any, idx(0)), IntImm::make(DType::Int32, 0)),
                                   Store::make(f_.accumulator, f_.index, nan))});
    return Allocate::make(nans_, kLanes, Allocate::make(any, 1, s));
  }

  const Nest& n_;
  const Accumulate& f_;
  const DType t_;
  const FoldOp lane_op_;
  const bool flags_;
  const Buffer lanes_, nans_;
};

class SplitLanes : public IRMutator {
 protected:
  Stmt visit(const For* op, const Stmt& self) override {
    const Nest n = nest_at(op);
    if (!n.fold) return IRMutator::visit(op, self);
    return Split(n).run();
  }
};

}  // namespace

Stmt split_lanes(const Stmt& body) { return SplitLanes().mutate(body); }

}  // namespace terrace::kernels
