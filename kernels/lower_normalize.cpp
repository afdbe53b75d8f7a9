// Normalisations lowered to kernels (kernels/lower_op.h): Softmax and LogSoftmax (three passes
// over each lane: the maximum, the sum of exp(x - max) in double, the scaled write) and
// LayerNormalization (mean and variance in double, in two passes, then the affine write), with the
// interpreter's semantics (interp/ops/reduce_softmax.cpp, nn_norm.cpp).
#include "kernels/reduce_loops.h"

namespace terrace::kernels::reduce {

OpKernels lower_softmax(const Node& node, const std::vector<OpInput>& in, const std::string& name, int opset,
                        const ReductionFusion& fusion) {
  const TensorSig& x = in.at(0).sig;
  const DType t = x.dtype;
  const int64_t rank = int64_t(x.shape.size());
  const bool legacy = opset < 13;
  const int64_t axis = axis_of(node, node.attr_int("axis", legacy ? 1 : -1), rank);
  std::vector<bool> mask(size_t(rank), false);
  for (int64_t d = axis; d < (legacy ? rank : std::min(axis + 1, rank)); ++d) mask[size_t(d)] = true;
  OpKernels k;
  k.outputs.push_back({t, x.shape});
  if (shape_numel(x.shape) == 0) return k;
  Io io(node, in, &k.outputs[0], fusion);
  const Layout l = make_layout(x.shape, mask, io.operand_shapes());
  const Nest nest(l, "");
  Kernel kern;
  kern.f.name = name;
  const Buffer yb = kern.add("out0", t, int(in.size()));
  io.add_buffers(kern, int(in.size() + node.outputs.size()));
  const bool log = node.op == Op::LogSoftmax;
  const Acc mx = make_acc(nest, "mx", t), sum = make_acc(nest, "sum", DType::Float64);
  Fold fm{t, lowest(t), [&](const At& at, Expr) { return io.x(at, t); }, fold_max_no_nan, fold_max_no_nan, false};
  auto z = [&](const At& at) { return io.x(at, t) - mx.at(nest); };
  // The sum of exp(x - max) in double; softmax keeps each exp in Y for the scaling pass.
  Stmt sum_pass = seq({nest.over_lanes(sum.set(nest, f64(0))),
                       nest.over_reduced([&](const At& at, Expr) {
                         Expr e = Call::make(Intrinsic::Exp, {z(at)});
                         Stmt add = sum.set(nest, sum.at(nest) + Cast::make(DType::Float64, e));
                         if (log) return add;
                         return LetStmt::make("e", e, seq({Store::make(yb, at.x(), Var::make(t, "e")),
                                                           sum.set(nest, sum.at(nest) + Cast::make(DType::Float64, Var::make(t, "e")))}));
                       })});
  // Per lane: the scale 1/sum (softmax) or log(sum) (log-softmax), in the input type.
  const Acc factor = make_acc(nest, "factor", t);
  Stmt factor_pass = nest.over_lanes(factor.set(
      nest, Cast::make(t, log ? Call::make(Intrinsic::Log, {sum.at(nest)}) : f64(1) / sum.at(nest))));
  Stmt write_pass = nest.over_reduced([&](const At& at, Expr) {
    Expr v = log ? z(at) - factor.at(nest) : Load::make(yb, at.x()) * factor.at(nest);
    return io.store_y(yb, at, v);
  });
  Stmt body = mx.wrap(seq({emit_fold(nest, mx, fm, "m"), sum.wrap(seq({sum_pass, factor.wrap(seq({factor_pass, write_pass}))}))}));
  finish(k, std::move(kern), nest, body);
  return k;
}

// ---- LayerNormalization ----

namespace {

// Offset into a parameter broadcast (unidirectionally) to `norm`, at flat index k of `norm`.
Expr param_index(const Node& node, const TensorSig& p, const Shape& norm, Expr k, const char* what) {
  TERRACE_CHECK(p.shape.size() <= norm.size(), InvalidArgument, node.describe(), ": ", what, " of shape ",
                shape_str(p.shape), " does not broadcast to ", shape_str(norm));
  const size_t off = norm.size() - p.shape.size();
  for (size_t d = 0; d < p.shape.size(); ++d)
    TERRACE_CHECK(p.shape[d] == 1 || p.shape[d] == norm[off + d], InvalidArgument, node.describe(), ": ", what,
                  " of shape ", shape_str(p.shape), " does not broadcast to ", shape_str(norm));
  if (shape_numel(p.shape) == shape_numel(norm)) return k;  // the same elements in the same order
  Expr index;
  int64_t inner = 1, pstride = 1;
  for (size_t d = norm.size(); d-- > 0;) {
    const int64_t pd = d >= off ? p.shape[d - off] : 1;
    if (pd != 1) {
      Expr digit = Binary::make(BinaryOp::Mod, k / idx(inner), idx(norm[d]));
      Expr term = digit * idx(pstride);
      index = index.defined() ? index + term : term;
      pstride *= pd;
    }
    inner *= norm[d];
  }
  return index.defined() ? index : idx(0);
}

}  // namespace

OpKernels lower_layer_norm(const Node& node, const std::vector<OpInput>& in, const std::string& name,
                           const ReductionFusion& fusion) {
  const TensorSig& x = in.at(0).sig;
  const DType t = x.dtype;
  const int64_t rank = int64_t(x.shape.size());
  TERRACE_CHECK(rank >= 1, InvalidArgument, node.describe(), ": input X must have rank >= 1, got 0");
  TERRACE_CHECK(in.size() >= 2 && !in[1].absent, InvalidModel, node.describe(), ": input 1 is required");
  const int64_t axis = axis_of(node, node.attr_int("axis", -1), rank);
  const double eps = node.attr_float("epsilon", 1e-5f);
  DType stash = DType::Float32;
  TERRACE_CHECK(dtype_from_onnx(int(node.attr_int("stash_type", 1)), &stash) && is_ieee(stash), NotImplemented,
                node.describe(), ": tier 1 keeps the statistics in float32 or float64");
  const bool has_bias = in.size() > 2 && !in[2].absent;
  for (size_t i = 1; i < (has_bias ? 3u : 2u); ++i)
    TERRACE_CHECK(is_float(in[i].sig.dtype), InvalidArgument, node.describe(), ": input ", i == 1 ? "Scale" : "B",
                  " must be a float tensor, got ", dtype_name(in[i].sig.dtype));
  const Shape norm(x.shape.begin() + axis, x.shape.end());
  std::vector<bool> mask(size_t(rank), false);
  for (int64_t d = axis; d < rank; ++d) mask[size_t(d)] = true;
  Shape stat_shape = x.shape;
  for (int64_t d = axis; d < rank; ++d) stat_shape[size_t(d)] = 1;

  OpKernels k;
  k.outputs.push_back({t, x.shape});
  for (size_t j = 1; j < node.outputs.size(); ++j) k.outputs.push_back({stash, stat_shape});
  if (shape_numel(stat_shape) == 0) return k;

  Io io(node, in, &k.outputs[0], fusion);
  Layout l = make_layout(x.shape, mask, io.operand_shapes());
  force_rows(l);  // groups of one element: still rows, one reduced dim of size 1
  const Nest nest(l, "");
  Kernel kern;
  kern.f.name = name;
  const int n_in = int(in.size());
  const Buffer sb = kern.add("in1", in[1].sig.dtype, 1);
  const Buffer bb = has_bias ? kern.add("in2", in[2].sig.dtype, 2) : Buffer{};
  const Buffer yb = kern.add("out0", t, n_in);
  std::vector<std::pair<Buffer, bool>> stats;  // (buffer, is the mean)
  for (size_t j = 1; j < node.outputs.size() && j < 3; ++j)
    if (node.outputs[j] >= 0) stats.push_back({kern.add("out" + std::to_string(j), stash, n_in + int(j)), j == 1});
  io.add_buffers(kern, n_in + int(node.outputs.size()));

  const DType d = DType::Float64;
  const double count = double(l.red_count);
  const Acc sum = make_acc(nest, "sum", d), sq = make_acc(nest, "sq", d);
  auto xv = [&](const At& at) { return io.x(at, d); };
  // Mean and variance in double, in two passes, as the interpreter (no E[x^2] - E[x]^2).
  Stmt pass1 = seq({sum.set(nest, f64(0)),
                    nest.over_reduced([&](const At& at, Expr) { return sum.set(nest, sum.at(nest) + xv(at)); })});
  Expr mean = count == 0 ? f64(0) : sum.at(nest) / f64(count);
  Expr mu = Var::make(d, "mean");
  Stmt pass2 = seq({sq.set(nest, f64(0)), nest.over_reduced([&](const At& at, Expr) {
                      Expr dv = xv(at) - mu;
                      return sq.set(nest, sq.at(nest) + dv * dv);
                    })});
  Expr var_ = count == 0 ? f64(0) : sq.at(nest) / f64(count);
  Expr inv = f64(1) / Call::make(Intrinsic::Sqrt, {var_ + f64(eps)});
  Expr is = Var::make(d, "inv_std");
  Stmt pass3 = nest.over_reduced([&](const At& at, Expr kk) {
    Expr y = (xv(at) - mu) * is * load_as(sb, param_index(node, in[1].sig, norm, kk, "input Scale"), d);
    if (has_bias) y = y + load_as(bb, param_index(node, in[2].sig, norm, kk, "input B"), d);
    return io.store_y(yb, at, Cast::make(t, y));
  });
  std::vector<Stmt> tail{pass3};
  for (const auto& [b, is_mean] : stats) tail.push_back(Store::make(b, nest.obase(), Cast::make(stash, is_mean ? mu : is)));
  Stmt after_mean = seq({pass2, LetStmt::make("inv_std", inv, seq(tail))});
  Stmt body = sum.wrap(sq.wrap(seq({pass1, LetStmt::make("mean", mean, after_mean)})));
  finish(k, std::move(kern), nest, body);
  return k;
}

}  // namespace terrace::kernels::reduce
