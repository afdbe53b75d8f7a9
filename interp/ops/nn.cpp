// Reference kernels of the 'nn' family (see interp/ops.def): Dropout here, the rest in nn_*.cpp.
#include <random>

#include "interp/ops/nn.h"

namespace terrace {
namespace ops {
namespace {

// Uniform doubles in [0, 1) exactly as numpy's RandomState(seed).uniform draws them: MT19937
// seeded with init_genrand(seed), two 32-bit outputs per 53-bit double.
double numpy_uniform(std::mt19937& gen) {
  uint32_t a = uint32_t(gen()) >> 5, b = uint32_t(gen()) >> 6;
  return (double(a) * 67108864.0 + double(b)) / 9007199254740992.0;
}

// Dropout: the identity (mask all true) unless training_mode is set with a ratio above 0. Then
// element i is kept when the i-th uniform draw of numpy's RandomState(seed) is >= ratio (seed
// attribute, default 0): deterministic, and the same mask as the ONNX test generator's.
void dropout_kernel(KernelContext& ctx) {
  const Node& node = ctx.node;
  const Tensor& x = ctx.input(0);
  double ratio = node.attr_float("ratio", 0.5f);  // opsets < 12 carry it as an attribute
  if (ctx.has_input(1)) {
    TERRACE_CHECK(ctx.input(1).numel() == 1, InvalidArgument, node.describe(),
                  ": input ratio must be a scalar");
    ratio = ctx.input(1).get_as_double(0);
  }
  bool training =
      ctx.has_input(2) && ctx.input(2).numel() == 1 && ctx.input(2).get_as_double(0) != 0;
  Tensor mask = Tensor::empty(DType::Bool, x.shape());
  bool* m = mask.data<bool>();
  if (!training || ratio == 0) {
    std::fill_n(m, mask.numel(), true);
    ctx.set_output(0, x);  // tensors are immutable: sharing storage is safe
  } else {
    TERRACE_CHECK(ratio > 0 && ratio < 1, InvalidArgument, node.describe(),
                  ": ratio must be in [0, 1), got ", ratio);
    std::mt19937 gen(uint32_t(node.attr_int("seed", 0)));
    for (int64_t i = 0; i < mask.numel(); ++i) m[i] = numpy_uniform(gen) >= ratio;  // serial
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
  ops::register_nn_attention_kernels(t);
  ops::register_nn_col2im_kernels(t);
}

}  // namespace terrace
