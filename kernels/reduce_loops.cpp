// The shared loops of the reduction lowerings (kernels/reduce_loops.h).
#include "kernels/reduce_loops.h"

#include "kernels/elementwise_ops.h"
#include "kernels/lower.h"
#include "kernels/verify.h"

namespace terrace::kernels::reduce {

Layout make_layout(const Shape& shape, const std::vector<bool>& reduced, const std::vector<Shape>& operands) {
  Layout l;
  l.buffers = 1 + operands.size();
  std::vector<std::vector<int64_t>> strides{row_major_strides(shape)};
  for (const Shape& s : operands) {  // right-aligned; 0 along broadcast dims
    std::vector<int64_t> st(shape.size(), 0);
    int64_t step = 1;
    for (size_t i = 0; i < s.size(); ++i) {
      size_t src = s.size() - 1 - i, dst = shape.size() - 1 - i;
      if (s[src] != 1) st[dst] = step;
      step *= s[src];
    }
    strides.push_back(st);
  }
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !l.dims.empty() && l.dims.back().reduced == reduced[d];
    for (size_t b = 0; merge && b < l.buffers; ++b) merge = l.dims.back().strides[b] == strides[b][d] * shape[d];
    if (merge) {
      l.dims.back().extent *= shape[d];
      for (size_t b = 0; b < l.buffers; ++b) l.dims.back().strides[b] = strides[b][d];
    } else {
      Dim dim{shape[d], {}, reduced[d]};
      for (size_t b = 0; b < l.buffers; ++b) dim.strides.push_back(strides[b][d]);
      l.dims.push_back(dim);
    }
  }
  l.inner_strides.assign(l.buffers, 0);
  for (size_t d = 0; d < l.dims.size(); ++d) {
    const Dim& dim = l.dims[d];
    if (dim.reduced) {
      l.red.push_back(dim);
      l.red_count *= dim.extent;
    } else {
      l.out_count *= dim.extent;
      if (d + 1 == l.dims.size()) {
        l.inner = dim.extent;
        l.inner_strides = dim.strides;
      } else {
        l.outer.push_back(dim);
      }
    }
  }
  return l;
}

void force_rows(Layout& l) {
  if (!l.red.empty()) return;
  if (l.inner > 1) l.outer.push_back({l.inner, l.inner_strides, false});
  l.inner = 1;
  l.red.push_back({1, std::vector<int64_t>(l.buffers, 0), true});
}

Stmt Nest::wrap(Stmt body) const {
  std::vector<std::pair<std::string, Expr>> lets;
  Expr u = var(p_ + "u"), o = u, i0 = idx(0);
  if (blocks_ > 1) {
    lets.push_back({p_ + "o", u / idx(blocks_)});
    lets.push_back({p_ + "i0", Binary::make(BinaryOp::Mod, u, idx(blocks_)) * idx(block_)});
    o = var(p_ + "o");
    i0 = var(p_ + "i0");
  }
  // The digits of outer index o over the outer kept dims, then each buffer's offset from them.
  std::vector<Expr> digits(l_.outer.size());
  Expr rest = o;
  for (size_t d = l_.outer.size(); d-- > 0;) {
    digits[d] = d == 0 ? rest : Binary::make(BinaryOp::Mod, rest, idx(l_.outer[d].extent));
    if (d > 0) {
      std::string r = p_ + "q" + std::to_string(d);
      lets.push_back({r, rest / idx(l_.outer[d].extent)});
      rest = var(r);
    }
  }
  for (size_t b = 0; b < l_.buffers; ++b) {
    Expr base = idx(0);
    for (size_t d = 0; d < l_.outer.size(); ++d) base = plus(base, digits[d], l_.outer[d].strides[b]);
    if (!rows()) base = plus(base, i0, l_.inner_strides[b]);
    lets.push_back({p_ + "base" + (b ? std::to_string(b) : ""), base});
  }
  lets.push_back({p_ + "obase", rows() ? o : o * idx(l_.inner) + i0});
  if (!rows()) lets.push_back({p_ + "n", min_expr(idx(block_), idx(l_.inner) - i0)});
  for (auto it = lets.rbegin(); it != lets.rend(); ++it) body = LetStmt::make(it->first, it->second, body);
  return For::make(p_ + "u", var("begin"), var("end"), ForKind::Parallel, body);
}

Stmt emit_fold(const Nest& n, const Acc& acc, const Fold& f, const std::string& name) {
  return seq({n.over_lanes(acc.set(n, f.init)),
              n.over_reduced([&](const At& at, Expr k) { return acc.fold(n, f.op, f.term(at, k), name); })});
}

int64_t axis_of(const Node& node, int64_t axis, int64_t rank) {
  int64_t a = axis < 0 ? axis + rank : axis;
  TERRACE_CHECK(a >= 0 && a < std::max<int64_t>(rank, 1), InvalidModel, node.describe(), ": axis ", axis,
                " is out of range for rank ", rank);
  return a;
}
Shape reduced_shape(const Shape& s, const std::vector<bool>& mask, bool keepdims) {
  Shape out;
  for (size_t d = 0; d < s.size(); ++d) {
    if (!mask[d]) out.push_back(s[d]);
    else if (keepdims) out.push_back(1);
  }
  return out;
}

void finish(OpKernels& k, Kernel kernel, const Nest& nest, Stmt body) {
  if (nest.parallel_extent() == 0) return;  // nothing to compute
  kernel.f.body = nest.wrap(std::move(body));
  kernel.f.parallel_extent = nest.parallel_extent();
  kernel.f.work_per_iteration = nest.work_per_iteration();
  verify(kernel.f);
  k.calls.push_back({std::move(kernel.f), std::move(kernel.slots)});
}

// ---- fused elementwise ops ----

namespace {

// The signature of a fused group's one output, after checking its ops as kernels/lower does.
TensorSig group_result(const FusionGroup& g, const char* what, const Node& node) {
  TERRACE_CHECK(!g.ops.empty() && g.outputs.size() == 1, InvalidArgument, node.describe(), ": the fused ", what,
                " must have ops and one output");
  for (size_t i = 0; i < g.ops.size(); ++i) {
    TensorSig want = infer_result(g, int(i));
    TERRACE_CHECK(want == g.ops[i].result, InvalidArgument, g.ops[i].node.describe(), ": result recorded as ",
                  dtype_name(g.ops[i].result.dtype), shape_str(g.ops[i].result.shape), " but the op gives ",
                  dtype_name(want.dtype), shape_str(want.shape));
  }
  const int o = g.outputs[0];
  TERRACE_CHECK(o >= 0 && size_t(o) < g.ops.size(), InvalidArgument, node.describe(), ": the fused ", what,
                "'s output refers to missing op ", o);
  return g.ops[size_t(o)].result;
}

// Whether `s` broadcasts into `into` without growing it.
bool broadcasts_into(const Shape& s, const Shape& into) {
  Shape r = into;
  return try_broadcast(r, s) && r == into;
}

void check_operands(const FusionGroup& g, int skip, const Shape& into, const char* what, const Node& node,
                    std::vector<Shape>& shapes) {
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    if (int(i) == skip) continue;
    TERRACE_CHECK(broadcasts_into(g.inputs[i].shape, into), InvalidArgument, node.describe(), ": the fused ", what,
                  "'s input ", i, " of shape ", shape_str(g.inputs[i].shape), " does not broadcast into ",
                  shape_str(into));
    TERRACE_CHECK(g.inputs[i].dtype != DType::String, NotImplemented, node.describe(), ": a string input in the fused ",
                  what);
    shapes.push_back(g.inputs[i].shape);
  }
}

}  // namespace

Io::Io(const Node& node, const std::vector<OpInput>& in, const TensorSig* y, const ReductionFusion& fusion)
    : x_dtype_(in.at(0).sig.dtype) {
  const TensorSig& x = in[0].sig;
  if (fusion.prologue) {
    prologue_ = &*fusion.prologue;
    const TensorSig r = group_result(*prologue_, "prologue", node);
    TERRACE_CHECK(r == x, InvalidArgument, node.describe(), ": the fused prologue gives ", dtype_name(r.dtype),
                  shape_str(r.shape), " but input 0 is ", dtype_name(x.dtype), shape_str(x.shape));
    check_operands(*prologue_, -1, x.shape, "prologue", node, shapes_);
  }
  if (fusion.epilogue) {
    TERRACE_CHECK(y && y->shape == x.shape, NotImplemented, node.describe(),
                  ": tier 1 fuses an epilogue into Softmax, LogSoftmax and LayerNormalization only");
    epilogue_ = &*fusion.epilogue;
    operand_ = fusion.epilogue_operand;
    TERRACE_CHECK(operand_ >= 0 && size_t(operand_) < epilogue_->inputs.size() && epilogue_->inputs[size_t(operand_)] == *y,
                  InvalidArgument, node.describe(), ": the fused epilogue's input ", operand_,
                  " must be output 0 (", dtype_name(y->dtype), shape_str(y->shape), ")");
    const TensorSig r = group_result(*epilogue_, "epilogue", node);
    TERRACE_CHECK(r == *y, InvalidArgument, node.describe(), ": the fused epilogue gives ", dtype_name(r.dtype),
                  shape_str(r.shape), " but output 0 is ", dtype_name(y->dtype), shape_str(y->shape));
    check_operands(*epilogue_, operand_, x.shape, "epilogue", node, shapes_);
  }
}

void Io::add_buffers(Kernel& kern, int first_slot) {
  if (!prologue_) xb_ = kern.add("in0", x_dtype_, 0);
  int slot = first_slot;
  if (prologue_)
    for (size_t i = 0; i < prologue_->inputs.size(); ++i)
      pro_.push_back(kern.add("pro" + std::to_string(i), prologue_->inputs[i].dtype, slot++));
  if (epilogue_)
    for (size_t i = 0; i < epilogue_->inputs.size(); ++i)
      if (int(i) != operand_) epi_.push_back(kern.add("epi" + std::to_string(i), epilogue_->inputs[i].dtype, slot++));
}

Expr Io::x(const At& at, DType t) const {
  if (!prologue_) return load_as(xb_, at.x(), t);
  return Cast::make(t, eval(*prologue_, pro_, 1, at, -1, Expr()));
}

Stmt Io::store_y(const Buffer& yb, const At& at, Expr v) const {
  if (epilogue_) v = Cast::make(yb.dtype, eval(*epilogue_, epi_, 1 + pro_.size(), at, operand_, v));
  return Store::make(yb, at.x(), v);
}

// The group's output at `at`: its inputs loaded from buffers (layout buffers first, first + 1, ...)
// except input `bound`, which is `bound_value`; each op as kernels/lower computes it.
Expr Io::eval(const FusionGroup& g, const std::vector<Buffer>& buffers, size_t first, const At& at, int bound,
              Expr bound_value) const {
  std::vector<OperandValue> inputs;
  size_t j = 0;
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    const DType t = g.inputs[i].dtype;
    Expr v = int(i) == bound ? bound_value : Load::make(buffers[j], at.off[first + j]);
    if (int(i) != bound) ++j;
    inputs.push_back({Cast::make(compute_type(t), v), t});
  }
  std::vector<Expr> results;
  for (const FusedOp& op : g.ops) {
    std::vector<OperandValue> args;
    for (const Operand& o : op.operands) {
      switch (o.kind) {
        case Operand::Kind::Input: args.push_back(inputs[size_t(o.index)]); break;
        case Operand::Kind::Result: args.push_back({results[size_t(o.index)], g.ops[size_t(o.index)].result.dtype}); break;
        case Operand::Kind::Constant: {
          const Tensor& c = g.constants[size_t(o.index)];
          TERRACE_CHECK(c.numel() == 1, NotImplemented, op.node.describe(),
                        ": constants with more than one element must be group inputs");
          args.push_back({make_const(compute_type(c.dtype()), c.get_as_double(0)), c.dtype()});
          break;
        }
        case Operand::Kind::Absent: args.push_back({}); break;
      }
    }
    Expr v = lower_elementwise(op.node, args);
    // The interpreter stores each 16-bit result, rounding it; so does the fused kernel.
    const DType t = op.result.dtype;
    if (compute_type(t) != t) v = Cast::make(compute_type(t), Cast::make(t, v));
    results.push_back(v);
  }
  return results[size_t(g.outputs[0])];
}

}  // namespace terrace::kernels::reduce
