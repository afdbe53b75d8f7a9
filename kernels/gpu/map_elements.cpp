// map_elements(): a PerElement kernel's loops as GpuElements, its vector accesses marked
// (kernels/gpu/map_elements.h).
#include "kernels/gpu/map_elements.h"

#include <map>

#include "kernels/mutator.h"

namespace terrace::kernels::gpu {
namespace {

class MapElements : public IRMutator {
 public:
  explicit MapElements(const CudaSchedule& s) : s_(s) {}

 protected:
  Stmt visit(const For* op, const Stmt& self) override {
    if (op != s_.parallel && op != s_.inner) return IRMutator::visit(op, self);
    Stmt body = mutate(op->body);
    return For::make(op->var, op->begin, op->end, ForKind::GpuElements, body);
  }
  // A load reached through several expressions is one node, and stays one: one vector access.
  Expr visit(const Load* op, const Expr& self) override {
    if (!s_.vector_accesses.count(op)) return IRMutator::visit(op, self);
    auto [it, added] = loads_.try_emplace(op);
    if (added) it->second = Load::make(op->buffer, mutate(op->index), s_.vector_width);
    return it->second;
  }
  Stmt visit(const Store* op, const Stmt& self) override {
    if (!s_.vector_accesses.count(op)) return IRMutator::visit(op, self);
    return Store::make(op->buffer, mutate(op->index), mutate(op->value), s_.vector_width);
  }

 private:
  const CudaSchedule& s_;
  std::map<const Load*, Expr> loads_;
};

}  // namespace

Stmt map_elements(const Stmt& body, const CudaSchedule& s) {
  if (s.mapping != CudaMapping::PerElement) return body;
  return MapElements(s).mutate(body);
}

}  // namespace terrace::kernels::gpu
