// Internals of the 'misc' family: the per-file registration hooks (see interp/ops.def).
#pragma once
#include "interp/ops/common.h"

namespace terrace::ops {

void register_misc_nms_kernel(KernelTable& t);          // misc_nms.cpp
void register_misc_signal_kernels(KernelTable& t);      // misc_signal.cpp: windows, DFT, STFT, mel
void register_misc_grid_sample_kernel(KernelTable& t);  // misc_grid_sample.cpp
void register_misc_random_kernels(KernelTable& t);      // misc_random.cpp
void register_misc_string_kernels(KernelTable& t);      // misc_strings.cpp
void register_misc_tfidf_kernel(KernelTable& t);        // misc_tfidf.cpp

// The attribute `name` read as an ONNX TensorProto data type code (e.g. output_datatype, dtype);
// InvalidModel naming node and attribute for codes Terrace lacks.
DType dtype_attr(const Node& node, const char* name, int64_t def);

// True for the storage types of float dtypes (inside dispatch_dtype lambdas).
template <typename T>
constexpr bool is_float_storage = std::is_floating_point_v<T> || std::is_same_v<T, Half> ||
                                  std::is_same_v<T, BFloat16>;

// A double result stored as float storage type T (through float for the narrower types).
template <typename T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, double>) return v;
  else return T(float(v));
}

}  // namespace terrace::ops
