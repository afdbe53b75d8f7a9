// Rendered CUDA kernels run on the GPU (skipped with the driver's reason where there is none): the
// CUDA prelude's exp, tanh and sigmoid meet the C++ prelude's accuracy bounds over the same sweep
// (tests/support/math_sweep.h), and kernels of every schedule give the host's answer with the
// launch cuda_launch chooses, with a one-block grid (the grid-stride loops take the rest) and
// with buffers one element off 16-byte alignment (the vector path's scalar fallback).
#ifdef TERRACE_HAVE_CUDA
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "jit/cuda_driver.h"
#include "jit/cuda_memory.h"
#include "jit/nvrtc.h"
#include "kernels/lower.h"
#include "kernels/lower_op.h"
#include "kernels/render_c.h"
#include "kernels/schedule_cuda.h"
#include "tests/support/attrs.h"
#include "tests/support/math_sweep.h"

namespace terrace::kernels {
namespace {

namespace cuda = jit::cuda;

#define SKIP_WITHOUT_GPU()                                         \
  do {                                                             \
    std::string why_;                                              \
    if (!cuda::gpu_available(&why_)) GTEST_SKIP() << "no GPU: " << why_; \
  } while (0)

// Host data in a device buffer, `offset` bytes past the allocation's (256-byte aligned) start.
struct DeviceArray {
  cuda::DeviceBuffer buffer;
  size_t offset = 0, bytes = 0;
  CUdeviceptr ptr() const { return buffer.ptr() + offset; }
};

DeviceArray to_device(const void* data, size_t bytes, size_t offset, const cuda::Stream& s) {
  DeviceArray a{cuda::DeviceBuffer(bytes + offset + 16, s.get()), offset, bytes};
  if (bytes) cuda::copy_to_device(a.ptr(), data, bytes, s);
  return a;
}

std::vector<char> to_host(const DeviceArray& a, const cuda::Stream& s) {
  std::vector<char> out(a.bytes);
  if (a.bytes) cuda::copy_to_host(out.data(), a.ptr(), a.bytes, s);
  s.synchronize();
  return out;
}

// Runs f over [0, parallel_extent) on `args` (one device pointer per buffer, in f.buffers order).
void launch(const cuda::Module& m, const LoweredFunc& f, std::vector<CUdeviceptr> args, const cuda::Stream& s,
            bool one_block) {
  const CudaSchedule sched = schedule_cuda(f);
  CudaLaunch l = cuda_launch(sched, 0, f.parallel_extent, cuda::device().multiprocessors);
  if (one_block) l.grid = 1;
  std::vector<void*> params;
  for (CUdeviceptr& p : args) params.push_back(&p);
  int64_t begin = 0, end = f.parallel_extent;
  params.push_back(&begin);
  params.push_back(&end);
  cuda::launch(m.function(f.name), cuda::LaunchConfig{l.grid, l.block, 0}, s, params.data());
}

// ---- the prelude's accuracy on the GPU ----

std::vector<float> apply_on_gpu(const std::string& fn, const std::vector<float>& xs) {
  const std::string kernel =
      "extern \"C\" __global__ void apply(const float* __restrict__ x, float* __restrict__ y, long long n) {\n"
      "  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)\n"
      "    y[i] = " + fn + "(x[i]);\n}\n";
  cuda::Module m(jit::nvrtc_compile(render_prelude(Dialect::Cuda, kernel) + kernel, cuda::device().arch(), fn + ".cu",
                                    {"-default-device"}));
  cuda::Stream s;
  DeviceArray x = to_device(xs.data(), xs.size() * 4, 0, s);
  std::vector<float> zeros(xs.size());
  DeviceArray y = to_device(zeros.data(), xs.size() * 4, 0, s);
  CUdeviceptr px = x.ptr(), py = y.ptr();
  long long n = (long long)xs.size();
  void* params[] = {&px, &py, &n};
  cuda::launch(m.function("apply"), cuda::LaunchConfig{unsigned((n + 255) / 256), 256, 0}, s, params);
  std::vector<char> raw = to_host(y, s);
  std::vector<float> ys(xs.size());
  std::memcpy(ys.data(), raw.data(), raw.size());
  return ys;
}

TEST(GpuMathAccuracy, exp_tanh_sigmoid_meet_the_cpp_prelude_bounds_on_the_gpu) {
  SKIP_WITHOUT_GPU();
  const std::vector<float> xs = testing::math_sweep();
  testing::expect_accurate("tr_exp_f32", xs, apply_on_gpu("tr_exp_f32", xs), [](double x) { return std::exp(x); },
                           testing::kExpMaxRel);
  testing::expect_accurate("tr_tanh_f32", xs, apply_on_gpu("tr_tanh_f32", xs), [](double x) { return std::tanh(x); },
                           testing::kTanhMaxRel);
  testing::expect_accurate("tr_sigmoid_f32", xs, apply_on_gpu("tr_sigmoid_f32", xs),
                           [](double x) { return 1 / (1 + std::exp(-x)); }, testing::kSigmoidMaxRel);
}

// ---- kernels of each schedule against the host ----

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-3.0f, 3.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// tanh(a + b) with b broadcast from `b_shape` into `a_shape` ([rows, cols] or [n]), as a lowered
// group; the host's answer in float64, to within the tanh bound and an ulp of the add.
struct BiasTanh {
  Shape a_shape, b_shape;
  LoweredFunc lower(const std::string& name) const {
    FusionGroup g;
    g.name = name;
    g.inputs = {{DType::Float32, a_shape}, {DType::Float32, b_shape}};
    FusedOp add;
    add.node.op = Op::Add;
    add.node.name = "add";
    add.node.inputs = {0, 1};
    add.node.outputs = {0};
    add.operands = {Operand::input(0), Operand::input(1)};
    g.ops.push_back(add);
    g.ops[0].result = infer_result(g, 0);
    FusedOp t;
    t.node.op = Op::Tanh;
    t.node.name = "tanh";
    t.node.inputs = {0};
    t.node.outputs = {0};
    t.operands = {Operand::result(0)};
    g.ops.push_back(t);
    g.ops[1].result = infer_result(g, 1);
    g.outputs = {1};
    return kernels::lower(g);
  }
};

TEST(GpuKernels, elementwise_kernels_match_the_host_aligned_misaligned_and_on_one_block) {
  SKIP_WITHOUT_GPU();
  // 1-D with a tail, 2-D float4 rows, 2-D pairs (6 columns), 2-D scalar (7 columns), a column
  // broadcast ([r, 1]).
  const std::vector<BiasTanh> cases = {{{1003}, {1003}}, {{64, 768}, {768}}, {{10, 6}, {6}}, {{33, 7}, {7}},
                                       {{40, 12}, {40, 1}}};
  std::vector<LoweredFunc> fs;
  for (size_t c = 0; c < cases.size(); ++c) fs.push_back(cases[c].lower("bias_tanh" + std::to_string(c)));
  cuda::Module m(jit::nvrtc_compile(render_cuda_program(fs, "bias tanh"), cuda::device().arch(), "bias.cu",
                                    {"-default-device"}));
  cuda::Stream s;
  for (size_t c = 0; c < cases.size(); ++c) {
    const Shape& as = cases[c].a_shape;
    const Shape& bs = cases[c].b_shape;
    const size_t n = size_t(shape_numel(as)), nb = size_t(shape_numel(bs));
    const size_t cols = as.back();
    std::vector<float> a = random_floats(n, 1 + uint32_t(c)), b = random_floats(nb, 100 + uint32_t(c));
    for (size_t offset : {size_t(0), size_t(4)})
      for (bool one_block : {false, true}) {
        DeviceArray da = to_device(a.data(), n * 4, offset, s), db = to_device(b.data(), nb * 4, offset, s);
        std::vector<float> zeros(n);
        DeviceArray dy = to_device(zeros.data(), n * 4, offset, s);
        launch(m, fs[c], {da.ptr(), db.ptr(), dy.ptr()}, s, one_block);
        std::vector<char> raw = to_host(dy, s);
        std::vector<float> y(n);
        std::memcpy(y.data(), raw.data(), raw.size());
        for (size_t i = 0; i < n; ++i) {
          const size_t bi = nb == n ? i : bs.size() == 1 ? i % cols : (bs.back() == 1 ? i / cols : i % cols);
          const double want = std::tanh(double(a[i] + b[bi]));
          ASSERT_NEAR(y[i], want, 4e-7 * std::abs(want) + 1e-7)
              << "case " << c << " (" << shape_str(as) << " + " << shape_str(bs) << "), element " << i
              << ", offset " << offset << ", one block " << one_block;
        }
      }
  }
}

TEST(GpuKernels, softmax_kernels_thread_per_row_match_the_host) {
  SKIP_WITHOUT_GPU();
  const int64_t rows = 300, cols = 77;
  Node node;
  node.op = Op::Softmax;
  node.name = "softmax";
  node.inputs = {0};
  node.outputs = {1};
  node.attrs["axis"] = testing::int_attr(-1);
  OpKernels k = lower_op(node, {OpInput{{DType::Float32, {rows, cols}}}}, "softmax");
  std::vector<LoweredFunc> fs;
  for (auto& c : k.calls) fs.push_back(c.func);
  cuda::Module m(jit::nvrtc_compile(render_cuda_program(fs, "softmax"), cuda::device().arch(), "softmax.cu",
                                    {"-default-device"}));
  cuda::Stream s;
  std::vector<float> x = random_floats(size_t(rows * cols), 7);
  // The slot table: input, output, scratch.
  std::vector<DeviceArray> slots;
  slots.push_back(to_device(x.data(), x.size() * 4, 0, s));
  std::vector<char> zeros(size_t(rows * cols) * 4);
  slots.push_back(to_device(zeros.data(), zeros.size(), 0, s));
  for (const TensorSig& sig : k.scratch) {
    std::vector<char> z(size_t(shape_numel(sig.shape)) * dtype_size(sig.dtype));
    slots.push_back(to_device(z.data(), z.size(), 0, s));
  }
  for (bool one_block : {false, true}) {
    for (const OpKernels::Call& call : k.calls) {
      std::vector<CUdeviceptr> args;
      for (int slot : call.slots) args.push_back(slots[size_t(slot)].ptr());
      launch(m, call.func, args, s, one_block);
    }
    std::vector<char> raw = to_host(slots[1], s);
    std::vector<float> y(x.size());
    std::memcpy(y.data(), raw.data(), raw.size());
    for (int64_t r = 0; r < rows; ++r) {
      double mx = -INFINITY, sum = 0;
      for (int64_t c = 0; c < cols; ++c) mx = std::max(mx, double(x[size_t(r * cols + c)]));
      for (int64_t c = 0; c < cols; ++c) sum += std::exp(double(x[size_t(r * cols + c)]) - mx);
      for (int64_t c = 0; c < cols; ++c) {
        const double want = std::exp(double(x[size_t(r * cols + c)]) - mx) / sum;
        ASSERT_NEAR(y[size_t(r * cols + c)], want, 1e-6 * want + 1e-9)
            << "row " << r << ", column " << c << ", one block " << one_block;
      }
    }
    const std::vector<char> zero(raw.size());
    cuda::copy_to_device(slots[1].ptr(), zero.data(), zero.size(), s);
  }
}

}  // namespace
}  // namespace terrace::kernels
#endif
