// The graph passes (tiers/passes/, one per file). Each edits a graph in place (the pipeline gives
// it a copy), keeps the names and order of the graph's inputs and outputs and what they compute,
// and returns how many rewrites it made. Subgraphs (If/Loop/Scan bodies) are left as they are: a
// pass treats a node with a body as opaque and never renames or removes a value a body reads.
#pragma once
#include <cstddef>

#include "interp/graph.h"

namespace terrace::passes {

struct PassConfig {
  // A folded result larger than this (bytes) is kept only when it is no larger than the
  // constants it is computed from (a Transpose or Cast of a weight): folding never makes a
  // model's constants grow by more than this per node.
  size_t fold_max_bytes = size_t(1) << 20;
};

// constant_folding.cpp: nodes whose inputs are all constants become initializers, computed by
// the interpreter's own kernels.
int fold_constants(Graph& g, const PassConfig& config = {});

// shape_folding.cpp: Shape, Size and the data movement of shape vectors (Gather, Slice, Concat,
// Unsqueeze, ...) on statically known dims become initializers.
int fold_shapes(Graph& g, const PassConfig& config = {});

// noop_elimination.cpp: Identity, inference Dropout, and ops that provably copy their input
// (Reshape/Flatten/Squeeze/Unsqueeze/Expand/Tile to the same shape, Cast to the same type,
// an identity Transpose, a one-input Concat/Sum/Max/Min/Mean) are removed.
int eliminate_noops(Graph& g, const PassConfig& config = {});

// batchnorm_folding.cpp: an inference BatchNormalization whose input is read only by it and
// comes from a Conv or Gemm with constant weights is folded into that Conv's or Gemm's weights
// and bias.
int fold_batchnorm(Graph& g, const PassConfig& config = {});

// dead_code.cpp: nodes whose results nobody reads, and values and initializers nothing refers to.
int eliminate_dead_code(Graph& g, const PassConfig& config = {});

}  // namespace terrace::passes
