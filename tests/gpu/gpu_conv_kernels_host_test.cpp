// tiers/gpu/gpu_conv.cpp's fixed CUDA kernels run on the host, so that their logic is checked where
// there is no GPU: the same source, compiled by tier 1's Clang after a prelude that defines the
// CUDA built-ins for a single thread (gridDim = blockDim = 1: each grid-stride loop walks every
// element). Pools are compared with the interpreter's, exactly (max picks an input; the average
// sums in double in the interpreter's order); the epilogue and the padding copy with their
// definitions. On the GPU the same source runs under GpuConv.* (gpu_conv_test.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "interp/graph_builder.h"
#include "interp/interpreter.h"
#include "jit/cpu/cpu_jit.h"
#include "tests/support/graph_builder.h"
#include "tiers/gpu/gpu_conv.h"

#ifdef TERRACE_HAVE_CUDA

namespace terrace {
namespace {

using testing::random_tensor;
using I = std::vector<int64_t>;

// CUDA's built-ins for one thread on the host.
const char* const kHostPrelude = R"(
struct terrace_dim3 { unsigned x, y, z; };
static const terrace_dim3 blockIdx = {0, 0, 0}, threadIdx = {0, 0, 0}, blockDim = {1, 1, 1}, gridDim = {1, 1, 1};
struct float4 { float x, y, z, w; };
#define __global__
#define __device__
#define __forceinline__ inline
inline float __int_as_float(int i) { return __builtin_bit_cast(float, i); }
)";

struct PoolBlock {
  int64_t v[23];
};
using PoolFn = void (*)(float*, const float*, int64_t, PoolBlock);
using EpilogueFn = void (*)(float*, const float*, const float*, int64_t, int64_t, int64_t, int, float, float);
using PadFn = void (*)(float*, const float*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                       int64_t, int64_t);

struct HostKernels {
  std::shared_ptr<jit::CompiledCode> code;
  PoolFn pool = nullptr;
  EpilogueFn epilogue = nullptr, epilogue4 = nullptr;
  PadFn pad = nullptr;
};

const HostKernels& host_kernels() {
  static HostKernels k = [] {
    HostKernels h;
    h.code = jit::CpuJit::global().compile("gpu_conv_kernels_on_host",
                                           std::string(kHostPrelude) + gpu_conv_kernels_source(),
                                           gpu_conv_kernel_names());
    h.pool = reinterpret_cast<PoolFn>(h.code->symbol("terrace_pool"));
    h.epilogue = reinterpret_cast<EpilogueFn>(h.code->symbol("terrace_conv_epilogue"));
    h.epilogue4 = reinterpret_cast<EpilogueFn>(h.code->symbol("terrace_conv_epilogue4"));
    h.pad = reinterpret_cast<PadFn>(h.code->symbol("terrace_conv_pad"));
    return h;
  }();
  return k;
}

// One pool node over an input of shape x: the kernel's result against the interpreter's.
void expect_pool_matches(const std::string& op, const Shape& x_shape, const Attrs& attrs, bool with_nans = false) {
  GraphBuilder b;
  b.output(b.op(op, {b.input("x", DType::Float32, std::vector<Dim>(x_shape.begin(), x_shape.end()))}, attrs));
  auto g = b.build();
  const Node& node = g->nodes.at(0);
  Tensor x = random_tensor(x_shape, 7, -3, 3);
  if (with_nans)
    for (int64_t i = 0; i < x.numel(); i += 5) x.data<float>()[i] = std::numeric_limits<float>::quiet_NaN();
  Shape y_shape;
  const std::vector<int64_t> block = gpu_pool_params(node, x_shape, &y_shape);
  RValue rx(x);
  const Tensor want = interpret_node(node, {&rx}).at(0).tensor;
  ASSERT_EQ(y_shape, want.shape()) << node.describe();
  Tensor got = Tensor::zeros(DType::Float32, y_shape);
  PoolBlock params;
  std::memcpy(params.v, block.data(), sizeof params.v);
  host_kernels().pool(got.data<float>(), x.data<float>(), got.numel(), params);
  for (int64_t i = 0; i < got.numel(); ++i) {
    const float a = want.data<float>()[i], c = got.data<float>()[i];
    if (std::isnan(a) && std::isnan(c)) continue;
    ASSERT_EQ(a, c) << node.describe() << " over " << shape_str(x_shape) << ": output element " << i;
  }
}

TEST(GpuConvKernelsOnHost, maxpools_match_the_interpreter) {
  expect_pool_matches("MaxPool", {2, 3, 9, 8}, {{"kernel_shape", I{3, 3}}, {"strides", I{2, 2}}, {"pads", I{1, 1, 1, 1}}});
  expect_pool_matches("MaxPool", {1, 4, 13, 11},
                      {{"kernel_shape", I{3, 2}}, {"strides", I{2, 3}}, {"dilations", I{2, 1}}, {"pads", I{1, 0, 2, 1}},
                       {"ceil_mode", 1}});
  expect_pool_matches("MaxPool", {1, 2, 5, 6, 7},
                      {{"kernel_shape", I{2, 3, 2}}, {"strides", I{2, 1, 2}}, {"pads", I{0, 1, 1, 1, 0, 0}}});
  expect_pool_matches("MaxPool", {2, 2, 12}, {{"kernel_shape", I{3}}, {"auto_pad", "SAME_UPPER"}, {"strides", I{2}}});
}

TEST(GpuConvKernelsOnHost, maxpool_passes_over_nan_as_the_interpreter) {
  expect_pool_matches("MaxPool", {1, 3, 8, 8}, {{"kernel_shape", I{2, 2}}, {"strides", I{2, 2}}}, true);
}

TEST(GpuConvKernelsOnHost, average_pools_match_the_interpreter) {
  for (int64_t include : {0, 1}) {
    expect_pool_matches("AveragePool", {2, 3, 10, 9},
                        {{"kernel_shape", I{3, 3}}, {"strides", I{2, 2}}, {"pads", I{1, 2, 0, 1}}, {"ceil_mode", 1},
                         {"count_include_pad", include}});
    expect_pool_matches("AveragePool", {2, 3, 11},
                        {{"kernel_shape", I{4}}, {"strides", I{3}}, {"pads", I{2, 1}}, {"ceil_mode", 1},
                         {"count_include_pad", include}});
    expect_pool_matches("AveragePool", {1, 2, 7, 7},
                        {{"kernel_shape", I{3, 3}}, {"auto_pad", "SAME_LOWER"}, {"count_include_pad", include}});
  }
}

// y = act(y + bias[c] + z), added in that order; float4 and scalar forms agree.
TEST(GpuConvKernelsOnHost, the_epilogue_adds_bias_and_residual_then_activates) {
  const int64_t n = 2, c = 3, spatial = 8, total = n * c * spatial;
  const Tensor y0 = random_tensor({total}, 1, -4, 4), bias = random_tensor({c}, 2), z = random_tensor({total}, 3);
  struct Case {
    int act;
    float lo, hi;
    bool bias, z;
  };
  for (const Case& k : {Case{0, 0, 0, true, false}, Case{1, 0, 0, true, true}, Case{2, 0, 6, false, true},
                        Case{2, -1, 0.5f, true, true}}) {
    for (bool vector : {false, true}) {
      Tensor y = y0.clone();
      const float* bp = k.bias ? bias.data<float>() : nullptr;
      const float* zp = k.z ? z.data<float>() : nullptr;
      if (vector) host_kernels().epilogue4(y.data<float>(), bp, zp, total / 4, spatial / 4, c, k.act, k.lo, k.hi);
      else host_kernels().epilogue(y.data<float>(), bp, zp, total, spatial, c, k.act, k.lo, k.hi);
      for (int64_t i = 0; i < total; ++i) {
        float v = y0.data<float>()[i];
        if (k.bias) v += bias.data<float>()[(i / spatial) % c];
        if (k.z) v += z.data<float>()[i];
        if (k.act == 1) v = v < 0 ? 0 : v;
        if (k.act == 2) v = std::min(std::max(v, k.lo), k.hi);
        ASSERT_EQ(y.data<float>()[i], v) << "act " << k.act << (vector ? " float4" : " scalar") << ", element " << i;
      }
    }
  }
}

// The asymmetric part of a convolution's pads: the input placed at an offset in zeros.
TEST(GpuConvKernelsOnHost, the_padding_copy_places_the_input_among_zeros) {
  const int64_t planes = 6, i1 = 4, i2 = 5, o1 = 6, o2 = 8, b1 = 2, b2 = 1;
  const Tensor x = random_tensor({planes, i1, i2}, 4);
  Tensor y = Tensor::zeros(DType::Float32, {planes, o1, o2});
  host_kernels().pad(y.data<float>(), x.data<float>(), y.numel(), 1, i1, i2, 1, o1, o2, 0, b1, b2);
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t r = 0; r < o1; ++r)
      for (int64_t c = 0; c < o2; ++c) {
        const int64_t sr = r - b1, sc = c - b2;
        const bool inside = sr >= 0 && sr < i1 && sc >= 0 && sc < i2;
        const float want = inside ? x.data<float>()[(p * i1 + sr) * i2 + sc] : 0.0f;
        ASSERT_EQ(y.data<float>()[(p * o1 + r) * o2 + c], want) << "plane " << p << " at " << r << "," << c;
      }
}

}  // namespace
}  // namespace terrace

#endif
