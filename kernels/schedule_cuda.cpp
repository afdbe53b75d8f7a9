// schedule_cuda(): a lowered kernel's mapping onto GPU threads and its vector accesses.
#include "kernels/schedule_cuda.h"

#include <algorithm>
#include <map>
#include <string>

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

// The loads and stores of the lane body (the innermost loop's body) that may move as vectors,
// with the base of their index (index = base + lane var; undefined base: 0).
class Accesses : public IRVisitor {
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
  // What is under a condition may not run for every lane: a vector access would be speculative.
  void visit_node(const Select* op) override {
    visit(op->cond);
    ++conditional_;
    visit(op->true_value);
    visit(op->false_value);
    --conditional_;
  }
  void visit_node(const IfThenElse* op) override {
    visit(op->cond);
    ++conditional_;
    visit(op->then_case);
    visit(op->else_case);
    --conditional_;
  }

 private:
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
  int conditional_ = 0;
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

}  // namespace

const char* cuda_mapping_name(CudaMapping m) {
  switch (m) {
    case CudaMapping::Single: return "single";
    case CudaMapping::PerIteration: return "per-iteration";
    case CudaMapping::PerElement: return "per-element";
  }
  return "?";
}

CudaSchedule schedule_cuda(const LoweredFunc& f) {
  CudaSchedule s;
  LoopFinder all;
  all.visit(f.body);
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
      return s;
    s.inner = inner;
    s.inner_extent = std::max<int64_t>(1, e->value);
    lane_body = inner->body;
    lane = inner->var;
  } else {
    LoopFinder below;
    below.visit(s.parallel->body);
    if (below.loops || below.allocates) return s;
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

CudaLaunch cuda_launch(const CudaSchedule& s, int64_t begin, int64_t end, int multiprocessors) {
  CudaLaunch l;
  if (s.mapping == CudaMapping::Single) return l;
  const int64_t sms = multiprocessors > 0 ? multiprocessors : 132;
  int64_t items = std::max<int64_t>(0, end - begin);
  if (s.mapping == CudaMapping::PerElement) items = (items * s.inner_extent + s.vector_width - 1) / s.vector_width;
  l.block = unsigned(s.block);
  const int64_t blocks = (items + s.block - 1) / s.block;
  l.grid = unsigned(std::clamp<int64_t>(blocks, 1, sms * 32));
  return l;
}

}  // namespace terrace::kernels
