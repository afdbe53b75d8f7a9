// NonMaxSuppression: greedy per-(batch, class) selection by score, suppressing by IoU.
#include <algorithm>
#include <numeric>
#include <optional>

#include "interp/ops/misc_kernels.h"

namespace terrace::ops {
namespace {

struct Box {
  float y1, x1, y2, x2;  // corners with y1 <= y2, x1 <= x2
  float area() const { return (y2 - y1) * (x2 - x1); }
};

// Box b of a [N, 4] block: corners [y1, x1, y2, x2] in either order, or [xc, yc, w, h].
Box read_box(const float* p, bool center_point) {
  if (center_point) {
    float hw = p[2] / 2, hh = p[3] / 2;
    return {p[1] - hh, p[0] - hw, p[1] + hh, p[0] + hw};
  }
  return {std::min(p[0], p[2]), std::min(p[1], p[3]), std::max(p[0], p[2]),
          std::max(p[1], p[3])};
}

// True when the boxes overlap by more than the threshold (degenerate boxes never suppress).
bool suppresses(const Box& a, const Box& b, float iou_threshold) {
  float ih = std::min(a.y2, b.y2) - std::max(a.y1, b.y1);
  float iw = std::min(a.x2, b.x2) - std::max(a.x1, b.x1);
  if (ih <= 0 || iw <= 0) return false;
  float inter = ih * iw, uni = a.area() + b.area() - inter;
  if (a.area() <= 0 || b.area() <= 0 || uni <= 0) return false;
  return inter / uni > iou_threshold;
}

// Indices kept for one (batch, class): candidates above the score threshold in descending score
// (ties: lower index first), each kept unless a kept box suppresses it.
std::vector<int64_t> select_boxes(const std::vector<Box>& boxes, const float* scores,
                                  int64_t max_out, float iou_threshold,
                                  std::optional<float> score_threshold) {
  std::vector<int64_t> order;
  for (int64_t i = 0; i < int64_t(boxes.size()); ++i)
    if (!score_threshold || scores[i] > *score_threshold) order.push_back(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return scores[a] > scores[b]; });
  std::vector<int64_t> kept;
  for (int64_t i : order) {
    if (int64_t(kept.size()) >= max_out) break;
    bool keep = std::none_of(kept.begin(), kept.end(), [&](int64_t k) {
      return suppresses(boxes[size_t(k)], boxes[size_t(i)], iou_threshold);
    });
    if (keep) kept.push_back(i);
  }
  return kept;
}

float optional_float(KernelContext& ctx, size_t i, float def) {
  if (!ctx.has_input(i)) return def;
  const Tensor& t = ctx.input(i);
  TERRACE_CHECK(t.numel() == 1 && is_float(t.dtype()), InvalidArgument, ctx.node.describe(),
                ": input ", i, " must be a one-element float tensor");
  return float(t.get_as_double(0));
}

void non_max_suppression(KernelContext& ctx) {
  const Node& node = ctx.node;
  const Tensor& boxes = ctx.input(0);
  const Tensor& scores = ctx.input(1);
  TERRACE_CHECK(boxes.dtype() == DType::Float32 && scores.dtype() == DType::Float32,
                InvalidArgument, node.describe(), ": boxes and scores must be float32");
  TERRACE_CHECK(boxes.rank() == 3 && boxes.dim(2) == 4 && scores.rank() == 3 &&
                    scores.dim(0) == boxes.dim(0) && scores.dim(2) == boxes.dim(1),
                InvalidArgument, node.describe(), ": boxes ", shape_str(boxes.shape()),
                " and scores ", shape_str(scores.shape()),
                " must be [batch, boxes, 4] and [batch, classes, boxes]");
  int64_t max_out = 0;
  if (ctx.has_input(2)) {
    const Tensor& m = ctx.input(2);
    TERRACE_CHECK(m.numel() == 1 && is_integer(m.dtype()), InvalidArgument, node.describe(),
                  ": max_output_boxes_per_class must be a one-element integer tensor");
    max_out = m.get_as_int64(0);
  }
  const float iou = optional_float(ctx, 3, 0.f);
  std::optional<float> score_threshold;
  if (ctx.has_input(4)) score_threshold = optional_float(ctx, 4, 0.f);
  const bool center = node.attr_int("center_point_box", 0) != 0;

  const int64_t batches = boxes.dim(0), n = boxes.dim(1), classes = scores.dim(1);
  std::vector<int64_t> rows;  // (batch, class, box) triples
  for (int64_t b = 0; b < batches && max_out > 0; ++b) {
    std::vector<Box> bx(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) bx[size_t(i)] = read_box(boxes.data<float>() + (b * n + i) * 4, center);
    for (int64_t c = 0; c < classes; ++c)
      for (int64_t i : select_boxes(bx, scores.data<float>() + (b * classes + c) * n, max_out,
                                    iou, score_threshold))
        rows.insert(rows.end(), {b, c, i});
  }
  Tensor out = Tensor::empty(DType::Int64, {int64_t(rows.size() / 3), 3});
  std::copy(rows.begin(), rows.end(), out.data<int64_t>());
  ctx.set_output(0, std::move(out));
}

}  // namespace

void register_misc_nms_kernel(KernelTable& t) { t.add(Op::NonMaxSuppression, non_max_suppression); }

}  // namespace terrace::ops
