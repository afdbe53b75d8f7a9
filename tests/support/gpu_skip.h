// GPU tests skip, naming the reason, on a machine without a CUDA driver or device.
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "jit/cuda/cuda_driver.h"

#define SKIP_WITHOUT_GPU()                                                                    \
  do {                                                                                        \
    std::string why_;                                                                         \
    if (!::terrace::jit::cuda::gpu_available(&why_)) GTEST_SKIP() << "no GPU: " << why_;      \
  } while (0)
