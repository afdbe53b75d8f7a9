// Helpers shared by the shape-family kernels (interp/ops/shape*.cpp): dtype-generic element moves,
// the strided copy engine, index checks, and each file's registration function.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "interp/ops/common.h"
#include "interp/strided_view.h"

namespace terrace::ops {

// Calls f(T{}) with a type that moves elements of `dtype` bit-exactly: the unsigned integer of
// the element's size for plain types (so float16, bool and NaN payloads move untouched), and
// std::string for strings. Data movement never needs to know what the bits mean.
template <typename F>
decltype(auto) dispatch_move(DType dtype, F&& f) {
  if (dtype == DType::String) return f(std::string{});
  switch (dtype_size(dtype)) {
    case 1: return f(uint8_t{});
    case 2: return f(uint16_t{});
    case 4: return f(uint32_t{});
    case 8: return f(uint64_t{});
    default: break;
  }
  fail(ErrorCode::Internal, "no element mover for dtype ", dtype_name(dtype));
}

// Untyped element pointers for use inside dispatch_move (Tensor::data<T> checks the real dtype).
template <typename T> T* elems(Tensor& t) { return static_cast<T*>(t.raw()); }
template <typename T> const T* elems(const Tensor& t) { return static_cast<const T*>(t.raw()); }


// Copies `shape` elements from src's view into dst's view (same dtype). Contiguous rows move as
// blocks, transposes go through cache-sized tiles, and the work is split over OpenMP threads by
// output position, so results do not depend on the thread count.
void copy_view(const Tensor& src, const View& from, Tensor& dst, const View& to, const Shape& shape);

// A new row-major tensor of `shape` filled from src's view.
Tensor gather_view(const Tensor& src, const View& from, const Shape& shape);


// Fills every element of t with element `at` of `value` (same dtype).
void fill_from(Tensor& t, const Tensor& value, int64_t at = 0);

// Wraps a negative index and checks it against [-dim, dim); out of range is an InvalidArgument
// error naming the node and what the index is for (never an out-of-bounds read).
inline int64_t checked_index(const Node& node, int64_t idx, int64_t dim, const char* what) {
  TERRACE_CHECK(idx >= -dim && idx < dim, InvalidArgument, node.describe(), ": ", what, " index ",
                idx, " is out of range [", -dim, ", ", dim, ")");
  return idx < 0 ? idx + dim : idx;
}

// a * b for sizes; InvalidArgument naming the node when it overflows int64.
inline int64_t checked_mul(const Node& node, int64_t a, int64_t b) {
  int64_t r = 0;
  TERRACE_CHECK(!__builtin_mul_overflow(a, b, &r), InvalidArgument, node.describe(), ": size ",
                a, " * ", b, " overflows int64");
  return r;
}

// An index tensor's values; InvalidArgument naming the node unless it is int32 or int64.
std::vector<int64_t> index_values(const Node& node, const Tensor& t, const char* what);

// A 1-D (or scalar) integer input's values, e.g. a shape, axes or pads input.
std::vector<int64_t> int_list_input(const KernelContext& ctx, size_t i, const char* what);

// Normalizes a list of axes against `rank`; InvalidArgument on duplicates.
std::vector<int64_t> normalize_axes(const Node& node, std::vector<int64_t> axes, int64_t rank);

// Moves block i of `block` elements from src + from[i] to dst + i * block, for every i (offsets
// checked by the caller; the copy itself cannot fail). Split over OpenMP threads by i.
void copy_blocks(const Tensor& src, Tensor& dst, const std::vector<int64_t>& from, int64_t block);

// data with `idx` (already wrapped and checked) picked along `axis`; the picked axis is replaced
// by the dims of `idx_shape` (Gather's semantics).
Tensor take_along(const Tensor& data, size_t axis, const std::vector<int64_t>& idx,
                  const Shape& idx_shape);

// Where the index tuples of GatherND/ScatterND point (shape_gather.cpp).
struct NdIndex {
  Shape out_shape;            // indices.shape[:-1] + data.shape[batch_dims + k:]
  std::vector<int64_t> from;  // element offset in data of each addressed slice, checked
  int64_t slice = 1;          // elements per slice
};
NdIndex nd_index(const Node& node, const Tensor& data, const Tensor& indices, int64_t batch_dims);

// Registration, one function per file, all called from register_shape_kernels (shape.cpp).
void register_shape_view_kernels(KernelTable& t);       // shape.cpp
void register_shape_transpose_kernels(KernelTable& t);  // shape_transpose.cpp
void register_shape_slice_kernels(KernelTable& t);      // shape_slice.cpp
void register_shape_pad_kernels(KernelTable& t);        // shape_pad.cpp
void register_shape_gather_kernels(KernelTable& t);     // shape_gather.cpp
void register_shape_scatter_kernels(KernelTable& t);    // shape_scatter.cpp
void register_shape_resize_kernels(KernelTable& t);     // shape_resize.cpp
void register_shape_gen_kernels(KernelTable& t);        // shape_gen.cpp
void register_shape_unique_kernels(KernelTable& t);     // shape_unique.cpp

}  // namespace terrace::ops
