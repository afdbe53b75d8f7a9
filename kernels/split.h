// split_by_domain: a fusion group whose results do not share one iteration domain, cut into
// kernels that each do.
#pragma once
#include <vector>

#include "kernels/fusion_group.h"

namespace terrace::kernels {

// One kernel of a split group, with where its buffers live in the whole group's slot table.
struct KernelPart {
  FusionGroup group;
  std::vector<int> input_slots;   // per group.inputs entry
  std::vector<int> output_slots;  // per group.outputs entry
};

// The whole group's buffers: its inputs (slots 0..n-1), its outputs (n..n+m-1, in
// FusionGroup::outputs order), then intermediates that one part writes and a later part reads.
struct SplitGroup {
  std::vector<KernelPart> parts;  // run in this order
  std::vector<TensorSig> slots;
};

// Assigns each op, in order, to the first part that runs no earlier than its operands' parts and
// whose domain its result broadcasts with; otherwise opens a new part. A group whose results all
// broadcast together stays one part. Two independent chains of shapes [1,128,2304] and [128,128]
// in one region (GPT-2's attention bias and causal mask) become two kernels. The ops' `result`
// fields must be set (infer_result).
SplitGroup split_by_domain(const FusionGroup& group);

}  // namespace terrace::kernels
