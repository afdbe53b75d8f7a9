// A sweep of the kernels tier 2 renders for rows and reductions (softmax, log-softmax and
// layernorm at every row length the schedule treats apart, the Reduce* family and ArgMax/ArgMin
// over either axis and several dtypes, elementwise kernels in 1-D and 2-D): every one renders, and
// each family compiles through NVRTC for sm_90 as one program (skipped where NVRTC cannot be
// loaded). TERRACE_RENDER_DUMP_DIR keeps their sources, to compare the renders of two builds.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "interp/error.h"
#include "kernels/lower.h"
#include "kernels/lower_op.h"
#include "kernels/render_c.h"
#include "tests/support/attrs.h"
#include "tests/support/kernel_builders.h"

namespace terrace::kernels {
namespace {

using testing::int_attr;
using testing::ints_attr;


// The kernels lower_op gives one node over `in` (constant axes where given), named apart.
struct Sweep {
  std::vector<LoweredFunc> funcs;
  void add(Op op, std::vector<OpInput> in, std::map<std::string, Attribute> attrs) {
    Node n;
    n.op = op;
    n.name = "k" + std::to_string(funcs.size());
    for (size_t i = 0; i < in.size(); ++i) n.inputs.push_back(int(i));
    n.outputs = {int(in.size())};
    n.attrs = std::move(attrs);
    OpKernels k = lower_op(n, in, n.name);
    for (auto& c : k.calls) {
      c.func.name = n.name + "_" + std::to_string(funcs.size());
      funcs.push_back(c.func);
    }
  }
  // Every kernel alone (render_c) and all as one program.
  std::string render() const {
    for (const LoweredFunc& f : funcs) EXPECT_NE(render_c(f, Dialect::Cuda).find(f.name + "("), std::string::npos);
    return render_cuda_program(funcs, "sweep");
  }
};

OpInput f32(Shape s) { return OpInput{{DType::Float32, std::move(s)}}; }

TEST(RenderSweep, softmax_and_layernorm_rows_of_every_length) {
  Sweep s;
  for (int64_t cols : {8, 77, 1000, 1040, 2048, 3001, 4096, 5001, 16384, 65536}) {
    const int64_t rows = cols > 5001 ? 4 : 300;
    s.add(Op::Softmax, {f32({rows, cols})}, {{"axis", int_attr(-1)}});
    s.add(Op::LogSoftmax, {f32({rows, cols})}, {{"axis", int_attr(-1)}});
    s.add(Op::LayerNormalization, {f32({rows, cols}), f32({cols}), f32({cols})}, {{"axis", int_attr(-1)}});
  }
  // The benchmark's shape.
  s.add(Op::Softmax, {f32({8192, 4096})}, {{"axis", int_attr(-1)}});
  s.add(Op::LayerNormalization, {f32({8192, 4096}), f32({4096}), f32({4096})}, {{"axis", int_attr(-1)}});
  ASSERT_GE(s.funcs.size(), 32u);
  EXPECT_COMPILES_FOR_SM90(s.render(), "rows.cu");
}

TEST(RenderSweep, reductions_of_every_kind_axis_and_dtype) {
  static const Tensor axis1 = Tensor::from_vector<int64_t>({1}, {1});
  static const Tensor axis0 = Tensor::from_vector<int64_t>({1}, {0});
  Sweep s;
  const Op ops[] = {Op::ReduceSum,    Op::ReduceMax,       Op::ReduceMin,       Op::ReduceMean,
                    Op::ReduceProd,   Op::ReduceL1,        Op::ReduceL2,        Op::ReduceLogSum,
                    Op::ReduceLogSumExp, Op::ReduceSumSquare};
  for (Op op : ops)
    for (const auto& [rows, cols, axes] : {std::tuple{300, 100, &axis1}, std::tuple{64, 2048, &axis1},
                                          std::tuple{16, 4096, &axis1}, std::tuple{300, 1000, &axis0}}) {
      OpInput ax{{DType::Int64, {1}}};
      ax.value = axes;
      s.add(op, {f32({rows, cols}), ax}, {{"keepdims", int_attr(0)}});
    }
  for (DType t : {DType::Float64, DType::Int32, DType::Int64, DType::UInt8})
    for (Op op : {Op::ReduceSum, Op::ReduceMax}) {
      OpInput ax{{DType::Int64, {1}}};
      ax.value = &axis1;
      s.add(op, {OpInput{{t, {16, 2048}}}, ax}, {{"keepdims", int_attr(0)}});
      s.add(op, {OpInput{{t, {40, 100}}}, ax}, {{"keepdims", int_attr(1)}});
    }
  for (Op op : {Op::ArgMax, Op::ArgMin})
    for (int64_t cols : {77, 1000, 3001, 4096}) s.add(op, {f32({16, cols})}, {{"axis", int_attr(1)}});
  s.add(Op::ArgMax, {f32({100, 64})}, {{"axis", int_attr(0)}});
  s.add(Op::GlobalAveragePool, {f32({2, 8, 32, 32})}, {});
  s.add(Op::GlobalMaxPool, {f32({2, 8, 64, 64})}, {});
  ASSERT_GE(s.funcs.size(), 60u);
  EXPECT_COMPILES_FOR_SM90(s.render(), "reductions.cu");
}


TEST(RenderSweep, elementwise_kernels_in_one_and_two_dimensions) {
  Sweep s;
  for (DType t : {DType::Float32, DType::Float16, DType::Float64, DType::Int32})
    for (const auto& [a, b] : {std::pair{Shape{4099}, Shape{4099}}, std::pair{Shape{64, 768}, Shape{768}},
                               std::pair{Shape{64, 768}, Shape{64, 1}}, std::pair{Shape{10, 6}, Shape{6}},
                               std::pair{Shape{10, 7}, Shape{7}}})
      for (Op op : {Op::Add, Op::Mul})
        s.funcs.push_back(testing::binary_kernel("e" + std::to_string(s.funcs.size()), op, t, a, b));
  s.add(Op::Transpose, {f32({8, 12, 64})}, {{"perm", ints_attr({0, 2, 1})}});
  ASSERT_GE(s.funcs.size(), 41u);
  EXPECT_COMPILES_FOR_SM90(s.render(), "elementwise.cu");
}

}  // namespace
}  // namespace terrace::kernels
