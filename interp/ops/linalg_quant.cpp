// Quantized matrix products: MatMulInteger and QLinearMatMul, plus the zero-point shift that the
// integer convolutions share.
#include "interp/ops/common.h"
#include "interp/ops/linalg_matmul.h"
#include "interp/ops/linalg_parts.h"

namespace terrace::ops {

Tensor subtract_zero_point(const KernelContext& ctx, size_t data_input, size_t zp_input,
                           int64_t inner, int64_t channels) {
  const Node& node = ctx.node;
  const Tensor& t = ctx.input(data_input);
  TERRACE_CHECK(t.dtype() == DType::UInt8 || t.dtype() == DType::Int8, InvalidArgument,
                node.describe(), ": input ", data_input, " must be uint8 or int8, got ", dtype_name(t.dtype()));
  std::vector<int32_t> zp(size_t(std::max<int64_t>(channels, 1)), 0);
  if (ctx.has_input(zp_input)) {
    const Tensor& z = ctx.input(zp_input);
    TERRACE_CHECK(z.dtype() == t.dtype() && (z.numel() == 1 || z.numel() == channels),
                  InvalidArgument, node.describe(), ": zero point (input ", zp_input, ") must be ",
                  dtype_name(t.dtype()), " with 1 or ", channels, " values, got ",
                  dtype_name(z.dtype()), shape_str(z.shape()));
    for (size_t c = 0; c < zp.size(); ++c) zp[c] = int32_t(z.get_as_int64(z.numel() == 1 ? 0 : int64_t(c)));
  }
  Tensor r = Tensor::empty(DType::Int32, t.shape());
  int32_t* d = r.data<int32_t>();
  const int64_t period = int64_t(zp.size());
  inner = std::max<int64_t>(inner, 1);
  for (int64_t i = 0; i < t.numel(); ++i) d[i] = int32_t(t.get_as_int64(i)) - zp[size_t((i / inner) % period)];
  return r;
}

namespace {

// The int64 sums of (a - a_zp)(b - b_zp) over a numpy matmul; per-row a_zp, per-column b_zp.
template <typename Emit>
MatMulPlan integer_matmul(KernelContext& ctx, size_t a_in, size_t azp_in, size_t b_in, size_t bzp_in,
                          Emit&& emit) {
  const Tensor &a = ctx.input(a_in), &b = ctx.input(b_in);
  MatMulPlan p = plan_matmul(ctx.node, a.shape(), b.shape());
  Tensor as = subtract_zero_point(ctx, a_in, azp_in, p.K, p.M);
  Tensor bs = subtract_zero_point(ctx, b_in, bzp_in, 1, p.N);
  run_matmul<int64_t>(p, as.data<int32_t>(), bs.data<int32_t>(), emit);
  return p;
}

void matmul_integer_kernel(KernelContext& ctx) {
  MatMulPlan p = plan_matmul(ctx.node, ctx.input(0).shape(), ctx.input(1).shape());
  Tensor y = Tensor::empty(DType::Int32, p.out_shape);
  int32_t* yd = y.data<int32_t>();
  integer_matmul(ctx, 0, 2, 1, 3, [&](int64_t row, int64_t j0, int64_t n, const int64_t* s) {
    for (int64_t j = 0; j < n; ++j) yd[row * p.N + j0 + j] = int32_t(s[j]);
  });
  ctx.set_output(0, std::move(y));
}

// A float32 (or, from opset 21, float16 or bfloat16) scale tensor as one float per channel (a
// scalar repeats).
std::vector<float> scales(const KernelContext& ctx, size_t input, int64_t channels) {
  const Tensor& s = ctx.input(input);
  TERRACE_CHECK((s.dtype() == DType::Float32 || s.dtype() == DType::Float16 || s.dtype() == DType::BFloat16) &&
                    (s.numel() == 1 || s.numel() == channels),
                InvalidArgument, ctx.node.describe(), ": scale (input ", input,
                ") must be float32, float16 or bfloat16 with 1 or ", channels, " values");
  std::vector<float> v(static_cast<size_t>(channels));
  for (int64_t c = 0; c < channels; ++c) v[size_t(c)] = float(s.get_as_double(s.numel() == 1 ? 0 : c));
  return v;
}

// y = saturate(round_half_even(sum * a_scale * b_scale / y_scale) + y_zp), scaled in float as
// the reference implementations do.
void qlinear_matmul_kernel(KernelContext& ctx) {
  const Node& node = ctx.node;
  MatMulPlan p = plan_matmul(node, ctx.input(0).shape(), ctx.input(3).shape());
  const std::vector<float> sa = scales(ctx, 1, p.M), sb = scales(ctx, 4, p.N), sy = scales(ctx, 6, 1);
  const Tensor& yzp = ctx.input(7);
  TERRACE_CHECK(yzp.numel() == 1, InvalidArgument, node.describe(), ": y_zero_point must be a scalar");
  Tensor y = Tensor::empty(yzp.dtype(), p.out_shape);
  dispatch_dtype(yzp.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, uint8_t> || std::is_same_v<T, int8_t>) {
      const float zp = float(yzp.data<T>()[0]);
      T* yd = y.data<T>();
      integer_matmul(ctx, 0, 2, 3, 5, [&](int64_t row, int64_t j0, int64_t n, const int64_t* s) {
        const float ra = sa[size_t(row % std::max<int64_t>(p.M, 1))] / sy[0];
        for (int64_t j = 0; j < n; ++j) {
          const float v = std::nearbyint(float(s[j]) * (ra * sb[size_t(j0 + j)])) + zp;
          yd[row * p.N + j0 + j] = v != v ? T(0)  // a NaN scale: 0, as Cast gives
              : T(std::clamp(v, float(std::numeric_limits<T>::min()), float(std::numeric_limits<T>::max())));
        }
      });
    } else {
      fail(ErrorCode::InvalidArgument, node.describe(), ": y_zero_point must be uint8 or int8");
    }
  });
  ctx.set_output(0, std::move(y));
}

}  // namespace

void register_quantized_matmul_kernels(KernelTable& t) {
  t.add(Op::MatMulInteger, matmul_integer_kernel);
  t.add(Op::QLinearMatMul, qlinear_matmul_kernel);
}

}  // namespace terrace::ops
