// Shared pieces of the 'nn' family reference kernels (interp/ops/nn*.cpp).
#pragma once
#include <exception>
#include <string>

#include "interp/ops/common.h"

namespace terrace::ops {

// One registration function per nn_*.cpp file; register_nn_kernels calls them all.
void register_nn_pool_kernels(KernelTable& t);
void register_nn_roi_kernels(KernelTable& t);
void register_nn_norm_kernels(KernelTable& t);
void register_nn_rnn_kernels(KernelTable& t);
void register_nn_loss_kernels(KernelTable& t);
void register_nn_attention_kernels(KernelTable& t);
void register_nn_col2im_kernels(KernelTable& t);

// Runs f(i) for i in [0, n) on OpenMP threads in fixed static chunks; f must write disjoint
// outputs, so results do not depend on the thread count. No exception may leave an OpenMP region:
// one thrown by f (in practice only bad_alloc) is caught inside and rethrown after the loop.
template <typename F>
void parallel_for(int64_t n, F&& f) {
  std::exception_ptr error;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    try {
      f(i);
    } catch (...) {
#pragma omp critical(terrace_nn_parallel_for)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

// Calls f(T{}) with T the storage type of a floating-point dtype (float, double, Half,
// BFloat16); NotImplemented naming the node and `what` for any other dtype.
template <typename F>
decltype(auto) dispatch_float(const Node& node, DType dtype, const char* what, F&& f) {
  switch (dtype) {
    case DType::Float32: return f(float{});
    case DType::Float64: return f(double{});
    case DType::Float16: return f(Half{});
    case DType::BFloat16: return f(BFloat16{});
    default: break;
  }
  fail(ErrorCode::NotImplemented, node.describe(), ": ", what, " of dtype ", dtype_name(dtype),
       " is not supported (floating-point types only)");
}

// Checks that `dtype` is a floating-point type the kernels support, naming the node and `what`.
inline void check_float(const Node& node, DType dtype, const char* what) {
  dispatch_float(node, dtype, what, [](auto) {});
}

// A floating-point tensor of `dtype` and `shape` holding `values` (computed in double), rounded.
inline Tensor tensor_from_doubles(const Node& node, DType dtype, Shape shape,
                                  const std::vector<double>& values) {
  Tensor t = Tensor::empty(dtype, std::move(shape));
  TERRACE_ASSERT(size_t(t.numel()) == values.size(), node.describe());
  dispatch_float(node, dtype, "output", [&](auto tag) {
    using T = decltype(tag);
    T* p = t.data<T>();
    for (size_t i = 0; i < values.size(); ++i) p[i] = T(values[i]);
  });
  return t;
}

// The elements of a numeric tensor as doubles.
inline std::vector<double> tensor_to_doubles(const Tensor& t) {
  std::vector<double> v(size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[size_t(i)] = t.get_as_double(i);
  return v;
}

// Checks that `t` has at least `min_rank` dims, naming the node and the input.
inline void check_min_rank(const Node& node, const Tensor& t, int64_t min_rank, const char* what) {
  TERRACE_CHECK(t.rank() >= min_rank, InvalidArgument, node.describe(), ": ", what,
                " must have rank >= ", min_rank, ", got shape ", shape_str(t.shape()));
}

// Checks that `t` has exactly `shape`, naming the node and the input.
inline void check_shape(const Node& node, const Tensor& t, const Shape& shape, const char* what) {
  TERRACE_CHECK(t.shape() == shape, InvalidArgument, node.describe(), ": ", what,
                " must have shape ", shape_str(shape), ", got ", shape_str(t.shape()));
}

// Checks that two inputs share a dtype, naming the node and the inputs.
inline void check_same_dtype(const Node& node, const Tensor& a, const Tensor& b, const char* what) {
  TERRACE_CHECK(a.dtype() == b.dtype(), InvalidArgument, node.describe(), ": ", what, " has dtype ",
                dtype_name(b.dtype()), ", expected ", dtype_name(a.dtype()));
}

}  // namespace terrace::ops
