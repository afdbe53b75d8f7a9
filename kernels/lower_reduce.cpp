// Reductions lowered to kernels (kernels/lower_op.h): the Reduce* ops, ArgMax/ArgMin and the
// global pools here, Softmax/LogSoftmax/Hardmax and the Lp/Layer/Instance/MeanVariance normalizations
// in lower_normalize.cpp, over the loops of reduce_loops.h, with the interpreter's semantics
// (interp/ops/reduce.cpp, nn_pool.cpp).
// Float sums accumulate in double, as the interpreter does; max/min/arg compare in the input type
// (the same answers); exp runs in float32 for float32 inputs (the prelude's, within 2.5e-7).
#include "kernels/lower_reduce.h"

#include <algorithm>

#include "kernels/reduce_loops.h"

namespace terrace::kernels {
namespace reduce {
namespace {

// "" or why a dtype is not lowered.
std::string dtype_reason(Op op, DType t) {
  if (is_ieee(t)) return "";
  const bool ints_ok = op == Op::ReduceSum || op == Op::ReduceMean || op == Op::ReduceMax || op == Op::ReduceMin ||
                       op == Op::ReduceProd || op == Op::ReduceL1 || op == Op::ReduceSumSquare || op == Op::ArgMax ||
                       op == Op::ArgMin;
  if (ints_ok && is_integer(t)) return "";
  return std::string(op_name(op)) + " of " + dtype_name(t) +
         (is_float(t) ? ": tier 1 lowers float32 and float64 (16-bit floats round through double in the interpreter)"
                      : ": tier 1 lowers float32, float64" + std::string(ints_ok ? " and integers" : ""));
}
bool is_reduce_family(Op op) {
  switch (op) {
    case Op::ReduceSum: case Op::ReduceMean: case Op::ReduceMax: case Op::ReduceMin: case Op::ReduceProd:
    case Op::ReduceL1: case Op::ReduceL2: case Op::ReduceLogSum: case Op::ReduceLogSumExp:
    case Op::ReduceSumSquare:
      return true;
    default:
      return false;
  }
}
// The reduced-axis mask of a Reduce* node (reduce.cpp's reduced_axes).
std::vector<bool> reduce_mask(const Node& node, const std::vector<OpInput>& in, int64_t rank) {
  std::vector<int64_t> axes = node.attr_ints("axes", {});
  if (in.size() > 1 && !in[1].absent) {
    TERRACE_CHECK(in[1].value, NotImplemented, node.describe(),
                  ": its axes are known only at run time (tier 1 needs them constant)");
    axes = in[1].value->to_int64_vector();
  }
  if (axes.empty()) return std::vector<bool>(size_t(rank), node.attr_int("noop_with_empty_axes", 0) == 0);
  std::vector<bool> mask(size_t(rank), false);
  for (int64_t a : axes) {
    int64_t n = axis_of(node, a, rank);
    TERRACE_CHECK(!mask[size_t(n)], InvalidModel, node.describe(), ": axis ", a, " is repeated");
    mask[size_t(n)] = true;
  }
  return mask;
}
// ---- Reduce* and the global pools ----

// The reduced-axis mask of a Reduce* node or a global pool (every axis but N and C), and its
// output's shape.
std::vector<bool> reduce_or_pool_mask(const Node& node, const std::vector<OpInput>& in, Shape& out_shape) {
  const Shape& x = in.at(0).sig.shape;
  const int64_t rank = int64_t(x.size());
  if (node.op == Op::GlobalAveragePool || node.op == Op::GlobalMaxPool || node.op == Op::GlobalLpPool) {
    TERRACE_CHECK(rank >= 3, InvalidArgument, node.describe(), ": input X must have rank >= 3, got ", rank);
    std::vector<bool> mask(size_t(rank), true);
    mask[0] = mask[1] = false;
    out_shape = reduced_shape(x, mask, true);
    return mask;
  }
  std::vector<bool> mask = reduce_mask(node, in, rank);
  out_shape = reduced_shape(x, mask, node.attr_int("keepdims", 1) != 0);
  return mask;
}

// The fold of a Reduce* op or global pool over elements of type t accumulated in a (its terms
// read the input through `io`, which must outlive the fold).
Fold reduce_fold(const Node& node, DType t, DType a, Io& io) {
  const Op op = node.op;
  auto elem = [&io](DType as) { return [&io, as](const At& at, Expr) { return io.x(at, as); }; };
  Fold f;
  f.type = a;
  f.init = make_zero(a);
  f.op = FoldOp::Add;
  f.term = elem(a);
  if (op == Op::ReduceMax || op == Op::ReduceMin || op == Op::GlobalMaxPool) {
    const bool is_max = op != Op::ReduceMin;
    f.type = is_float(t) ? t : a;  // a float max is exact in its own type
    f.init = is_max ? lowest(f.type) : highest(f.type);
    f.term = elem(f.type);
    f.op = is_max ? FoldOp::MaxNaN : FoldOp::MinNaN;
  } else if (op == Op::ReduceProd) {
    f.init = make_one(a);
    f.op = FoldOp::Mul;
  } else if (op == Op::GlobalLpPool) {
    // sum(|x|^p)^(1/p) in double, as the interpreter's lp_pool (p 1 and 2 without pow).
    const int64_t p = node.attr_int("p", 2);
    TERRACE_CHECK(p > 0, InvalidModel, node.describe(), ": attribute 'p' must be > 0, got ", p);
    f.term = [&io, a, p](const At& at, Expr) {
      Expr v = Call::make(Intrinsic::Abs, {io.x(at, a)});
      return p == 1 ? v : p == 2 ? v * v : Call::make(Intrinsic::Pow, {v, f64(double(p))});
    };
  } else if (op == Op::ReduceSumSquare || op == Op::ReduceL2) {
    f.term = [&io, a](const At& at, Expr) {
      Expr v = io.x(at, a);
      return v * v;
    };
  } else if (op == Op::ReduceL1) {
    f.term = [&io, a](const At& at, Expr) {
      Expr v = io.x(at, a);
      return Select::make(Compare::make(CmpOp::LT, v, make_zero(a)), make_zero(a) - v, v);
    };
  }
  return f;
}

// The output element of a reduction from its folded value v (in a) over `count` elements.
Expr reduce_result(const Node& node, DType t, DType a, Expr v, double count) {
  switch (node.op) {
    case Op::ReduceL2: return Call::make(Intrinsic::Sqrt, {v});
    case Op::ReduceLogSum: return Call::make(Intrinsic::Log, {v});
    case Op::ReduceMean:
      if (is_float(t)) return v / f64(count);
      return count == 0 ? make_zero(a) : v / IntImm::make(a, int64_t(count));
    case Op::GlobalAveragePool: return count == 0 ? f64(0) : v / f64(count);
    case Op::GlobalLpPool: {
      const int64_t p = node.attr_int("p", 2);
      return p == 1 ? v : p == 2 ? Call::make(Intrinsic::Sqrt, {v}) : Call::make(Intrinsic::Pow, {v, f64(1.0 / double(p))});
    }
    default: return v;
  }
}

// ReduceLogSumExp: log(sum(exp(x - m))) + m with m the maximum (0 where it is not finite), as the
// interpreter; `f` is the sum's fold, whose term this sets.
Stmt log_sum_exp(const Nest& nest, Io& io, const Buffer& yb, DType t, DType a, Fold f) {
  const Acc acc = make_acc(nest, "acc", f.type);
  const Acc mx = make_acc(nest, "mx", t);
  Fold fm{t, lowest(t), [&io, t](const At& at, Expr) { return io.x(at, t); }, FoldOp::MaxNaN};
  Expr mv = mx.at(nest);
  Expr finite = Unary::make(UnaryOp::Not, Binary::make(BinaryOp::Or, Call::make(Intrinsic::IsNaN, {mv}),
                                                       Call::make(Intrinsic::IsInf, {mv})));
  Stmt fix = nest.over_lanes(mx.set(nest, Select::make(finite, mv, make_zero(t))));
  f.term = [&io, &nest, t, a, mx](const At& at, Expr) {
    Expr e = Call::make(Intrinsic::Exp, {io.x(at, t) - mx.at(nest)});
    return Cast::make(a, e);
  };
  Stmt rest = seq({emit_fold(nest, acc, f, "s"),
                   nest.over_lanes(Store::make(yb, nest.obase() + nest.lane(),
                                               Cast::make(t, Call::make(Intrinsic::Log, {acc.at(nest)}) +
                                                                 Cast::make(a, mx.at(nest)))))});
  return mx.wrap(seq({emit_fold(nest, mx, fm, "m"), fix, acc.wrap(rest)}));
}

OpKernels lower_reduce_op(const Node& node, const std::vector<OpInput>& in, const std::string& name,
                          const ReductionFusion& fusion) {
  const DType t = in.at(0).sig.dtype;
  Shape out_shape;
  const std::vector<bool> mask = reduce_or_pool_mask(node, in, out_shape);
  OpKernels k;
  k.outputs.push_back({t, out_shape});
  if (shape_numel(out_shape) == 0) return k;

  Io io(node, in, nullptr, fusion);
  const Layout l = make_layout(in.at(0).sig.shape, mask, io.operand_shapes());
  const Nest nest(l, "");
  Kernel kern;
  kern.f.name = name;
  const Buffer yb = kern.add("out0", t, int(in.size()));
  io.add_buffers(kern, int(in.size() + node.outputs.size()));
  const DType a = acc_type(t);
  const Fold f = reduce_fold(node, t, a, io);
  Stmt body;
  if (node.op == Op::ReduceLogSumExp) {
    body = log_sum_exp(nest, io, yb, t, a, f);
  } else {
    const Acc acc = make_acc(nest, "acc", f.type);
    const Expr result = reduce_result(node, t, a, acc.at(nest), double(l.red_count));
    Stmt store = nest.over_lanes(Store::make(yb, nest.obase() + nest.lane(), Cast::make(t, result)));
    body = acc.wrap(seq({emit_fold(nest, acc, f, "r"), store}));
  }
  finish(k, std::move(kern), nest, seq({body}));
  return k;
}
// ---- ArgMax / ArgMin ----

OpKernels lower_arg(const Node& node, const std::vector<OpInput>& in, const std::string& name,
                    const ReductionFusion& fusion) {
  const TensorSig& x = in.at(0).sig;
  const int64_t rank = int64_t(x.shape.size());
  const int64_t axis = axis_of(node, node.attr_int("axis", 0), rank);
  const bool keepdims = node.attr_int("keepdims", 1) != 0;
  const bool last = node.attr_int("select_last_index", 0) != 0;
  const bool is_max = node.op == Op::ArgMax;
  TERRACE_CHECK(rank == 0 || x.shape[size_t(axis)] > 0, InvalidArgument, node.describe(),
                ": cannot take the arg-extreme of an empty axis");
  std::vector<bool> mask(size_t(rank), false);
  if (rank > 0) mask[size_t(axis)] = true;
  OpKernels k;
  k.outputs.push_back({DType::Int64, reduced_shape(x.shape, mask, keepdims)});
  if (shape_numel(k.outputs[0].shape) == 0) return k;

  Io io(node, in, nullptr, fusion);
  const Layout l = make_layout(x.shape, mask, io.operand_shapes());
  const Nest nest(l, "");
  Kernel kern;
  kern.f.name = name;
  const Buffer yb = kern.add("out0", DType::Int64, int(in.size()));
  io.add_buffers(kern, int(in.size() + node.outputs.size()));
  const DType t = is_float(x.dtype) ? x.dtype : acc_type(x.dtype);
  const int64_t len = rank == 0 ? 1 : x.shape[size_t(axis)];
  // Two passes, each vectorisable: the extreme m (NaN if any element is), then the first index
  // holding it (the last, with select_last_index), or the first NaN: the interpreter's scan stops
  // at the first NaN and otherwise takes the first (last) of equal extremes.
  const Acc best = make_acc(nest, "best", t), index = make_acc(nest, "at", DType::Int64),
            nan_at = make_acc(nest, "nan_at", DType::Int64);
  auto elem = [&](const At& at, Expr) { return io.x(at, t); };
  Fold fm{t, is_max ? lowest(t) : highest(t), elem, is_max ? FoldOp::MaxNaN : FoldOp::MinNaN};
  const bool floats = is_float(t);
  Expr m = best.at(nest);
  Fold fi{DType::Int64, last ? idx(-1) : idx(len),
          [&, m](const At& at, Expr k) {
            Expr v = io.x(at, t);
            Expr match = Compare::make(CmpOp::EQ, v, m);
            if (floats && !last) match = Binary::make(BinaryOp::Or, match, Compare::make(CmpOp::NE, v, v));
            return Select::make(match, k, last ? idx(-1) : idx(len));
          },
          last ? FoldOp::LastIndex : FoldOp::FirstIndex};
  std::vector<Stmt> body{emit_fold(nest, best, fm, "m"), emit_fold(nest, index, fi, "i")};
  Expr result = index.at(nest);
  if (floats && last) {
    Fold fn{DType::Int64, idx(len),
            [&](const At& at, Expr k) {
              Expr v = io.x(at, t);
              return Select::make(Compare::make(CmpOp::NE, v, v), k, idx(len));
            },
            FoldOp::FirstIndex};
    body.push_back(emit_fold(nest, nan_at, fn, "n"));
    result = Select::make(Compare::make(CmpOp::NE, m, m), nan_at.at(nest), result);
  }
  body.push_back(nest.over_lanes(Store::make(yb, nest.obase() + nest.lane(), result)));
  finish(k, std::move(kern), nest, best.wrap(index.wrap(nan_at.wrap(seq(std::move(body))))));
  return k;
}

}  // namespace
}  // namespace reduce

using namespace reduce;

bool is_reduction_op(Op op) {
  return is_reduce_family(op) || op == Op::ArgMax || op == Op::ArgMin || op == Op::Softmax ||
         op == Op::LogSoftmax || op == Op::Hardmax || op == Op::LpNormalization || op == Op::LayerNormalization || op == Op::InstanceNormalization ||
         op == Op::MeanVarianceNormalization || op == Op::GlobalAveragePool || op == Op::GlobalMaxPool ||
         op == Op::GlobalLpPool;
}

std::string can_lower_reduction(const Graph& g, const Node& node) {
  if (!is_reduction_op(node.op)) return std::string("tier 1 has no kernel for ") + op_name(node.op);
  if (node.inputs.empty() || node.inputs[0] < 0) return node.describe() + " has no input";
  const ValueInfo& xi = g.values[size_t(node.inputs[0])].info;
  if (xi.kind != ValueKind::Tensor || !xi.dtype) return "input '" + g.values[size_t(node.inputs[0])].name + "' has no known tensor dtype";
  const DType t = *xi.dtype;
  if (std::string why = dtype_reason(node.op, t); !why.empty()) return why;
  if (is_reduce_family(node.op) && node.inputs.size() > 1 && node.inputs[1] >= 0 &&
      !known_at_compile_time(g, node.inputs[1]))
    return std::string(op_name(node.op)) + " with axes computed at run time: tier 1 needs them constant";
  if (node.op == Op::InstanceNormalization) {
    for (size_t i = 1; i < node.inputs.size() && i < 3; ++i) {
      if (node.inputs[i] < 0) continue;
      const ValueInfo& pi = g.values[size_t(node.inputs[i])].info;
      if (!pi.dtype || !is_ieee(*pi.dtype)) return "InstanceNormalization with a scale or B that is not float32/float64";
    }
  }
  if (node.op == Op::LayerNormalization) {
    DType stash = DType::Float32;
    if (!dtype_from_onnx(int(node.attr_int("stash_type", 1)), &stash) || !is_ieee(stash))
      return "LayerNormalization with a stash_type other than float32 or float64";
    for (size_t i = 1; i < node.inputs.size() && i < 3; ++i) {
      if (node.inputs[i] < 0) continue;
      const ValueInfo& pi = g.values[size_t(node.inputs[i])].info;
      if (!pi.dtype || !is_ieee(*pi.dtype)) return "LayerNormalization with a Scale or B that is not float32/float64";
    }
  }
  return "";
}

OpKernels lower_reduction(const Node& node, const std::vector<OpInput>& inputs, const std::string& name,
                          int opset, const ReductionFusion& fusion) {
  TERRACE_CHECK(!inputs.empty() && !inputs[0].absent, InvalidModel, node.describe(), ": input 0 is required");
  const DType t = inputs[0].sig.dtype;
  if (std::string why = dtype_reason(node.op, t); !why.empty()) fail(ErrorCode::NotImplemented, node.describe(), ": ", why);
  switch (node.op) {
    case Op::ArgMax: case Op::ArgMin: return lower_arg(node, inputs, name, fusion);
    case Op::Softmax: case Op::LogSoftmax: return lower_softmax(node, inputs, name, opset, fusion);
    case Op::Hardmax: return lower_hardmax(node, inputs, name, opset, fusion);
    case Op::LpNormalization: return lower_lp_norm(node, inputs, name, fusion);
    case Op::LayerNormalization: return lower_layer_norm(node, inputs, name, fusion);
    case Op::InstanceNormalization: return lower_instance_norm(node, inputs, name, fusion);
    case Op::MeanVarianceNormalization: return lower_mvn(node, inputs, name, fusion);
    default:
      if (is_reduce_family(node.op) || node.op == Op::GlobalAveragePool || node.op == Op::GlobalMaxPool ||
          node.op == Op::GlobalLpPool)
        return lower_reduce_op(node, inputs, name, fusion);
  }
  fail(ErrorCode::NotImplemented, node.describe(), ": tier 1 has no kernel for ", op_name(node.op));
}

OpKernels lower_reduction(const Node& node, const std::vector<OpInput>& inputs, const std::string& name,
                          int opset) {
  return lower_reduction(node, inputs, name, opset, ReductionFusion{});
}

OpKernels lower_reduction(const Node& node, const std::vector<OpInput>& inputs, const std::string& name) {
  return lower_reduction(node, inputs, name, 17, ReductionFusion{});
}

}  // namespace terrace::kernels
