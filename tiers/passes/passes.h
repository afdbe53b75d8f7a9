// The graph passes (tiers/passes/, one per file). Each edits a graph in place (the pipeline gives
// it a copy), keeps the names and order of the graph's inputs and outputs and what they compute,
// and returns how many rewrites it made. Subgraphs (If/Loop/Scan bodies) are left as they are: a
// pass treats a node with a body as opaque and never renames or removes a value a body reads.
#pragma once
#include <cstddef>
#include <vector>

#include "interp/graph.h"

namespace terrace::passes {

struct PassConfig {
  // A folded result larger than this (bytes) is kept only when it is no larger than the
  // constants it is computed from (a Transpose or Cast of a weight): folding never makes a
  // model's constants grow by more than this per node.
  size_t fold_max_bytes = size_t(1) << 20;
  // For tests of terrace validate only (TERRACE_FAULT=wrong-pass:NAME sets it for pass NAME): the
  // pass makes a deliberately wrong rewrite where it has one (constant folding doubles the float32
  // results it folds, LayerNorm fusion uses epsilon 1).
  bool deliberately_wrong = false;
  // Attention blocks become one Attention op (attention.cpp). Off by default: only tier 2 compiles
  // Attention (Backend::configure_passes turns it on), elsewhere a fused block would be a graph
  // break where its five ops compile today. Where set, only blocks of `attention_dtype` and head
  // sizes up to `attention_max_head` fuse: what the compiling tier takes.
  bool fuse_attention = false;
  DType attention_dtype = DType::Float32;
  int64_t attention_max_head = 128;
};

// constant_folding.cpp: nodes whose inputs are all constants become initializers, computed by
// the interpreter's own kernels.
int fold_constants(Graph& g, const PassConfig& config = {});

// shape_folding.cpp: Shape, Size and the data movement of shape vectors (Gather, Slice, Concat,
// Unsqueeze, ...) on statically known dims become initializers.
int fold_shapes(Graph& g, const PassConfig& config = {});

// reshape_targets.cpp: a Reshape target computed from Shape on symbolic dims, each of which is the
// reshaped input's own dim at that position (the same dim name), becomes a constant with 0 there.
int fold_reshape_targets(Graph& g, const PassConfig& config = {});

// noop_elimination.cpp: Identity, inference Dropout, and ops that provably copy their input
// (Reshape/Flatten/Squeeze/Unsqueeze/Expand/Tile to the same shape, Cast to the same type,
// an identity Transpose, a one-input Concat/Sum/Max/Min/Mean) are removed.
int eliminate_noops(Graph& g, const PassConfig& config = {});

// batchnorm_folding.cpp: an inference BatchNormalization whose input is read only by it and
// comes from a Conv or Gemm with constant weights is folded into that Conv's or Gemm's weights
// and bias; one with constant parameters otherwise becomes a per-channel Mul and Add.
int fold_batchnorm(Graph& g, const PassConfig& config = {});

// layernorm_fusion.cpp: the exporters' decomposed layer normalization (ReduceMean, Sub, Pow,
// ReduceMean, Add epsilon, Sqrt, Div, then Mul gamma and Add beta) becomes one LayerNormalization.
int fuse_layernorm(Graph& g, const PassConfig& config = {});

// gelu_fusion.cpp: the exporters' decomposed GELU (x * 0.5 * (1 + Erf(x / sqrt 2)), in its
// orderings, and the tanh approximation) becomes one Gelu.
int fuse_gelu(Graph& g, const PassConfig& config = {});

// hardswish_fusion.cpp: the exporters' decomposed HardSwish (x * Clip(x + 3, 0, 6) / 6, in its
// orderings) becomes one HardSwish.
int fuse_hardswish(Graph& g, const PassConfig& config = {});

// attention.cpp: scaled dot-product attention blocks, Softmax(MatMul(Q, Kt) [scaled] [masked]) @ V
// with every value in between read by the block alone, found and rewritten into Attention (run by
// the pipeline only with PassConfig::fuse_attention: no tier compiles Attention yet).
struct AttentionBlock {
  enum class MaskKind { None, Additive, WhereNegInf };  // + mask, or Where(mask, -inf, scores)
  int q = -1, k_transposed = -1, v = -1, mask = -1;     // value ids (mask -1: none)
  MaskKind mask_kind = MaskKind::None;
  double scale = 1;                                     // the scores' factor (1 when not scaled)
  int softmax = -1, output_matmul = -1;                 // node indices
  std::vector<int> nodes;                               // every node of the block, in graph order
};
std::vector<AttentionBlock> find_attention(const Graph& g);
// The blocks Attention computes exactly (4-D Q, K^T, V of one batch and head count, a mask that
// does not widen the scores) become Attention(Q, Transpose(Kt), V, mask) {scale}.
int fuse_attention(Graph& g, const PassConfig& config = {});

// shape_inference.cpp: values whose shapes the rewrites made computable (a Reshape whose target
// became a constant) get them in their ValueInfo, through the import's shape inference; returns
// how many values learnt a shape or a dim.
int infer_static_shapes(Graph& g, const PassConfig& config = {});

// dead_code.cpp: nodes whose results nobody reads, and values and initializers nothing refers to.
int eliminate_dead_code(Graph& g, const PassConfig& config = {});

}  // namespace terrace::passes
