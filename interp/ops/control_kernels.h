// Internals of the 'control' family: the per-file registration hooks and the tensor stacking and
// slicing helpers that Loop, Scan and the sequence ops share.
#pragma once
#include "interp/ops/common.h"

namespace terrace::ops {

void register_control_scan_kernel(KernelTable& t);       // control_scan.cpp
void register_control_sequence_kernels(KernelTable& t);  // control_sequence.cpp: sequences and optionals
void register_control_sequence_map_kernel(KernelTable& t);  // control_sequence_map.cpp

// Copies `count` elements of src starting at src_off into dst at dst_off (same dtype; strings are
// copied by value).
void copy_elements(const Tensor& src, int64_t src_off, Tensor& dst, int64_t dst_off,
                   int64_t count);

// Joins `parts` along `axis`; with new_axis the parts are stacked along a new axis inserted at
// `axis` (axis is already normalised). Parts must share dtype and all other dims; an
// InvalidArgument error naming the node otherwise. At least one part is required.
Tensor concat_tensors(const Node& node, const std::vector<Tensor>& parts, int64_t axis,
                      bool new_axis);

// Elements [start, start + len) of t along axis, keeping the axis.
Tensor slice_axis(const Tensor& t, int64_t axis, int64_t start, int64_t len);

// Element i of t along axis, with the axis removed.
Tensor select_axis(const Tensor& t, int64_t axis, int64_t i);

// The value of a one-element tensor input read as a scalar (`what` names it in errors).
bool read_bool_scalar(const Node& node, const RValue& v, const char* what);
int64_t read_int_scalar(const Node& node, const RValue& v, const char* what);

}  // namespace terrace::ops
