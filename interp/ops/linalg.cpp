// Reference kernels of the 'linalg' family (see interp/ops.def): MatMul, Gemm, Det and the
// quantized matrix products; convolutions live in conv*.cpp and Einsum in einsum.cpp.
#include "interp/ops/common.h"
#include "interp/ops/linalg_matmul.h"
#include "interp/ops/linalg_parts.h"

namespace terrace {
namespace ops {

MatMulPlan plan_matmul(const Node& node, const Shape& a_in, const Shape& b_in) {
  TERRACE_CHECK(!a_in.empty() && !b_in.empty(), InvalidArgument, node.describe(),
                ": MatMul operands must have rank >= 1, got ", shape_str(a_in), " and ",
                shape_str(b_in));
  Shape a = a_in, b = b_in;
  if (a.size() == 1) a.insert(a.begin(), 1);
  if (b.size() == 1) b.push_back(1);
  MatMulPlan p;
  p.M = a[a.size() - 2];
  p.K = a.back();
  p.N = b.back();
  TERRACE_CHECK(b[b.size() - 2] == p.K, InvalidArgument, node.describe(), ": shapes ",
                shape_str(a_in), " and ", shape_str(b_in), " do not match for MatMul");
  Shape ba(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
  Shape batch = broadcast_shapes(node, ba, bb);
  p.out_shape = batch;
  if (a_in.size() > 1) p.out_shape.push_back(p.M);
  if (b_in.size() > 1) p.out_shape.push_back(p.N);
  auto sa = broadcast_strides(ba, batch), sb = broadcast_strides(bb, batch);
  for (StridedIter it(batch, {sa, sb}); !it.done(); it.next()) {
    p.a_off.push_back(it.offset(0) * p.M * p.K);
    p.b_off.push_back(it.offset(1) * p.K * p.N);
  }
  return p;
}

}  // namespace ops

namespace {
using namespace ops;

bool is_numeric(DType t) { return is_float(t) || is_integer(t); }

void matmul_kernel(KernelContext& ctx) {
  const Tensor &a = ctx.input(0), &b = ctx.input(1);
  const Node& node = ctx.node;
  TERRACE_CHECK(a.dtype() == b.dtype() && is_numeric(a.dtype()), InvalidArgument, node.describe(),
                ": MatMul needs two numeric inputs of one type, got ", dtype_name(a.dtype()),
                " and ", dtype_name(b.dtype()));
  MatMulPlan p = plan_matmul(node, a.shape(), b.shape());
  Tensor out = Tensor::empty(a.dtype(), p.out_shape);
  dispatch_dtype(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using Acc = acc_t<T>;
    T* o = out.data<T>();
    // A weight in a file's pages (a large initializer: tier 1 reads its own packed copy) is let go
    // as the product passes it, a block of columns at a time, so that running the product here
    // (a validation call of a compiled vocabulary projection) does not bring all of it back into
    // resident memory at once: GPT-2's 154 MB head weight raised the peak RSS by as much on each.
    int64_t released = 0;
    auto done_with_b = [&](int64_t cols) {
      if (!b.is_file_backed() || b.rank() != 2) return;
      if (cols >= p.N) {
        b.drop_resident_pages();
        return;
      }
      const size_t row = size_t(p.N) * sizeof(T), from = size_t(released) * sizeof(T), to = size_t(cols) * sizeof(T);
      const size_t page = 4096;  // a page that ends past `to` in its row is kept; larger pages only drop less
      for (int64_t k = 0; k < p.K; ++k) {
        const size_t start = size_t(k) * row, lo = std::max(start, (start + from) / page * page);
        b.drop_resident_range(lo, start + to - lo);
      }
      released = cols;
    };
    run_matmul<Acc>(p, a.data<T>(), b.data<T>(), [&](int64_t row, int64_t j0, int64_t n, const Acc* s) {
      T* dst = o + row * p.N + j0;
      for (int64_t j = 0; j < n; ++j) dst[j] = round_to<T>(s[j]);
    }, done_with_b);
  });
  ctx.set_output(0, std::move(out));
}

// Y = alpha * A'·B' + beta * C, with C broadcast to [M,N]; one rounding per element.
void gemm_kernel(KernelContext& ctx) {
  const Node& node = ctx.node;
  const Tensor &a = ctx.input(0), &b = ctx.input(1);
  TERRACE_CHECK(a.rank() == 2 && b.rank() == 2, InvalidArgument, node.describe(),
                ": Gemm needs 2-D A and B, got ", shape_str(a.shape()), " and ", shape_str(b.shape()));
  TERRACE_CHECK(a.dtype() == b.dtype() && is_numeric(a.dtype()), InvalidArgument, node.describe(),
                ": Gemm needs A and B of one numeric type");
  const bool ta = node.attr_int("transA", 0) != 0, tb = node.attr_int("transB", 0) != 0;
  const double alpha = node.attr_float("alpha", 1.0f), beta = node.attr_float("beta", 1.0f);
  const int64_t M = ta ? a.dim(1) : a.dim(0), K = ta ? a.dim(0) : a.dim(1);
  const int64_t N = tb ? b.dim(0) : b.dim(1);
  TERRACE_CHECK((tb ? b.dim(1) : b.dim(0)) == K, InvalidArgument, node.describe(),
                ": Gemm inner dimensions differ: A ", shape_str(a.shape()), " B ", shape_str(b.shape()));
  const Shape out_shape{M, N};
  const Tensor* c = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  std::vector<int64_t> cs;
  if (c) {
    TERRACE_CHECK(c->dtype() == a.dtype(), InvalidArgument, node.describe(), ": C has type ",
                  dtype_name(c->dtype()), ", A has ", dtype_name(a.dtype()));
    TERRACE_CHECK(c->rank() <= 2 && broadcast_shapes(node, c->shape(), out_shape) == out_shape,
                  InvalidArgument, node.describe(), ": C of shape ", shape_str(c->shape()),
                  " does not broadcast to ", shape_str(out_shape));
    cs = broadcast_strides(c->shape(), out_shape);
  }
  Tensor out = Tensor::empty(a.dtype(), out_shape);
  dispatch_dtype(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using Acc = acc_t<T>;
    const T* cd = c ? c->data<T>() : nullptr;
    T* o = out.data<T>();
    auto emit = [&](int64_t i, int64_t j0, int64_t n, const Acc* s) {
      for (int64_t j = j0; j < j0 + n; ++j) {
        const Acc sum = s[j - j0];
        const T* cij = cd ? cd + i * cs[0] + j * cs[1] : nullptr;
        if constexpr (std::is_integral_v<T>)  // integer Gemm: exact, alpha and beta taken as integers
          o[i * N + j] = T(Acc(alpha) * sum + (cij ? Acc(beta) * Acc(*cij) : Acc(0)));
        else
          o[i * N + j] = round_to<T>(alpha * sum + (cij ? beta * to_acc<double>(*cij) : 0.0));
      }
    };
    const int64_t ars = ta ? 1 : K, acs = ta ? M : 1, brs = tb ? 1 : N, bcs = tb ? K : 1;
    if (M <= kGemmSmallM) {
      gemm_small_m<Acc>(a.data<T>(), ars, acs, b.data<T>(), brs, bcs, M, K, N, emit);
      return;
    }
    gemm_packed(pack_a<Acc>(a.data<T>(), M, K, ars, acs), pack_b<Acc>(b.data<T>(), K, N, brs, bcs), emit);
  });
  ctx.set_output(0, std::move(out));
}

// Determinant by LU decomposition with partial pivoting, in double, per trailing [M,M] matrix.
void det_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Node& node = ctx.node;
  TERRACE_CHECK(x.rank() >= 2 && x.dim(-1) == x.dim(-2) && is_float(x.dtype()), InvalidArgument,
                node.describe(), ": Det needs float square matrices [..., M, M], got ",
                dtype_name(x.dtype()), shape_str(x.shape()));
  const int64_t n = x.dim(-1);
  Shape out_shape(x.shape().begin(), x.shape().end() - 2);
  Tensor out = Tensor::empty(x.dtype(), out_shape);
  const int64_t batches = out.numel();
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* src = x.data<T>();
    T* o = out.data<T>();
#pragma omp parallel for schedule(static) if (batches > 16)
    for (int64_t bt = 0; bt < batches; ++bt) {
      std::vector<double> m(size_t(n * n));
      for (int64_t i = 0; i < n * n; ++i) m[size_t(i)] = to_acc<double>(src[bt * n * n + i]);
      double det = 1;
      for (int64_t col = 0; col < n && det != 0; ++col) {
        int64_t piv = col;
        for (int64_t r = col + 1; r < n; ++r)
          if (std::fabs(m[size_t(r * n + col)]) > std::fabs(m[size_t(piv * n + col)])) piv = r;
        if (m[size_t(piv * n + col)] == 0) { det = 0; break; }
        if (piv != col) {
          for (int64_t k = 0; k < n; ++k) std::swap(m[size_t(piv * n + k)], m[size_t(col * n + k)]);
          det = -det;
        }
        const double d = m[size_t(col * n + col)];
        det *= d;
        for (int64_t r = col + 1; r < n; ++r) {
          const double f = m[size_t(r * n + col)] / d;
          for (int64_t k = col; k < n; ++k) m[size_t(r * n + k)] -= f * m[size_t(col * n + k)];
        }
      }
      o[bt] = round_to<T>(det);
    }
  });
  ctx.set_output(0, std::move(out));
}

}  // namespace

void register_linalg_kernels(KernelTable& t) {
  t.add(Op::MatMul, matmul_kernel);
  t.add(Op::Gemm, gemm_kernel);
  t.add(Op::Det, det_kernel);
  ops::register_quantized_matmul_kernels(t);
  ops::register_conv_kernels(t);
  ops::register_einsum_kernel(t);
  ops::register_deform_conv_kernel(t);
}

}  // namespace terrace
