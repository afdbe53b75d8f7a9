// Opset 23's transformer ops: RMSNormalization, RotaryEmbedding and Attention, computed in double
// and rounded once to the input's type, following ONNX's reference (onnx/reference/ops/op_*.py).
#include <cmath>
#include <limits>

#include "interp/ops/nn.h"

namespace terrace::ops {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// A tensor's elements as doubles (row-major), and back.
std::vector<double> doubles(const Tensor& t) {
  std::vector<double> v(size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[size_t(i)] = t.get_as_double(i);
  return v;
}

Tensor tensor_of(const std::vector<double>& v, const Shape& shape, DType dtype) {
  return Tensor::from_vector<double>(shape, v).cast(dtype);
}

void check_float(const Node& node, const Tensor& t, const char* what) {
  TERRACE_CHECK(is_float(t.dtype()), InvalidArgument, node.describe(), ": ", what, " must be a float tensor, got ",
                dtype_name(t.dtype()));
}

// Per dim of `out`, the stride to read a tensor of `shape` broadcast (right-aligned) to it.
std::vector<int64_t> broadcast_strides(const Node& node, const Shape& shape, const Shape& out, const char* what) {
  TERRACE_CHECK(shape.size() <= out.size(), InvalidArgument, node.describe(), ": ", what, " of rank ", shape.size(),
                " does not broadcast to rank ", out.size());
  std::vector<int64_t> strides(out.size(), 0), own = row_major_strides(shape);
  size_t lead = out.size() - shape.size();
  for (size_t d = 0; d < shape.size(); ++d) {
    TERRACE_CHECK(shape[d] == out[lead + d] || shape[d] == 1, InvalidArgument, node.describe(), ": ", what,
                  " dim ", d, " is ", shape[d], ", which does not broadcast to ", out[lead + d]);
    strides[lead + d] = shape[d] == 1 ? 0 : own[d];
  }
  return strides;
}

int64_t offset_of(int64_t flat, const Shape& out, const std::vector<int64_t>& strides) {
  int64_t off = 0;
  for (int64_t d = int64_t(out.size()) - 1; d >= 0; --d) {
    off += (flat % out[size_t(d)]) * strides[size_t(d)];
    flat /= out[size_t(d)];
  }
  return off;
}

// Y = X / sqrt(mean(X^2 over axes axis..) + epsilon) * scale.
void rms_normalization_kernel(KernelContext& ctx) {
  const Node& node = ctx.node;
  const Tensor& x = ctx.input(0);
  const Tensor& scale = ctx.input(1);
  check_float(node, x, "X");
  check_float(node, scale, "scale");
  TERRACE_CHECK(x.rank() >= 1, InvalidArgument, node.describe(), ": X must have rank 1 or more");
  const int64_t axis = normalize_axis(node, node.attr_int("axis", -1), x.rank());
  const double eps = node.attr_float("epsilon", 1e-5f);
  int64_t inner = 1;
  for (int64_t d = axis; d < x.rank(); ++d) inner *= x.dim(d);
  const std::vector<int64_t> ss = broadcast_strides(node, scale.shape(), x.shape(), "scale");
  const std::vector<double> xv = doubles(x), sv = doubles(scale);
  std::vector<double> y(xv.size());
  const int64_t groups = inner ? x.numel() / inner : 0;
  for (int64_t g = 0; g < groups; ++g) {
    double sum = 0;
    for (int64_t j = 0; j < inner; ++j) sum += xv[size_t(g * inner + j)] * xv[size_t(g * inner + j)];
    const double r = 1 / std::sqrt(sum / double(inner) + eps);
    for (int64_t j = 0; j < inner; ++j) {
      int64_t i = g * inner + j;
      y[size_t(i)] = xv[size_t(i)] * r * sv[size_t(offset_of(i, x.shape(), ss))];
    }
  }
  ctx.set_output(0, tensor_of(y, x.shape(), x.dtype()));
}

// Rotates pairs of X's features by the angles in cos_cache/sin_cache (indexed by position_ids,
// or one per batch and position without them): halves, or even/odd features when interleaved.
void rotary_embedding_kernel(KernelContext& ctx) {
  const Node& node = ctx.node;
  const Tensor& x = ctx.input(0);
  check_float(node, x, "X");
  TERRACE_CHECK(x.rank() == 3 || x.rank() == 4, InvalidArgument, node.describe(), ": X must have rank 3 or 4, got ",
                x.rank());
  // The view [batch, seq, heads, head_size] of X, as strides into X.
  const int64_t batch = x.dim(0);
  int64_t seq, heads, head;
  std::vector<int64_t> st = row_major_strides(x.shape());
  int64_t s_batch = st[0], s_seq, s_head, s_feat = 1;
  if (x.rank() == 4) {  // [batch, heads, seq, head_size]
    heads = x.dim(1), seq = x.dim(2), head = x.dim(3);
    s_head = st[1], s_seq = st[2];
  } else {
    heads = node.attr_int("num_heads", 0);
    TERRACE_CHECK(heads > 0 && x.dim(2) % heads == 0, InvalidArgument, node.describe(),
                  ": a 3-D X needs num_heads dividing its hidden size ", x.dim(2), ", got ", heads);
    seq = x.dim(1), head = x.dim(2) / heads;
    s_seq = st[1], s_head = head;
  }
  int64_t rot = node.attr_int("rotary_embedding_dim", 0);
  if (rot == 0) rot = head;
  TERRACE_CHECK(rot > 0 && rot <= head && rot % 2 == 0, InvalidArgument, node.describe(),
                ": rotary_embedding_dim ", rot, " must be even and at most the head size ", head);
  const int64_t half = rot / 2;
  const bool interleaved = node.attr_int("interleaved", 0) != 0;
  const Tensor& cos_t = ctx.input(1);
  const Tensor& sin_t = ctx.input(2);
  TERRACE_CHECK(cos_t.shape() == sin_t.shape(), InvalidArgument, node.describe(), ": cos_cache and sin_cache differ in shape");
  const bool by_position = ctx.has_input(3);
  std::vector<int64_t> positions;
  if (by_position) {
    TERRACE_CHECK(cos_t.rank() == 2 && cos_t.dim(1) >= half, InvalidArgument, node.describe(),
                  ": with position_ids, the caches must be [max_position, >= ", half, "]");
    const Tensor& p = ctx.input(3);
    TERRACE_CHECK(p.shape() == Shape({batch, seq}), InvalidArgument, node.describe(), ": position_ids must be [",
                  batch, ", ", seq, "]");
    positions = p.to_int64_vector();
    for (int64_t v : positions)
      TERRACE_CHECK(v >= 0 && v < cos_t.dim(0), InvalidArgument, node.describe(), ": position id ", v,
                    " is outside the caches' ", cos_t.dim(0), " rows");
  } else {
    TERRACE_CHECK(cos_t.rank() == 3 && cos_t.dim(0) == batch && cos_t.dim(1) == seq && cos_t.dim(2) >= half,
                  InvalidArgument, node.describe(), ": without position_ids, the caches must be [", batch, ", ",
                  seq, ", >= ", half, "]");
  }
  const int64_t cache_row = by_position ? cos_t.dim(1) : cos_t.dim(2);
  const std::vector<double> xv = doubles(x), cv = doubles(cos_t), sv = doubles(sin_t);
  std::vector<double> y = xv;  // features past rot pass through
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0; s < seq; ++s) {
      const int64_t row = by_position ? positions[size_t(b * seq + s)] : b * seq + s;
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t base = b * s_batch + s * s_seq + h * s_head;
        for (int64_t i = 0; i < half; ++i) {
          const double c = cv[size_t(row * cache_row + i)], sn = sv[size_t(row * cache_row + i)];
          const int64_t a1 = base + (interleaved ? 2 * i : i) * s_feat;
          const int64_t a2 = base + (interleaved ? 2 * i + 1 : i + half) * s_feat;
          const double x1 = xv[size_t(a1)], x2 = xv[size_t(a2)];
          y[size_t(a1)] = c * x1 - sn * x2;
          y[size_t(a2)] = sn * x1 + c * x2;
        }
      }
    }
  ctx.set_output(0, tensor_of(y, x.shape(), x.dtype()));
}

// A [batch, heads, seq, size] view of Q, K or V: 4-D as given; 3-D [batch, seq, hidden] read as
// ONNX's reference does, a plain reshape to [batch, heads, seq, hidden / heads].
struct Heads {
  int64_t batch = 0, heads = 0, seq = 0, size = 0;
  std::vector<double> v;
  double at(int64_t b, int64_t h, int64_t s, int64_t k) const {
    return v[size_t(((b * heads + h) * seq + s) * size + k)];
  }
};

Heads heads_of(const Node& node, const Tensor& t, const char* what, int64_t num_heads) {
  check_float(node, t, what);
  Heads h;
  if (t.rank() == 4) {
    h.batch = t.dim(0), h.heads = t.dim(1), h.seq = t.dim(2), h.size = t.dim(3);
  } else {
    TERRACE_CHECK(t.rank() == 3, InvalidArgument, node.describe(), ": ", what, " must have rank 3 or 4, got ", t.rank());
    TERRACE_CHECK(num_heads > 0 && t.dim(2) % num_heads == 0, InvalidArgument, node.describe(), ": 3-D ", what,
                  " needs q_num_heads and kv_num_heads dividing its hidden size ", t.dim(2));
    h.batch = t.dim(0), h.heads = num_heads, h.seq = t.dim(1), h.size = t.dim(2) / num_heads;
  }
  h.v = doubles(t);
  return h;
}

// Past and new keys (or values) along the sequence: ONNX's present_key / present_value.
Heads concat_past(const Node& node, const KernelContext& ctx, size_t past_at, const Heads& now, const char* what) {
  if (!ctx.has_input(past_at)) return now;
  const Tensor& p = ctx.input(past_at);
  TERRACE_CHECK(p.rank() == 4 && p.dim(0) == now.batch && p.dim(1) == now.heads && p.dim(3) == now.size,
                InvalidArgument, node.describe(), ": ", what, " must be [", now.batch, ", ", now.heads, ", *, ",
                now.size, "]");
  Heads past = heads_of(node, p, what, 0);
  Heads all = now;
  all.seq = past.seq + now.seq;
  all.v.assign(size_t(all.batch * all.heads * all.seq * all.size), 0.0);
  for (int64_t b = 0; b < all.batch; ++b)
    for (int64_t h = 0; h < all.heads; ++h)
      for (int64_t s = 0; s < all.seq; ++s)
        for (int64_t k = 0; k < all.size; ++k)
          all.v[size_t(((b * all.heads + h) * all.seq + s) * all.size + k)] =
              s < past.seq ? past.at(b, h, s, k) : now.at(b, h, s - past.seq, k);
  return all;
}

// Attention's attn_mask: its values, and its strides broadcast to the scores [B, H, L, S].
struct AttentionMask {
  std::vector<double> values;
  std::vector<int64_t> strides;
  bool is_bool = false;  // true: attend where set; float: added to the scores
};
AttentionMask attention_mask(const Node& node, const Tensor& m, const Shape& scores_shape) {
  AttentionMask mask;
  mask.is_bool = m.dtype() == DType::Bool;
  TERRACE_CHECK(mask.is_bool || is_float(m.dtype()), InvalidArgument, node.describe(), ": attn_mask must be bool or float");
  mask.strides = broadcast_strides(node, m.shape(), scores_shape, "attn_mask");
  mask.values = doubles(m);
  return mask;
}

// [B, H, L, Ev] -> [B, L, H * Ev]: the heads side by side again, for 3-D inputs.
std::vector<double> merge_heads(const std::vector<double>& y, int64_t B, int64_t H, int64_t L, int64_t Ev) {
  std::vector<double> t(y.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < L; ++i)
        for (int64_t k = 0; k < Ev; ++k)
          t[size_t(((b * L + i) * H + h) * Ev + k)] = y[size_t(((b * H + h) * L + i) * Ev + k)];
  return t;
}

// softmax(Q K^T * scale + mask, softcapped) V, with grouped heads (query head h reads key/value
// head h mod kv_heads, as ONNX's reference tiles them), past keys and values, and the optional
// QK output (qk_matmul_output_mode 0: scaled QK, 1: plus the mask, 2: softcapped, 3: softmax).
void attention_kernel(KernelContext& ctx) {
  const Node& node = ctx.node;
  const Tensor& qt = ctx.input(0);
  const Tensor& kt = ctx.input(1);
  const Tensor& vt = ctx.input(2);
  TERRACE_CHECK(qt.rank() == kt.rank() && kt.rank() == vt.rank(), InvalidArgument, node.describe(),
                ": Q, K and V must have one rank");
  const Heads q = heads_of(node, qt, "Q", node.attr_int("q_num_heads", 0));
  const int64_t kv_heads = node.attr_int("kv_num_heads", 0);
  const Heads key = concat_past(node, ctx, 4, heads_of(node, kt, "K", kv_heads), "past_key");
  const Heads val = concat_past(node, ctx, 5, heads_of(node, vt, "V", kv_heads), "past_value");
  TERRACE_CHECK(key.batch == q.batch && val.batch == q.batch && key.size == q.size && val.heads == key.heads &&
                    val.seq == key.seq,
                InvalidArgument, node.describe(), ": Q, K and V disagree in batch, heads, sequence or head size");
  TERRACE_CHECK(key.heads > 0 && q.heads % key.heads == 0, InvalidArgument, node.describe(), ": ", q.heads,
                " query heads are not a multiple of ", key.heads, " key/value heads");
  const int64_t B = q.batch, H = q.heads, L = q.seq, S = key.seq, E = q.size, Ev = val.size;
  const double scale = node.has_attr("scale") ? double(node.attr_float("scale", 1.0f)) : 1 / std::sqrt(double(E));
  const double root = std::sqrt(scale);  // the reference scales Q and K each by sqrt(scale)
  const bool causal = node.attr_int("is_causal", 0) != 0;
  const double softcap = node.attr_float("softcap", 0.0f);
  const int64_t qk_mode = node.attr_int("qk_matmul_output_mode", 0);
  TERRACE_CHECK(qk_mode >= 0 && qk_mode <= 3, InvalidModel, node.describe(), ": qk_matmul_output_mode ", qk_mode,
                " is not 0 to 3");
  const Shape scores_shape = {B, H, L, S};
  const bool has_mask = ctx.has_input(3);
  TERRACE_CHECK(!(has_mask && causal), InvalidModel, node.describe(), ": is_causal and attn_mask exclude each other");
  const AttentionMask mask_in = has_mask ? attention_mask(node, ctx.input(3), scores_shape) : AttentionMask{};
  const std::vector<double>& mask = mask_in.values;
  const std::vector<int64_t>& mask_strides = mask_in.strides;
  const bool bool_mask = mask_in.is_bool;
  std::vector<double> y(size_t(B * H * L * Ev), 0.0), qk_out;
  if (ctx.wants_output(3)) qk_out.resize(size_t(B * H * L * S));
  std::vector<double> row(static_cast<size_t>(S)), raw(static_cast<size_t>(S));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kh = h % key.heads;
      for (int64_t i = 0; i < L; ++i) {
        const int64_t flat = ((b * H + h) * L + i) * S;
        for (int64_t j = 0; j < S; ++j) {
          double dot = 0;
          for (int64_t k = 0; k < E; ++k) dot += (q.at(b, h, i, k) * root) * (key.at(b, kh, j, k) * root);
          raw[size_t(j)] = dot;
          double bias = causal && j > i ? -kInf : 0.0;
          if (has_mask) {
            double mv = mask[size_t(offset_of(flat + j, scores_shape, mask_strides))];
            bias = bool_mask ? (mv != 0 ? 0.0 : -kInf) : mv;
          }
          row[size_t(j)] = dot + bias;
          if (qk_mode == 1) raw[size_t(j)] = row[size_t(j)];
          if (softcap > 0) row[size_t(j)] = softcap * std::tanh(row[size_t(j)] / softcap);
          if (qk_mode == 2) raw[size_t(j)] = row[size_t(j)];
        }
        double mx = -kInf, sum = 0;
        for (double v : row) mx = std::max(mx, v);
        for (double& v : row) sum += (v = std::exp(v - mx));
        for (double& v : row) v /= sum;
        if (!qk_out.empty())
          for (int64_t j = 0; j < S; ++j) qk_out[size_t(flat + j)] = qk_mode == 3 ? row[size_t(j)] : raw[size_t(j)];
        for (int64_t k = 0; k < Ev; ++k) {
          double acc = 0;
          for (int64_t j = 0; j < S; ++j) acc += row[size_t(j)] * val.at(b, kh, j, k);
          y[size_t(((b * H + h) * L + i) * Ev + k)] = acc;
        }
      }
    }
  if (qt.rank() == 3) {
    ctx.set_output(0, tensor_of(merge_heads(y, B, H, L, Ev), {B, L, H * Ev}, qt.dtype()));
  } else {
    ctx.set_output(0, tensor_of(y, {B, H, L, Ev}, qt.dtype()));
  }
  if (ctx.wants_output(1)) ctx.set_output(1, tensor_of(key.v, {B, key.heads, S, E}, kt.dtype()));
  if (ctx.wants_output(2)) ctx.set_output(2, tensor_of(val.v, {B, val.heads, S, Ev}, vt.dtype()));
  if (ctx.wants_output(3)) ctx.set_output(3, tensor_of(qk_out, scores_shape, qt.dtype()));
}

}  // namespace

void register_nn_attention_kernels(KernelTable& t) {
  t.add(Op::RMSNormalization, rms_normalization_kernel);
  t.add(Op::RotaryEmbedding, rotary_embedding_kernel);
  t.add(Op::Attention, attention_kernel);
}

}  // namespace terrace::ops
