// Rendered CUDA kernels run on the GPU (skipped with the driver's reason where there is none): the
// CUDA prelude's exp, tanh and sigmoid meet the C++ prelude's accuracy bounds over the same sweep
// (tests/support/math_sweep.h), and kernels of every schedule give the host's answer with the
// launch cuda_launch chooses, with a one-block grid (the grid-stride loops take the rest) and
// with buffers one element off 16-byte alignment (the vector path's scalar fallback); row
// reductions and normalisations with a warp per row and a thread per short row.
#ifdef TERRACE_HAVE_CUDA
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "jit/cuda/cuda_driver.h"
#include "jit/cuda/cuda_memory.h"
#include "jit/cuda/nvrtc.h"
#include "kernels/lower.h"
#include "kernels/lower_op.h"
#include "kernels/render_c.h"
#include "kernels/schedule_cuda.h"
#include "tests/support/attrs.h"
#include "tests/support/math_sweep.h"
#include "tests/support/gpu_skip.h"

namespace terrace::kernels {
namespace {

namespace cuda = jit::cuda;

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
  // As the GPU backend launches: a kernel whose rows move by vectors takes its element-by-element
  // copy where one of those buffers is not 16-byte aligned.
  bool aligned = true;
  for (size_t i : cuda_aligned_params(f)) aligned = aligned && args.at(i) % 16 == 0;
  cuda::launch(m.function(aligned ? f.name : cuda_element_copy_name(f.name)), cuda::LaunchConfig{l.grid, l.block, 0}, s,
               params.data());
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

// Runs the kernels lower_op gives `node` on the GPU over a slot table of the inputs (host data),
// the outputs and the scratch; returns each output's bytes. `one_block`: a grid of one block.
std::vector<std::vector<char>> run_op(const Node& node, const std::vector<OpInput>& in,
                                      const std::vector<std::vector<char>>& data, bool one_block,
                                      std::vector<CudaMapping>* mappings = nullptr, size_t offset = 0) {
  OpKernels k = lower_op(node, in, node.name);
  std::vector<LoweredFunc> fs;
  for (auto& c : k.calls) {
    fs.push_back(c.func);
    if (mappings) mappings->push_back(schedule_cuda(c.func).mapping);
  }
  cuda::Module m(jit::nvrtc_compile(render_cuda_program(fs, node.name), cuda::device().arch(), node.name + ".cu",
                                    {"-default-device"}));
  cuda::Stream s;
  std::vector<DeviceArray> slots;
  for (const std::vector<char>& d : data) slots.push_back(to_device(d.data(), d.size(), offset, s));
  std::vector<TensorSig> rest = k.outputs;
  rest.insert(rest.end(), k.scratch.begin(), k.scratch.end());
  for (const TensorSig& sig : rest) {
    std::vector<char> z(size_t(shape_numel(sig.shape)) * dtype_size(sig.dtype));
    slots.push_back(to_device(z.data(), z.size(), offset, s));
  }
  for (const OpKernels::Call& call : k.calls) {
    std::vector<CUdeviceptr> args;
    for (int slot : call.slots) args.push_back(slots[size_t(slot)].ptr());
    launch(m, call.func, args, s, one_block);
  }
  std::vector<std::vector<char>> out;
  for (size_t j = 0; j < k.outputs.size(); ++j) out.push_back(to_host(slots[in.size() + j], s));
  return out;
}

std::vector<char> bytes_of(const std::vector<float>& v) {
  std::vector<char> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}
template <typename T>
std::vector<T> values_of(const std::vector<char>& b) {
  std::vector<T> v(b.size() / sizeof(T));
  std::memcpy(v.data(), b.data(), b.size());
  return v;
}

Node op_node(Op op, const std::string& name, int inputs, std::map<std::string, Attribute> attrs) {
  Node n;
  n.op = op;
  n.name = name;
  for (int i = 0; i < inputs; ++i) n.inputs.push_back(i);
  n.outputs = {inputs};
  n.attrs = std::move(attrs);
  return n;
}

TEST(GpuKernels, softmax_rows_match_the_host_a_block_or_a_warp_per_long_row_and_a_thread_per_short_one) {
  SKIP_WITHOUT_GPU();
  // 4096 and 2048: a block per row, the row in registers; 1040: the same, the last registers on
  // some threads only; 16384: in registers at 1,024 threads; 5001: a block per row, the row in
  // shared memory (not a multiple of the max's 16 slots), copied element by element.
  for (int64_t cols : {int64_t(77), int64_t(8), int64_t(1000), int64_t(4096), int64_t(2048), int64_t(1040),
                       int64_t(16384), int64_t(5001)}) {
    const int64_t rows = 300;
    std::vector<float> x = random_floats(size_t(rows * cols), 7);
    // Offset 4: every buffer 4 bytes past a 16-byte boundary, so rows read by vectors of 4
    // floats take the element-by-element path.
    for (const auto& [one_block, offset] : {std::pair{false, size_t(0)}, {true, size_t(0)}, {false, size_t(4)}}) {
      std::vector<CudaMapping> mappings;
      std::vector<float> y = values_of<float>(run_op(op_node(Op::Softmax, "softmax", 1, {{"axis", testing::int_attr(-1)}}),
                                                     {OpInput{{DType::Float32, {rows, cols}}}}, {bytes_of(x)}, one_block,
                                                     &mappings, offset)[0]);
      EXPECT_EQ(mappings[0], cols >= 1024 ? CudaMapping::PerRowBlock
                             : cols >= 32 ? CudaMapping::PerRowWarp
                                          : CudaMapping::PerIteration)
          << cols << " columns";
      for (int64_t r = 0; r < rows; ++r) {
        double mx = -INFINITY, sum = 0;
        for (int64_t c = 0; c < cols; ++c) mx = std::max(mx, double(x[size_t(r * cols + c)]));
        for (int64_t c = 0; c < cols; ++c) sum += std::exp(double(x[size_t(r * cols + c)]) - mx);
        for (int64_t c = 0; c < cols; ++c) {
          const double want = std::exp(double(x[size_t(r * cols + c)]) - mx) / sum;
          ASSERT_NEAR(y[size_t(r * cols + c)], want, 1e-6 * want + 1e-9)
              << cols << " columns, row " << r << ", column " << c << ", one block " << one_block << ", offset " << offset;
        }
      }
    }
  }
}

TEST(GpuKernels, row_sums_layernorm_and_argmax_with_ties_and_nan_match_the_host) {
  SKIP_WITHOUT_GPU();
  // 1000: a warp per row; 3001 and 4096: the sums and layernorm a block per row, the row in
  // registers (at 3001 the last on some threads only); ArgMax a warp per row.
  for (const int64_t cols : {int64_t(1000), int64_t(3001), int64_t(4096)}) {
  SCOPED_TRACE(std::to_string(cols) + " columns");
  const int64_t rows = 257;
  std::vector<float> x = random_floats(size_t(rows * cols), 11);
  for (int64_t r = 0; r < rows; r += 3) x[size_t(r * cols + (r * 7) % cols)] = 5.0f;   // the row's max, twice
  for (int64_t r = 0; r < rows; r += 3) x[size_t(r * cols + (r * 13) % cols)] = 5.0f;
  for (int64_t r = 1; r < rows; r += 5) x[size_t(r * cols + (r * 31) % cols)] = NAN;  // ArgMax: the first NaN
  for (bool one_block : {false, true}) {
    const Tensor axes = Tensor::from_vector<int64_t>({1}, {1});
    std::vector<char> axes_bytes(8);
    std::memcpy(axes_bytes.data(), axes.raw(), 8);
    OpInput axes_in{{DType::Int64, {1}}};
    axes_in.value = &axes;
    std::vector<float> sum = values_of<float>(
        run_op(op_node(Op::ReduceSum, "rsum", 2, {{"keepdims", testing::int_attr(0)}}),
               {OpInput{{DType::Float32, {rows, cols}}}, axes_in}, {bytes_of(x), axes_bytes}, one_block)[0]);
    std::vector<int64_t> arg = values_of<int64_t>(run_op(op_node(Op::ArgMax, "argmax", 1, {{"axis", testing::int_attr(1)}}),
                                                         {OpInput{{DType::Float32, {rows, cols}}}}, {bytes_of(x)},
                                                         one_block)[0]);
    for (int64_t r = 0; r < rows; ++r) {
      double want = 0, best = -INFINITY;
      int64_t at = -1, first_nan = -1;
      for (int64_t c = 0; c < cols; ++c) {
        const float v = x[size_t(r * cols + c)];
        want += v;
        if (std::isnan(v) && first_nan < 0) first_nan = c;
        if (v > best) best = v, at = c;
      }
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(sum[size_t(r)])) << "row " << r;
      } else {
        EXPECT_NEAR(sum[size_t(r)], want, 1e-6 * std::abs(want) + 1e-5) << "row " << r << ", one block " << one_block;
      }
      EXPECT_EQ(arg[size_t(r)], first_nan >= 0 ? first_nan : at) << "row " << r << ", one block " << one_block;
    }
  }
  // LayerNormalization over rows without NaN.
  std::vector<float> clean = random_floats(size_t(rows * cols), 12), gamma = random_floats(size_t(cols), 13),
                     beta = random_floats(size_t(cols), 14);
  for (size_t offset : {size_t(0), size_t(4)}) {  // 4: misaligned rows, element by element
  std::vector<float> y = values_of<float>(
      run_op(op_node(Op::LayerNormalization, "layernorm", 3, {{"axis", testing::int_attr(-1)}}),
             {OpInput{{DType::Float32, {rows, cols}}}, OpInput{{DType::Float32, {cols}}}, OpInput{{DType::Float32, {cols}}}},
             {bytes_of(clean), bytes_of(gamma), bytes_of(beta)}, false, nullptr, offset)[0]);
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t c = 0; c < cols; ++c) mean += clean[size_t(r * cols + c)];
    mean /= double(cols);
    for (int64_t c = 0; c < cols; ++c) var += std::pow(clean[size_t(r * cols + c)] - mean, 2);
    const double inv = 1 / std::sqrt(var / double(cols) + 1e-5);
    for (int64_t c = 0; c < cols; ++c) {
      const double want = (clean[size_t(r * cols + c)] - mean) * inv * gamma[size_t(c)] + beta[size_t(c)];
      ASSERT_NEAR(y[size_t(r * cols + c)], want, 1e-5 * std::abs(want) + 1e-6)
          << "row " << r << ", column " << c << ", offset " << offset;
    }
  }
  }
  }
}

TEST(GpuKernels, reductions_over_the_outer_axis_match_the_host_a_thread_per_block_of_columns) {
  SKIP_WITHOUT_GPU();
  const int64_t rows = 300, cols = 1000;  // two blocks of columns (512 and 488)
  std::vector<float> x = random_floats(size_t(rows * cols), 21);
  x[size_t(17 * cols + 3)] = NAN;  // column 3's max is NaN
  for (bool one_block : {false, true}) {
    std::vector<CudaMapping> mappings;
    std::vector<float> mx = values_of<float>(
        run_op(op_node(Op::ReduceMax, "rmax", 1, {{"axes", testing::ints_attr({0})}, {"keepdims", testing::int_attr(0)}}),
               {OpInput{{DType::Float32, {rows, cols}}}}, {bytes_of(x)}, one_block, &mappings)[0]);
    EXPECT_EQ(mappings[0], CudaMapping::PerIteration);
    for (int64_t c = 0; c < cols; ++c) {
      double want = -INFINITY;
      bool nan = false;
      for (int64_t r = 0; r < rows; ++r) {
        const float v = x[size_t(r * cols + c)];
        nan = nan || std::isnan(v);
        want = std::max(want, double(v));
      }
      if (nan) {
        EXPECT_TRUE(std::isnan(mx[size_t(c)])) << "column " << c;
      } else {
        EXPECT_EQ(mx[size_t(c)], float(want)) << "column " << c << ", one block " << one_block;
      }
    }
  }
}

}  // namespace
}  // namespace terrace::kernels
#endif
