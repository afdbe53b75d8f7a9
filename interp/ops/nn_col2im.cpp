// Col2Im (opset 18): sums sliding blocks back into an image, the inverse layout of im2col, over
// any number of spatial dims (ONNX's reference follows PyTorch's im2col.h).
#include "interp/ops/nn.h"

namespace terrace::ops {
namespace {

void col2im_kernel(KernelContext& ctx) {
  const Node& node = ctx.node;
  const Tensor& x = ctx.input(0);  // [N, C * prod(block), L]
  const std::vector<int64_t> image = ctx.input(1).to_int64_vector();
  const std::vector<int64_t> block = ctx.input(2).to_int64_vector();
  const size_t sd = image.size();
  TERRACE_CHECK(sd >= 1 && block.size() == sd, InvalidArgument, node.describe(),
                ": image_shape and block_shape must have one value per spatial dim");
  TERRACE_CHECK(x.rank() == 3, InvalidArgument, node.describe(), ": input must be [N, C * prod(block_shape), L]");
  auto per_dim = [&](const char* name, int64_t def, size_t count) {
    std::vector<int64_t> v = node.attr_ints(name, std::vector<int64_t>(count, def));
    TERRACE_CHECK(v.size() == count, InvalidModel, node.describe(), ": ", name, " must have ", count, " values");
    return v;
  };
  const std::vector<int64_t> dil = per_dim("dilations", 1, sd), stride = per_dim("strides", 1, sd);
  const std::vector<int64_t> pads = per_dim("pads", 0, 2 * sd);
  int64_t block_size = 1, blocks = 1;
  std::vector<int64_t> counts(sd);  // sliding positions per dim
  for (size_t d = 0; d < sd; ++d) {
    TERRACE_CHECK(image[d] > 0 && block[d] > 0 && dil[d] > 0 && stride[d] > 0 && image[d] < (int64_t(1) << 31) &&
                      block[d] < (int64_t(1) << 31),
                  InvalidArgument, node.describe(), ": sizes, dilations and strides must be positive");
    block_size *= block[d];
    counts[d] = (image[d] + pads[d] + pads[sd + d] - dil[d] * (block[d] - 1) - 1) / stride[d] + 1;
    TERRACE_CHECK(counts[d] >= 1, InvalidArgument, node.describe(), ": the block does not fit the padded image");
    blocks *= counts[d];
  }
  TERRACE_CHECK(x.dim(1) % block_size == 0 && x.dim(2) == blocks, InvalidArgument, node.describe(), ": input ",
                shape_str(x.shape()), " must be [N, C * ", block_size, ", ", blocks, "]");
  const int64_t n = x.dim(0), c = x.dim(1) / block_size;
  Shape out = {n, c};
  int64_t plane = 1;
  for (int64_t v : image) out.push_back(v), plane *= v;
  const Tensor xd = x.cast(DType::Float64);
  const double* src = xd.data<double>();
  std::vector<double> y(size_t(n * c * plane), 0.0);
  std::vector<int64_t> k(sd), l(sd);
  for (int64_t nc = 0; nc < n * c; ++nc)
    for (int64_t b = 0; b < block_size; ++b) {
      for (int64_t d = int64_t(sd) - 1, r = b; d >= 0; --d) k[size_t(d)] = r % block[size_t(d)], r /= block[size_t(d)];
      for (int64_t p = 0; p < blocks; ++p) {
        int64_t pos = 0;
        bool inside = true;
        for (int64_t d = int64_t(sd) - 1, r = p; d >= 0; --d) {
          l[size_t(d)] = r % counts[size_t(d)], r /= counts[size_t(d)];
        }
        for (size_t d = 0; d < sd; ++d) {
          const int64_t at = l[d] * stride[d] - pads[d] + k[d] * dil[d];
          inside = inside && at >= 0 && at < image[d];
          pos = pos * image[d] + at;
        }
        if (inside) y[size_t(nc * plane + pos)] += src[(nc * block_size + b) * blocks + p];
      }
    }
  ctx.set_output(0, Tensor::from_vector<double>(out, y).cast(x.dtype()));
}

}  // namespace

void register_nn_col2im_kernels(KernelTable& t) { t.add(Op::Col2Im, col2im_kernel); }

}  // namespace terrace::ops
