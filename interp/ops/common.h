// Helpers shared by the reference kernels: axes, broadcasting, index iteration.
#pragma once
#include <cmath>
#include <initializer_list>
#include <string_view>
#include <vector>

#include "interp/kernel.h"

namespace terrace::ops {

// Maps a possibly negative axis into [0, rank); InvalidModel naming the node when out of range.
int64_t normalize_axis(const Node& node, int64_t axis, int64_t rank);

// The most elements one result may hold (2^40: 4 TiB of float32, past any host's memory). Sizes
// computed from attributes or input values are checked against it before anything is allocated.
inline constexpr int64_t kMaxElements = int64_t(1) << 40;
// The product of `dims` (each >= 0), checked for int64 overflow and against kMaxElements;
// InvalidArgument naming the node and `what` (e.g. "attributes output_height x output_width").
int64_t checked_numel(const Node& node, std::initializer_list<int64_t> dims, std::string_view what);

// The multidirectional (numpy) broadcast of two shapes; InvalidArgument naming the node if they
// do not broadcast.
Shape broadcast_shapes(const Node& node, const Shape& a, const Shape& b);

// Strides (in elements) to read a tensor of shape `in` as if broadcast to `out`: 0 on broadcast
// dims, with leading dims added. out.size() >= in.size().
std::vector<int64_t> broadcast_strides(const Shape& in, const Shape& out);

// Walks the indices of `shape` in row-major order, keeping up to 3 strided offsets in step.
// Usage: for (StridedIter it(shape, {sa, sb}); !it.done(); it.next()) use(it.offset(0), it.offset(1));
class StridedIter {
 public:
  StridedIter(const Shape& shape, std::vector<std::vector<int64_t>> strides, int64_t start = 0);
  bool done() const { return pos_ >= total_; }
  int64_t pos() const { return pos_; }
  int64_t offset(size_t k) const { return off_[k]; }
  void next();

 private:
  Shape shape_;
  std::vector<std::vector<int64_t>> strides_;
  std::vector<int64_t> idx_;
  std::vector<int64_t> off_;
  int64_t pos_ = 0, total_ = 0;
};

// Applies f(out_index, offset_a, offset_b) over the broadcast of a and b into `out` (row-major),
// split across OpenMP threads in fixed contiguous chunks (deterministic for any thread count).
template <typename F>
void for_each_broadcast(const Shape& out, const std::vector<int64_t>& sa,
                        const std::vector<int64_t>& sb, F&& f) {
  int64_t total = shape_numel(out);
  constexpr int64_t kChunk = 1 << 14;
  int64_t chunks = (total + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    int64_t end = std::min(total, (c + 1) * kChunk);
    for (StridedIter it(out, {sa, sb}, c * kChunk); it.pos() < end; it.next())
      f(it.pos(), it.offset(0), it.offset(1));
  }
}

}  // namespace terrace::ops
