// Registration hooks of the linalg family's kernel files (linalg.cpp registers them all).
#pragma once
#include "interp/kernel.h"

namespace terrace::ops {

void register_quantized_matmul_kernels(KernelTable& t);  // linalg_quant.cpp
void register_conv_kernels(KernelTable& t);              // conv.cpp, conv_transpose.cpp
void register_conv_transpose_kernel(KernelTable& t);     // conv_transpose.cpp
void register_einsum_kernel(KernelTable& t);             // einsum.cpp
void register_deform_conv_kernel(KernelTable& t);        // conv_deform.cpp

// Input `data_input` (uint8 or int8) minus its zero point (input `zp_input`, optional: 0) as
// int32. Element i uses zero point (i / inner) % channels; a scalar zero point serves all.
Tensor subtract_zero_point(const KernelContext& ctx, size_t data_input, size_t zp_input,
                           int64_t inner, int64_t channels);

}  // namespace terrace::ops
