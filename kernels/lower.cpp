// lower(): fusion group -> loop nest. Signatures are checked first, then the iteration domain is
// collapsed, then the body binds each loaded input and each op result once and stores the outputs.
#include "kernels/lower.h"

#include <algorithm>

#include <cctype>
#include <optional>

#include "kernels/elementwise_ops.h"
#include "kernels/verify.h"

namespace terrace::kernels {
namespace {

// ---- signatures ----

TensorSig operand_sig(const FusionGroup& g, const FusedOp& op, const Operand& o) {
  switch (o.kind) {
    case Operand::Kind::Input:
      TERRACE_CHECK(o.index >= 0 && size_t(o.index) < g.inputs.size(), InvalidArgument,
                    op.node.describe(), ": operand refers to missing group input ", o.index);
      return g.inputs[size_t(o.index)];
    case Operand::Kind::Result:
      TERRACE_CHECK(o.index >= 0 && size_t(o.index) < g.ops.size() && &g.ops[size_t(o.index)] < &op,
                    InvalidArgument, op.node.describe(), ": operand refers to op ", o.index,
                    ", which does not come earlier");
      return g.ops[size_t(o.index)].result;
    case Operand::Kind::Constant: {
      TERRACE_CHECK(o.index >= 0 && size_t(o.index) < g.constants.size(), InvalidArgument,
                    op.node.describe(), ": operand refers to missing constant ", o.index);
      const Tensor& t = g.constants[size_t(o.index)];
      TERRACE_CHECK(t.numel() == 1, NotImplemented, op.node.describe(),
                    ": constants with more than one element must be group inputs");
      return {t.dtype(), t.shape()};
    }
    case Operand::Kind::Absent: break;
  }
  return {};
}

// Numpy broadcasting of `b` into `a`; InvalidArgument naming the node when they do not broadcast.
void broadcast_into(Shape& a, const Shape& b, const Node& node) {
  TERRACE_CHECK(try_broadcast(a, b), InvalidArgument, node.describe(), ": shapes do not broadcast (",
                shape_str(a), " and ", shape_str(b), ")");
}

// Operand values standing for nothing but their dtype: enough to ask the op's type rule.
std::vector<OperandValue> typed_placeholders(const std::vector<std::optional<DType>>& dtypes) {
  std::vector<OperandValue> out;
  for (const auto& t : dtypes) {
    if (t && *t != DType::String) out.push_back({Var::make(compute_type(*t), "_"), *t});
    else if (t) out.push_back({Var::make(DType::Int64, "_"), *t});  // rejected by the type rule
    else out.push_back({});
  }
  return out;
}

// ---- iteration domain ----

// Strides (elements) reading a row-major tensor of `shape` over `domain`: 0 on broadcast dims.
// A buffer of higher rank than the domain is never read (CastLike's dtype-only operand, whose
// shape takes no part in the domain): its extra leading dims get no stride.
std::vector<int64_t> strides_over(const Shape& shape, const Shape& domain) {
  std::vector<int64_t> s(domain.size(), 0);
  int64_t step = 1;
  for (size_t i = 0; i < std::min(shape.size(), domain.size()); ++i) {
    size_t src = shape.size() - 1 - i, dst = domain.size() - 1 - i;
    if (shape[src] != 1) s[dst] = step;
    step *= shape[src];
  }
  return s;
}

// The domain after dropping unit dims and merging dims that are contiguous for every buffer.
struct LoopDims {
  Shape extents;
  std::vector<std::vector<int64_t>> strides;  // per buffer, per collapsed dim
};

LoopDims collapse(const Shape& domain, const std::vector<std::vector<int64_t>>& strides) {
  LoopDims out;
  out.strides.resize(strides.size());
  if (shape_numel(domain) == 0) {  // nothing to compute; one empty loop
    out.extents = {0};
    for (auto& s : out.strides) s = {0};
    return out;
  }
  for (size_t d = 0; d < domain.size(); ++d) {
    if (domain[d] == 1) continue;
    bool merge = !out.extents.empty();
    for (size_t b = 0; b < strides.size() && merge; ++b)
      merge = out.strides[b].back() == strides[b][d] * domain[d];
    for (size_t b = 0; b < strides.size(); ++b) {
      if (merge) out.strides[b].back() = strides[b][d];
      else out.strides[b].push_back(strides[b][d]);
    }
    if (merge) out.extents.back() *= domain[d];
    else out.extents.push_back(domain[d]);
  }
  if (out.extents.empty()) {  // a scalar domain
    out.extents = {1};
    for (auto& s : out.strides) s = {0};
  }
  return out;
}

std::string c_identifier(const std::string& name) {
  std::string s = name.empty() ? "fused" : name;
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  if (std::isdigit(static_cast<unsigned char>(s[0]))) s = "k_" + s;
  return s;
}

Expr var(const std::string& name) { return Var::make(DType::Int64, name); }

// The loop nest: one Parallel loop when the collapsed domain has one dim; otherwise a Parallel
// loop over the flattened outer dims (decomposed into per-dim indices) around a Vectorized inner
// loop. Gives each dim's index expression and each buffer's element offset.
class LoopNest {
 public:
  explicit LoopNest(LoopDims dims) : dims_(std::move(dims)) {
    size_t k = dims_.extents.size();
    if (k == 1) {
      index_ = {var("i")};
      return;
    }
    // Outer loop var "o" runs over the product of dims 0..k-2; d<j> is the index of dim j.
    Expr rest = var("o");
    for (size_t d = k - 1; d-- > 1;) {
      std::string name = "d" + std::to_string(d);
      outer_lets_.push_back({name, Binary::make(BinaryOp::Mod, rest, make_index(dims_.extents[d]))});
      outer_lets_.push_back({"r" + std::to_string(d), rest / make_index(dims_.extents[d])});
      rest = var("r" + std::to_string(d));
    }
    index_.resize(k);
    index_[0] = rest;
    for (size_t d = 1; d + 1 < k; ++d) index_[d] = var("d" + std::to_string(d));
    index_[k - 1] = var("i");
  }

  // Offset of buffer b's element at the current iteration; base offsets are bound per outer
  // iteration so the inner loop only adds i * stride.
  Expr offset(size_t b) {
    size_t k = dims_.extents.size();
    const auto& s = dims_.strides[b];
    Expr inner = term(index_[k - 1], s[k - 1]);
    if (k == 1) return inner.defined() ? inner : make_index(0);
    Expr base;
    for (size_t d = 0; d + 1 < k; ++d) base = sum(base, term(index_[d], s[d]));
    if (base.defined()) {
      std::string name = "base" + std::to_string(b);
      outer_lets_.push_back({name, base});
      base = var(name);
    }
    Expr off = sum(base, inner);
    return off.defined() ? off : make_index(0);
  }

  // True at the iterations where every dim with stride 0 for buffer b has index 0.
  Expr first_along_broadcast_dims(size_t b) const {
    Expr cond;
    for (size_t d = 0; d < dims_.extents.size(); ++d) {
      if (dims_.strides[b][d] != 0 || dims_.extents[d] == 1) continue;
      Expr at0 = Compare::make(CmpOp::EQ, index_[d], make_index(0));
      cond = cond.defined() ? Binary::make(BinaryOp::And, cond, at0) : at0;
    }
    return cond;
  }

  Stmt wrap(Stmt inner_body) const {
    size_t k = dims_.extents.size();
    if (k == 1) return For::make("i", var("begin"), var("end"), ForKind::Parallel, inner_body);
    Stmt s = For::make("i", make_index(0), make_index(dims_.extents[k - 1]), ForKind::Vectorized,
                       inner_body);
    for (auto it = outer_lets_.rbegin(); it != outer_lets_.rend(); ++it)
      s = LetStmt::make(it->first, it->second, s);
    return For::make("o", var("begin"), var("end"), ForKind::Parallel, s);
  }

  int64_t parallel_extent() const {
    int64_t n = 1;
    for (size_t d = 0; d + 1 < dims_.extents.size(); ++d) n *= dims_.extents[d];
    return dims_.extents.size() == 1 ? dims_.extents[0] : n;
  }
  int64_t work_per_iteration() const {
    return dims_.extents.size() == 1 ? 1 : std::max<int64_t>(1, dims_.extents.back());
  }

 private:
  static Expr term(const Expr& index, int64_t stride) {
    if (stride == 0) return Expr();
    return stride == 1 ? index : index * make_index(stride);
  }
  static Expr sum(const Expr& a, const Expr& b) {
    if (!a.defined()) return b;
    if (!b.defined()) return a;
    return a + b;
  }

  LoopDims dims_;
  std::vector<Expr> index_;
  std::vector<std::pair<std::string, Expr>> outer_lets_;
};

// Checks the group's references and result signatures; returns the iteration domain.
Shape check_group(const FusionGroup& g) {
  TERRACE_CHECK(!g.ops.empty(), InvalidArgument, "fusion group ", g.name, " has no ops");
  TERRACE_CHECK(!g.outputs.empty(), InvalidArgument, "fusion group ", g.name, " has no outputs");
  for (const TensorSig& in : g.inputs)
    TERRACE_CHECK(in.dtype != DType::String, NotImplemented, "fusion group ", g.name, ": string input");
  Shape domain;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    TensorSig want = infer_result(g, int(i));
    TERRACE_CHECK(want == g.ops[i].result, InvalidArgument, g.ops[i].node.describe(),
                  ": result recorded as ", dtype_name(g.ops[i].result.dtype),
                  shape_str(g.ops[i].result.shape), " but the op gives ", dtype_name(want.dtype),
                  shape_str(want.shape));
    broadcast_into(domain, want.shape, g.ops[i].node);
  }
  for (int o : g.outputs)
    TERRACE_CHECK(o >= 0 && size_t(o) < g.ops.size(), InvalidArgument, "fusion group ", g.name,
                  ": output refers to missing op ", o);
  return domain;
}

// x for an op computing x * sigmoid(x) (either order) in float32 or float64, which lowers to one
// silu call: a multiply and a rounding fewer. The sigmoid keeps its own binding, which the
// compiler drops when nothing else reads it. 16-bit types keep the two ops: the interpreter
// rounds the sigmoid to 16 bits between them.
std::optional<Operand> silu_argument(const FusionGroup& g, const FusedOp& op) {
  const DType t = op.result.dtype;
  if (op.node.op != Op::Mul || op.operands.size() != 2 || (t != DType::Float32 && t != DType::Float64))
    return std::nullopt;
  for (int k = 0; k < 2; ++k) {
    const Operand& s = op.operands[size_t(k)];
    const Operand& x = op.operands[size_t(1 - k)];
    if (s.kind != Operand::Kind::Result) continue;
    const FusedOp& sig = g.ops[size_t(s.index)];
    if (sig.node.op != Op::Sigmoid || sig.operands.size() != 1 || sig.result.dtype != t) continue;
    const Operand& arg = sig.operands[0];
    if (arg.kind == x.kind && arg.index == x.index) return x;
  }
  return std::nullopt;
}

}  // namespace

bool try_broadcast(Shape& a, const Shape& b) {
  Shape r = a;
  if (b.size() > r.size()) r.insert(r.begin(), b.size() - r.size(), 1);
  size_t off = r.size() - b.size();
  for (size_t i = 0; i < b.size(); ++i) {
    int64_t& d = r[off + i];
    if (d != b[i] && d != 1 && b[i] != 1) return false;
    if (d == 1) d = b[i];
  }
  a = std::move(r);
  return true;
}

bool can_lower(const Node& node, std::span<const DType> input_dtypes) {
  if (std::string(op_family(node.op)) != "elementwise") return false;
  if (node.outputs.size() != 1 || input_dtypes.size() < node.inputs.size()) return false;
  // Integer Div and Mod by zero raise InvalidArgument in the interpreter; a kernel cannot raise,
  // it would write 0. Until a guard checks divisors, they stay in the interpreter.
  if ((node.op == Op::Div || node.op == Op::Mod) && !input_dtypes.empty() &&
      is_integer(input_dtypes[0]))
    return false;
  std::vector<std::optional<DType>> dtypes;
  for (size_t i = 0; i < node.inputs.size(); ++i)
    dtypes.push_back(node.inputs[i] >= 0 ? std::optional(input_dtypes[i]) : std::nullopt);
  try {
    lower_elementwise(node, typed_placeholders(dtypes));
    return true;
  } catch (const Error& e) {
    if (e.code() == ErrorCode::Internal) throw;
    return false;
  }
}

TensorSig infer_result(const FusionGroup& group, int op_index) {
  const FusedOp& op = group.ops.at(size_t(op_index));
  std::vector<std::optional<DType>> dtypes;
  Shape shape;
  for (const Operand& o : op.operands) {
    if (o.kind == Operand::Kind::Absent) {
      dtypes.push_back(std::nullopt);
      continue;
    }
    TensorSig s = operand_sig(group, op, o);
    dtypes.push_back(s.dtype);
    // CastLike's second operand gives only its dtype: its shape (even an empty one) takes no part.
    if (op.node.op == Op::CastLike && dtypes.size() == 2) continue;
    broadcast_into(shape, s.shape, op.node);
  }
  return {elementwise_result_dtype(op.node, typed_placeholders(dtypes)), shape};
}

LoweredFunc lower(const FusionGroup& g) {
  Shape domain = check_group(g);
  LoweredFunc f;
  f.name = c_identifier(g.name);
  std::vector<std::vector<int64_t>> strides;
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    f.buffers.push_back({"in" + std::to_string(i), g.inputs[i].dtype, int(i)});
    strides.push_back(strides_over(g.inputs[i].shape, domain));
  }
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    const TensorSig& sig = g.ops[size_t(g.outputs[i])].result;
    f.buffers.push_back({"out" + std::to_string(i), sig.dtype, int(g.inputs.size() + i)});
    strides.push_back(strides_over(sig.shape, domain));
  }
  LoopNest nest(collapse(domain, strides));

  // The inner body: bindings of loaded inputs and op results, innermost last.
  std::vector<std::pair<std::string, Expr>> lets;
  std::vector<Expr> loaded(g.inputs.size());
  auto value_of = [&](const Operand& o) -> OperandValue {
    switch (o.kind) {
      case Operand::Kind::Input: {
        Expr& v = loaded[size_t(o.index)];
        DType t = g.inputs[size_t(o.index)].dtype;
        if (!v.defined()) {
          std::string name = "x" + std::to_string(o.index);
          Expr load = Load::make(f.buffers[size_t(o.index)], nest.offset(size_t(o.index)));
          lets.push_back({name, Cast::make(compute_type(t), load)});
          v = Var::make(compute_type(t), name);
        }
        return {v, t};
      }
      case Operand::Kind::Result: {
        DType t = g.ops[size_t(o.index)].result.dtype;
        return {Var::make(compute_type(t), "v" + std::to_string(o.index)), t};
      }
      case Operand::Kind::Constant: {
        const Tensor& c = g.constants[size_t(o.index)];
        return {make_const(compute_type(c.dtype()), c.get_as_double(0)), c.dtype()};
      }
      case Operand::Kind::Absent: break;
    }
    return {};
  };
  for (size_t i = 0; i < g.ops.size(); ++i) {
    std::vector<OperandValue> args;
    for (const Operand& o : g.ops[i].operands) args.push_back(value_of(o));
    std::optional<Operand> silu = silu_argument(g, g.ops[i]);
    Expr v = silu ? Call::make(Intrinsic::Silu, {value_of(*silu).value})
                  : lower_elementwise(g.ops[i].node, args);
    // The interpreter stores each 16-bit result, rounding it; so does the fused kernel.
    DType t = g.ops[i].result.dtype;
    if (compute_type(t) != t) v = Cast::make(compute_type(t), Cast::make(t, v));
    lets.push_back({"v" + std::to_string(i), v});
  }
  std::vector<Stmt> stores;
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    size_t b = g.inputs.size() + i;
    int op = g.outputs[i];
    DType t = g.ops[size_t(op)].result.dtype;
    Expr value = Cast::make(t, Var::make(compute_type(t), "v" + std::to_string(op)));
    Stmt store = Store::make(f.buffers[b], nest.offset(b), value);
    Expr first = nest.first_along_broadcast_dims(b);
    stores.push_back(first.defined() ? IfThenElse::make(first, store) : store);
  }
  Stmt body = Block::make(std::move(stores));
  for (auto it = lets.rbegin(); it != lets.rend(); ++it) body = LetStmt::make(it->first, it->second, body);
  f.body = nest.wrap(body);
  f.parallel_extent = nest.parallel_extent();
  f.work_per_iteration = nest.work_per_iteration();
  verify(f);
  return f;
}

}  // namespace terrace::kernels
