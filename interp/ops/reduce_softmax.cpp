// Softmax, LogSoftmax and Hardmax: per lane along one axis (opset 13+), or over the 2-D view
// that coerces all dims from `axis` on into one (opset < 13).
#include "interp/ops/common.h"
#include "interp/ops/linalg_gemm.h"
#include "interp/ops/reduce_parts.h"

namespace terrace::ops {
namespace {

// Whether the node follows the opset < 13 definition: default axis 1, and the input viewed as 2-D
// (dims before `axis` flattened into rows, the rest into one lane).
bool legacy_2d_form(const KernelContext& ctx) { return ctx.opset() < 13; }

enum class Kind { Softmax, LogSoftmax, Hardmax };

template <Kind kind>
void softmax_kernel(KernelContext& ctx) {
  const Node& node = ctx.node;
  const Tensor& x = ctx.input(0);
  TERRACE_CHECK(is_float(x.dtype()), InvalidArgument, node.describe(), ": needs a float input, got ",
                dtype_name(x.dtype()));
  const bool legacy = legacy_2d_form(ctx);
  const int64_t axis = normalize_axis(node, node.attr_int("axis", legacy ? 1 : -1), x.rank());
  const AxisLanes l = axis_lanes(x.shape(), axis, legacy);
  Tensor y = Tensor::empty(x.dtype(), x.shape());
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_integral_v<T>) {
      const T* xd = x.data<T>();
      T* yd = y.data<T>();
#pragma omp parallel for schedule(static) if (x.numel() > (1 << 14))
      for (int64_t lane = 0; lane < l.count(); ++lane) {
        const T* src = xd + l.start(lane);
        T* dst = yd + l.start(lane);
        double m = -std::numeric_limits<double>::infinity();
        int64_t arg = 0;
        for (int64_t k = 0; k < l.len; ++k) {
          const double v = to_acc<double>(src[k * l.inner]);
          if (v > m) m = v, arg = k;
        }
        if constexpr (kind == Kind::Hardmax) {
          for (int64_t k = 0; k < l.len; ++k) dst[k * l.inner] = T(k == arg ? 1.0f : 0.0f);
        } else {
          double sum = 0;
          for (int64_t k = 0; k < l.len; ++k) sum += std::exp(to_acc<double>(src[k * l.inner]) - m);
          const double log_sum = std::log(sum);
          for (int64_t k = 0; k < l.len; ++k) {
            const double z = to_acc<double>(src[k * l.inner]) - m;
            dst[k * l.inner] = round_to<T>(kind == Kind::Softmax ? std::exp(z) / sum : z - log_sum);
          }
        }
      }
    }
  });
  ctx.set_output(0, std::move(y));
}

}  // namespace

void register_softmax_kernels(KernelTable& t) {
  t.add(Op::Softmax, softmax_kernel<Kind::Softmax>);
  t.add(Op::LogSoftmax, softmax_kernel<Kind::LogSoftmax>);
  t.add(Op::Hardmax, softmax_kernel<Kind::Hardmax>);
}

}  // namespace terrace::ops
