// Reference kernels of the 'nn' family (see interp/ops.def): Dropout here, the rest in nn_*.cpp.
#include <random>

#include "interp/ops/nn.h"

namespace terrace {
namespace ops {
namespace {

// Dropout: the identity (mask all true) unless training_mode is set with a ratio above 0; then a
// Bernoulli mask drawn from a generator seeded by the 'seed' attribute (default 0), so that the
// interpreter stays deterministic.
void dropout_kernel(KernelContext& ctx) {
  const Node& node = ctx.node;
  const Tensor& x = ctx.input(0);
  double ratio = node.attr_float("ratio", 0.5f);  // opsets < 12 carry it as an attribute
  if (ctx.has_input(1)) {
    TERRACE_CHECK(ctx.input(1).numel() == 1, InvalidArgument, node.describe(),
                  ": input ratio must be a scalar");
    ratio = ctx.input(1).get_as_double(0);
  }
  bool training = ctx.has_input(2) && ctx.input(2).numel() == 1 && ctx.input(2).get_as_double(0) != 0;
  Tensor mask = Tensor::empty(DType::Bool, x.shape());
  bool* m = mask.data<bool>();
  if (!training || ratio == 0) {
    std::fill_n(m, mask.numel(), true);
    ctx.set_output(0, x);  // tensors are immutable: sharing storage is safe
  } else {
    TERRACE_CHECK(ratio > 0 && ratio < 1, InvalidArgument, node.describe(),
                  ": ratio must be in [0, 1), got ", ratio);
    std::mt19937_64 gen(uint64_t(node.attr_int("seed", 0)));
    std::bernoulli_distribution keep(1 - ratio);
    for (int64_t i = 0; i < mask.numel(); ++i) m[i] = keep(gen);  // serial: a fixed sequence
    std::vector<double> v = tensor_to_doubles(x);
    for (size_t i = 0; i < v.size(); ++i) v[i] = m[i] ? v[i] / (1 - ratio) : 0.0;
    ctx.set_output(0, tensor_from_doubles(node, x.dtype(), x.shape(), v));
  }
  if (ctx.wants_output(1)) ctx.set_output(1, std::move(mask));
}

}  // namespace
}  // namespace ops

void register_nn_kernels(KernelTable& t) {
  t.add(Op::Dropout, ops::dropout_kernel);
  ops::register_nn_pool_kernels(t);
  ops::register_nn_roi_kernels(t);
  ops::register_nn_norm_kernels(t);
  ops::register_nn_rnn_kernels(t);
  ops::register_nn_loss_kernels(t);
}

}  // namespace terrace
