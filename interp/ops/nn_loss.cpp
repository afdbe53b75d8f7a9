// Loss reference kernels: NegativeLogLikelihoodLoss, and SoftmaxCrossEntropyLoss (NLL applied to
// the log-softmax of its scores over axis 1).
#include <cmath>

#include "interp/ops/nn.h"

namespace terrace::ops {
namespace {

// Scores [N, C, d1..dk] viewed as [N, C, D] with D = d1*..*dk; targets are [N, d1..dk].
struct LossLayout {
  int64_t n = 0, c = 0, d = 1;
  Shape target_shape;
};

LossLayout loss_layout(const Node& node, const Tensor& scores, const Tensor& target) {
  check_min_rank(node, scores, 2, "input scores");
  LossLayout l;
  l.n = scores.dim(0);
  l.c = scores.dim(1);
  l.target_shape = {l.n};
  for (int64_t i = 2; i < scores.rank(); ++i) {
    l.d *= scores.dim(i);
    l.target_shape.push_back(scores.dim(i));
  }
  check_shape(node, target, l.target_shape, "input target");
  TERRACE_CHECK(target.dtype() == DType::Int64 || target.dtype() == DType::Int32, InvalidArgument,
                node.describe(), ": input target must be int32 or int64, got ",
                dtype_name(target.dtype()));
  return l;
}

// Log-probabilities [N, C, D] (read as doubles) -> the loss output for `reduction`.
Tensor nll(KernelContext& ctx, const LossLayout& l, const std::vector<double>& logp, DType out) {
  const Node& node = ctx.node;
  const Tensor& target = ctx.input(1);
  std::string reduction = node.attr_string("reduction", "mean");
  TERRACE_CHECK(reduction == "none" || reduction == "sum" || reduction == "mean", InvalidModel,
                node.describe(), ": unknown reduction '", reduction, "'");
  std::vector<double> class_weight(size_t(l.c), 1.0);
  if (ctx.has_input(2)) {
    const Tensor& w = ctx.input(2);
    check_shape(node, w, {l.c}, "input weight");
    for (int64_t i = 0; i < l.c; ++i) class_weight[size_t(i)] = w.get_as_double(i);
  }
  bool has_ignore = node.has_attr("ignore_index");
  int64_t ignore = node.attr_int("ignore_index", 0);

  // Validated before any work: every target is a class or the ignored index.
  int64_t count = l.n * l.d;
  std::vector<int64_t> t = target.to_int64_vector();
  for (int64_t v : t)
    TERRACE_CHECK((has_ignore && v == ignore) || (v >= 0 && v < l.c), InvalidArgument,
                  node.describe(), ": target ", v, " is not a class index in [0, ", l.c, ")");
  std::vector<double> loss(static_cast<size_t>(count)), weight(loss.size());
  parallel_for(count, [&](int64_t i) {
    int64_t cls = t[size_t(i)];
    if (has_ignore && cls == ignore) return;  // zero loss, zero weight (vectors start at 0)
    int64_t n = i / l.d, j = i % l.d;
    weight[size_t(i)] = class_weight[size_t(cls)];
    loss[size_t(i)] = -logp[size_t((n * l.c + cls) * l.d + j)] * weight[size_t(i)];
  });
  std::vector<double> result = loss;
  Shape shape = l.target_shape;
  if (reduction != "none") {
    double total = 0, total_weight = 0;  // summed in index order, for determinism
    for (int64_t i = 0; i < count; ++i) {
      total += loss[size_t(i)];
      total_weight += weight[size_t(i)];
    }
    result = {reduction == "sum" ? total : total / total_weight};
    shape = {};
  }
  return tensor_from_doubles(node, out, shape, result);
}

void nll_loss_kernel(KernelContext& ctx) {
  const Tensor& input = ctx.input(0);
  check_float(ctx.node, input.dtype(), "input");
  LossLayout l = loss_layout(ctx.node, input, ctx.input(1));
  ctx.set_output(0, nll(ctx, l, tensor_to_doubles(input), input.dtype()));
}

// log_softmax over axis 1 of [N, C, D], in double.
std::vector<double> log_softmax(const LossLayout& l, const std::vector<double>& x) {
  std::vector<double> y(x.size());
  parallel_for(l.n * l.d, [&](int64_t i) {
    int64_t base = (i / l.d) * l.c * l.d + i % l.d;
    double mx = -INFINITY;
    for (int64_t c = 0; c < l.c; ++c) mx = std::max(mx, x[size_t(base + c * l.d)]);
    double sum = 0;
    for (int64_t c = 0; c < l.c; ++c) sum += std::exp(x[size_t(base + c * l.d)] - mx);
    double lse = mx + std::log(sum);
    for (int64_t c = 0; c < l.c; ++c) y[size_t(base + c * l.d)] = x[size_t(base + c * l.d)] - lse;
  });
  return y;
}

void softmax_cross_entropy_kernel(KernelContext& ctx) {
  const Tensor& scores = ctx.input(0);
  check_float(ctx.node, scores.dtype(), "input scores");
  LossLayout l = loss_layout(ctx.node, scores, ctx.input(1));
  std::vector<double> logp = log_softmax(l, tensor_to_doubles(scores));
  ctx.set_output(0, nll(ctx, l, logp, scores.dtype()));
  if (ctx.wants_output(1))
    ctx.set_output(1, tensor_from_doubles(ctx.node, scores.dtype(), scores.shape(), logp));
}

}  // namespace

void register_nn_loss_kernels(KernelTable& t) {
  t.add(Op::NegativeLogLikelihoodLoss, nll_loss_kernel);
  t.add(Op::SoftmaxCrossEntropyLoss, softmax_cross_entropy_kernel);
}

}  // namespace terrace::ops
