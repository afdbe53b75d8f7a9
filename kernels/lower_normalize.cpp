// Normalisations lowered to kernels (kernels/lower_op.h): Softmax and LogSoftmax (three passes
// over each lane: the maximum, the sum of exp(x - max) in double, the scaled write), Hardmax,
// LpNormalization, and
// LayerNormalization, InstanceNormalization and MeanVarianceNormalization (mean and variance in
// double, in two passes, then the affine write), with the interpreter's semantics
// (interp/ops/reduce_softmax.cpp, nn_norm.cpp).
#include "kernels/reduce_loops.h"

namespace terrace::kernels::reduce {

namespace {

// The lanes of the Softmax family: one axis (opset 13), or every dim from `axis` on (before 13,
// with default axis 1: the 2-D view).
std::vector<bool> softmax_lanes(const Node& node, int64_t rank, int opset) {
  const bool legacy = opset < 13;
  const int64_t axis = axis_of(node, node.attr_int("axis", legacy ? 1 : -1), rank);
  std::vector<bool> mask(size_t(rank), false);
  for (int64_t d = axis; d < (legacy ? rank : std::min(axis + 1, rank)); ++d) mask[size_t(d)] = true;
  return mask;
}

}  // namespace

OpKernels lower_softmax(const Node& node, const std::vector<OpInput>& in, const std::string& name, int opset,
                        const ReductionFusion& fusion) {
  const TensorSig& x = in.at(0).sig;
  const DType t = x.dtype;
  const std::vector<bool> mask = softmax_lanes(node, int64_t(x.shape.size()), opset);
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
  Fold fm{t, lowest(t), [&](const At& at, Expr) { return io.x(at, t); }, FoldOp::Max};
  auto z = [&](const At& at) { return io.x(at, t) - mx.at(nest); };
  // The sum of exp(x - max) in double; softmax keeps each exp in Y for the scaling pass.
  Stmt sum_pass = seq({nest.over_lanes(sum.set(nest, f64(0))),
                       nest.over_reduced([&](const At& at, Expr) {
                         Expr e = Call::make(Intrinsic::Exp, {z(at)});
                         Stmt add = sum.fold(nest, FoldOp::Add, Cast::make(DType::Float64, e), "s");
                         if (log) return add;
                         return LetStmt::make("e", e, seq({Store::make(yb, at.x(), Var::make(t, "e")),
                                                           sum.fold(nest, FoldOp::Add, Cast::make(DType::Float64, Var::make(t, "e")), "s")}));
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

// Hardmax: 1 at the first maximum of each lane, 0 elsewhere; NaN never counts as a maximum and a
// lane with none (all -inf or NaN) marks index 0, as the interpreter's `if (v > m)` scan.
OpKernels lower_hardmax(const Node& node, const std::vector<OpInput>& in, const std::string& name, int opset,
                        const ReductionFusion& fusion) {
  const TensorSig& x = in.at(0).sig;
  const DType t = x.dtype;
  const std::vector<bool> mask = softmax_lanes(node, int64_t(x.shape.size()), opset);
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
  const Acc mx = make_acc(nest, "mx", t), first = make_acc(nest, "first", DType::Int64);
  const int64_t len = l.red_count;
  Fold fm{t, lowest(t), [&](const At& at, Expr) { return io.x(at, t); }, FoldOp::Max};
  Expr m = mx.at(nest);
  Fold fi{DType::Int64, idx(len),
          [&, m](const At& at, Expr kk) { return Select::make(Compare::make(CmpOp::EQ, io.x(at, t), m), kk, idx(len)); },
          FoldOp::FirstIndex};
  Expr found = Compare::make(CmpOp::GT, m, lowest(t));
  Stmt fix = nest.over_lanes(first.set(nest, Select::make(found, first.at(nest), idx(0))));
  Stmt write = nest.over_reduced([&](const At& at, Expr kk) {
    Expr one = Select::make(Compare::make(CmpOp::EQ, kk, first.at(nest)), make_one(t), make_zero(t));
    return io.store_y(yb, at, one);
  });
  finish(k, std::move(kern), nest, mx.wrap(first.wrap(seq({emit_fold(nest, mx, fm, "m"), emit_fold(nest, first, fi, "i"), fix, write}))));
  return k;
}

// LpNormalization: x / ||x||_p along one axis (p 1 or 2; the norm in double), 0 where the norm is 0.
OpKernels lower_lp_norm(const Node& node, const std::vector<OpInput>& in, const std::string& name,
                        const ReductionFusion& fusion) {
  const TensorSig& x = in.at(0).sig;
  const DType t = x.dtype;
  const int64_t rank = int64_t(x.shape.size());
  TERRACE_CHECK(rank >= 1, InvalidArgument, node.describe(), ": input X must have rank >= 1, got shape ",
                shape_str(x.shape));
  const int64_t p = node.attr_int("p", 2);
  TERRACE_CHECK(p == 1 || p == 2, InvalidModel, node.describe(), ": attribute 'p' must be 1 or 2, got ", p);
  std::vector<bool> mask(size_t(rank), false);
  mask[size_t(axis_of(node, node.attr_int("axis", -1), rank))] = true;
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
  const DType d = DType::Float64;
  const Acc norm = make_acc(nest, "norm", d);
  Fold f{d, f64(0),
         [&](const At& at, Expr) {
           Expr v = io.x(at, d);
           return p == 1 ? Call::make(Intrinsic::Abs, {v}) : v * v;
         },
         FoldOp::Add};
  Stmt root = p == 2 ? nest.over_lanes(norm.set(nest, Call::make(Intrinsic::Sqrt, {norm.at(nest)}))) : Stmt();
  Stmt write = nest.over_reduced([&](const At& at, Expr) {
    Expr n = norm.at(nest);
    Expr y = Select::make(Compare::make(CmpOp::EQ, n, f64(0)), f64(0), io.x(at, d) / n);
    return io.store_y(yb, at, Cast::make(t, y));
  });
  finish(k, std::move(kern), nest, norm.wrap(seq({emit_fold(nest, norm, f, "n"), root, write})));
  return k;
}

// ---- LayerNormalization, InstanceNormalization, MeanVarianceNormalization ----

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

// A normalisation by each group's mean and variance (double, two passes, as the interpreter's
// group_moments): y = (x - mean) * inv * scale + bias with inv = 1 / sqrt(var + eps)
// (LayerNormalization, InstanceNormalization), or (x - mean) / (sqrt(var) + 1e-9)
// (MeanVarianceNormalization).
struct Moments {
  std::vector<bool> mask;  // the reduced dims: a group shares the others
  double eps = 0;
  bool mvn = false;
  // The scale and bias at the current element (k: its flat index in the group), or undefined.
  std::function<Expr(const Nest&, Expr k)> scale, bias;
  std::vector<std::pair<Buffer, bool>> stats;  // LayerNormalization's Mean (true) / InvStdDev outputs
  DType stash = DType::Float32;
};

// The kernel around `spec`; `kern` already holds every buffer but X and the fused ones.
OpKernels lower_moments(const Node& node, const std::vector<OpInput>& in, OpKernels k, Kernel kern,
                        const Io& io_in, Moments spec) {
  const TensorSig& x = in.at(0).sig;
  const DType t = x.dtype;
  Io io = io_in;
  Layout l = make_layout(x.shape, spec.mask, io.operand_shapes());
  if (l.out_count == 0) return k;
  const Nest nest(l, "");
  const Buffer yb = kern.add("out0", t, int(in.size()));
  io.add_buffers(kern, int(in.size() + node.outputs.size()));
  const DType d = DType::Float64;
  const double count = double(l.red_count);
  // Per lane: sum, then the mean in its place; sq, then the inverse deviation in its place.
  const Acc mean = make_acc(nest, "mean", d), inv = make_acc(nest, "inv", d);
  auto xv = [&](const At& at) { return io.x(at, d); };
  Stmt pass1 = seq({nest.over_lanes(mean.set(nest, f64(0))),
                    nest.over_reduced([&](const At& at, Expr) { return mean.fold(nest, FoldOp::Add, xv(at), "mean"); }),
                    nest.over_lanes(mean.set(nest, count == 0 ? f64(0) : mean.at(nest) / f64(count)))});
  Stmt pass2 = seq({nest.over_lanes(inv.set(nest, f64(0))), nest.over_reduced([&](const At& at, Expr) {
                      Expr dv = xv(at) - mean.at(nest);
                      return inv.fold(nest, FoldOp::Add, dv * dv, "var");
                    })});
  Expr var_ = count == 0 ? f64(0) : inv.at(nest) / f64(count);
  Expr dev = spec.mvn ? Call::make(Intrinsic::Sqrt, {var_}) + f64(1e-9) : Call::make(Intrinsic::Sqrt, {var_ + f64(spec.eps)});
  // inv: the inverse deviation (MVN: the deviation itself, which the interpreter divides by).
  Stmt set_inv = nest.over_lanes(inv.set(nest, spec.mvn ? dev : f64(1) / dev));
  // The affine step of a float32 normalisation in float: z = (x - mean) * inv in double, rounded
  // once, then z * scale + bias in float (the interpreter rounds once, at the end). Its error,
  // 2^-24 (2 |z scale| + |y|) at most (2^-23 |z scale| plus a rounding of y), stays within
  // rtol 1e-3 / atol 1e-5 unless y cancels to near 0 with |z scale| above 80 (|z| <= sqrt of
  // the group's size); in double, this step's conversions slowed a GPU layernorm by a tenth
  // (bench/RESULTS.md).
  const bool float_affine = t == DType::Float32 && !spec.mvn && spec.scale;
  Stmt pass3 = nest.over_reduced([&](const At& at, Expr kk) {
    // The interpreter's order: ((x - mean) * inv) * scale + bias.
    Expr y = spec.mvn ? (xv(at) - mean.at(nest)) / inv.at(nest) : (xv(at) - mean.at(nest)) * inv.at(nest);
    if (float_affine) {
      y = Cast::make(t, y) * Cast::make(t, spec.scale(nest, kk));
      if (spec.bias) y = y + Cast::make(t, spec.bias(nest, kk));
      return io.store_y(yb, at, y);
    }
    if (spec.scale) y = y * spec.scale(nest, kk);
    if (spec.bias) y = y + spec.bias(nest, kk);
    return io.store_y(yb, at, Cast::make(t, y));
  });
  std::vector<Stmt> body{pass1, pass2, set_inv, pass3};
  for (const auto& [b, is_mean] : spec.stats)
    body.push_back(nest.over_lanes(Store::make(b, nest.obase() + nest.lane(), Cast::make(spec.stash, (is_mean ? mean : inv).at(nest)))));
  finish(k, std::move(kern), nest, mean.wrap(inv.wrap(seq(std::move(body)))));
  return k;
}

// A float input's buffer, checked to be a float tensor (the interpreter's check).
Buffer float_param(const Node& node, const std::vector<OpInput>& in, size_t i, const char* what, Kernel& kern) {
  TERRACE_CHECK(i < in.size() && !in[i].absent, InvalidModel, node.describe(), ": input ", i, " is required");
  TERRACE_CHECK(is_float(in[i].sig.dtype), InvalidArgument, node.describe(), ": ", what, " must be a float tensor, got ",
                dtype_name(in[i].sig.dtype));
  return kern.add("in" + std::to_string(i), in[i].sig.dtype, int(i));
}

}  // namespace

OpKernels lower_layer_norm(const Node& node, const std::vector<OpInput>& in, const std::string& name,
                           const ReductionFusion& fusion) {
  const TensorSig& x = in.at(0).sig;
  const int64_t rank = int64_t(x.shape.size());
  TERRACE_CHECK(rank >= 1, InvalidArgument, node.describe(), ": input X must have rank >= 1, got 0");
  const int64_t axis = axis_of(node, node.attr_int("axis", -1), rank);
  Moments spec;
  spec.eps = node.attr_float("epsilon", 1e-5f);
  TERRACE_CHECK(dtype_from_onnx(int(node.attr_int("stash_type", 1)), &spec.stash) && is_ieee(spec.stash),
                NotImplemented, node.describe(), ": tier 1 keeps the statistics in float32 or float64");
  const Shape norm(x.shape.begin() + axis, x.shape.end());
  spec.mask.assign(size_t(rank), false);
  for (int64_t d = axis; d < rank; ++d) spec.mask[size_t(d)] = true;
  Shape stat_shape = x.shape;
  for (int64_t d = axis; d < rank; ++d) stat_shape[size_t(d)] = 1;

  OpKernels k;
  k.outputs.push_back({x.dtype, x.shape});
  for (size_t j = 1; j < node.outputs.size(); ++j) k.outputs.push_back({spec.stash, stat_shape});
  Io io(node, in, &k.outputs[0], fusion);
  Kernel kern;
  kern.f.name = name;
  const Buffer sb = float_param(node, in, 1, "input Scale", kern);
  const bool has_bias = in.size() > 2 && !in[2].absent;
  const Buffer bb = has_bias ? float_param(node, in, 2, "input B", kern) : Buffer{};
  // Checked here, used per element: Scale and B broadcast (unidirectionally) to the normalized dims.
  param_index(node, in[1].sig, norm, idx(0), "input Scale");
  if (has_bias) param_index(node, in[2].sig, norm, idx(0), "input B");
  spec.scale = [&, sb](const Nest&, Expr kk) { return load_as(sb, param_index(node, in[1].sig, norm, kk, "input Scale"), DType::Float64); };
  if (has_bias)
    spec.bias = [&, bb](const Nest&, Expr kk) { return load_as(bb, param_index(node, in[2].sig, norm, kk, "input B"), DType::Float64); };
  for (size_t j = 1; j < node.outputs.size() && j < 3; ++j)
    if (node.outputs[j] >= 0)
      spec.stats.push_back({kern.add("out" + std::to_string(j), spec.stash, int(in.size()) + int(j)), j == 1});
  return lower_moments(node, in, std::move(k), std::move(kern), io, std::move(spec));
}

OpKernels lower_instance_norm(const Node& node, const std::vector<OpInput>& in, const std::string& name,
                              const ReductionFusion& fusion) {
  const TensorSig& x = in.at(0).sig;
  const int64_t rank = int64_t(x.shape.size());
  TERRACE_CHECK(rank >= 3, InvalidArgument, node.describe(), ": input X must have rank >= 3, got shape ",
                shape_str(x.shape));
  const int64_t channels = x.shape[1];
  Moments spec;
  spec.eps = node.attr_float("epsilon", 1e-5f);
  spec.mask.assign(size_t(rank), true);
  spec.mask[0] = spec.mask[1] = false;
  OpKernels k;
  k.outputs.push_back({x.dtype, x.shape});
  Io io(node, in, &k.outputs[0], fusion);
  Kernel kern;
  kern.f.name = name;
  const char* what[] = {"", "input scale", "input B"};
  std::vector<Buffer> params;
  for (size_t i = 1; i < 3; ++i) {
    TERRACE_CHECK(i < in.size() && !in[i].absent, InvalidModel, node.describe(), ": input ", i, " is required");
    TERRACE_CHECK(shape_numel(in[i].sig.shape) == channels, InvalidArgument, node.describe(), ": ", what[i],
                  " must hold ", channels, " values, got shape ", shape_str(in[i].sig.shape));
    params.push_back(float_param(node, in, i, what[i], kern));
  }
  // Group (n, c) is the kept index: its channel is that index modulo C.
  auto channel = [channels](const Nest& n) { return Binary::make(BinaryOp::Mod, n.obase() + n.lane(), idx(channels)); };
  spec.scale = [=](const Nest& n, Expr) { return load_as(params[0], channel(n), DType::Float64); };
  spec.bias = [=](const Nest& n, Expr) { return load_as(params[1], channel(n), DType::Float64); };
  return lower_moments(node, in, std::move(k), std::move(kern), io, std::move(spec));
}

OpKernels lower_mvn(const Node& node, const std::vector<OpInput>& in, const std::string& name,
                    const ReductionFusion& fusion) {
  const TensorSig& x = in.at(0).sig;
  const int64_t rank = int64_t(x.shape.size());
  Moments spec;
  spec.mvn = true;
  spec.mask.assign(size_t(rank), false);
  for (int64_t a : node.attr_ints("axes", {0, 2, 3})) spec.mask[size_t(axis_of(node, a, rank))] = true;
  OpKernels k;
  k.outputs.push_back({x.dtype, x.shape});
  Io io(node, in, &k.outputs[0], fusion);
  Kernel kern;
  kern.f.name = name;
  return lower_moments(node, in, std::move(k), std::move(kern), io, std::move(spec));
}

}  // namespace terrace::kernels::reduce
