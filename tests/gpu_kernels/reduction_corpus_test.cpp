// A fixed corpus of reduction and normalisation kernels (every fold kind, both axis shapes, three
// dtypes, fused prologues and epilogues), each rendered as tier 1's C and tier 2's CUDA: every one
// renders and the CUDA compiles for sm_90 (skipped without NVRTC). TERRACE_REDUCTION_CORPUS_DIR:
// each kernel's C, CUDA program, final GPU IR and launch written there under a stable name, so that
// two builds' corpora compare with `diff -r`.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "interp/error.h"
#include "kernels/gpu/pipeline.h"
#include "kernels/lower_op.h"
#include "kernels/lower_reduce.h"
#include "kernels/printer.h"
#include "kernels/render_c.h"
#include "kernels/schedule_cuda.h"
#include "tests/support/attrs.h"
#include "tests/support/kernel_builders.h"

namespace terrace::kernels {
namespace {

using testing::int_attr;
using testing::ints_attr;

std::string lower(const char* s) {
  std::string out(s);
  for (char& ch : out) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return out;
}

OpInput sig(DType t, Shape s) { return OpInput{{t, std::move(s)}}; }
OpInput f32(Shape s) { return sig(DType::Float32, std::move(s)); }

// Constant axes, kept alive for the lowering.
OpInput axes(std::vector<int64_t> a) {
  static std::map<std::vector<int64_t>, Tensor> kept;
  auto it = kept.try_emplace(a, Tensor::from_vector<int64_t>({int64_t(a.size())}, a)).first;
  OpInput in = sig(DType::Int64, {int64_t(a.size())});
  in.value = &it->second;
  return in;
}

// A group of one binary op over inputs of `a` and `b` (`a` first), as a prologue or an epilogue.
FusionGroup binary_group(Op op, TensorSig a, TensorSig b) {
  FusionGroup g;
  g.name = "fused";
  g.inputs = {std::move(a), std::move(b)};
  FusedOp f;
  f.node.op = op;
  f.node.name = "fused_op";
  f.node.inputs = {0, 1};
  f.node.outputs = {0};
  f.operands = {Operand::input(0), Operand::input(1)};
  g.ops.push_back(std::move(f));
  g.ops.back().result = infer_result(g, 0);
  g.outputs.push_back(0);
  return g;
}

struct Case {
  std::string name;
  std::vector<LoweredFunc> funcs;
};

struct Corpus {
  std::vector<Case> cases;
  void add(const std::string& name, Op op, std::vector<OpInput> in, std::map<std::string, Attribute> attrs,
           const ReductionFusion& fusion = {}) {
    Node n;
    n.op = op;
    n.name = name;
    for (size_t i = 0; i < in.size(); ++i) n.inputs.push_back(int(i));
    n.outputs = {int(in.size())};
    n.attrs = std::move(attrs);
    OpKernels k = lower_reduction(n, in, name, 17, fusion);
    Case c{name, {}};
    for (size_t i = 0; i < k.calls.size(); ++i) {
      c.funcs.push_back(k.calls[i].func);
      c.funcs.back().name = name + "_" + std::to_string(i);
    }
    cases.push_back(std::move(c));
  }
};

Corpus make_corpus() {
  Corpus c;
  for (const Shape& s : {Shape{8192, 4096}, Shape{64, 128}, Shape{8, 5001}, Shape{300, 77}})
    c.add("softmax_" + std::to_string(s[0]) + "x" + std::to_string(s[1]), Op::Softmax, {f32(s)}, {{"axis", int_attr(-1)}});
  c.add("softmax_f64_64x128", Op::Softmax, {sig(DType::Float64, {64, 128})}, {{"axis", int_attr(-1)}});
  c.add("softmax_axis0_40x64", Op::Softmax, {f32({40, 64})}, {{"axis", int_attr(0)}});
  for (const Shape& s : {Shape{300, 77}, Shape{64, 4096}})
    c.add("logsoftmax_" + std::to_string(s[0]) + "x" + std::to_string(s[1]), Op::LogSoftmax, {f32(s)}, {{"axis", int_attr(-1)}});
  for (const auto& [rows, cols] : {std::pair{8192, 4096}, std::pair{257, 3001}})
    c.add("layernorm_" + std::to_string(rows) + "x" + std::to_string(cols), Op::LayerNormalization,
          {f32({rows, cols}), f32({cols}), f32({cols})}, {{"axis", int_attr(-1)}});
  c.add("layernorm_f64_64x128", Op::LayerNormalization,
        {sig(DType::Float64, {64, 128}), sig(DType::Float64, {128}), sig(DType::Float64, {128})}, {{"axis", int_attr(-1)}});
  const Op reduces[] = {Op::ReduceSum, Op::ReduceMax,  Op::ReduceMin, Op::ReduceMean,     Op::ReduceProd,
                        Op::ReduceL1,  Op::ReduceL2,   Op::ReduceLogSum, Op::ReduceLogSumExp, Op::ReduceSumSquare};
  for (Op op : reduces) {
    const std::string n = lower(op_name(op));
    c.add(n + "_257x1000_axis1", op, {f32({257, 1000}), axes({1})}, {{"keepdims", int_attr(0)}});
    c.add(n + "_257x1000_axis0", op, {f32({257, 1000}), axes({0})}, {{"keepdims", int_attr(0)}});
    c.add(n + "_4x64x32_axes02", op, {f32({4, 64, 32}), axes({0, 2})}, {{"keepdims", int_attr(1)}});
    c.add(n + "_16x4096_axis1", op, {f32({16, 4096}), axes({1})}, {{"keepdims", int_attr(0)}});
  }
  for (DType t : {DType::Float64, DType::Int32, DType::Int64})
    for (Op op : {Op::ReduceSum, Op::ReduceMax, Op::ReduceMin, Op::ReduceMean}) {
      const std::string n = lower(op_name(op)) + "_" + dtype_name(t);
      c.add(n + "_257x1000_axis1", op, {sig(t, {257, 1000}), axes({1})}, {{"keepdims", int_attr(0)}});
      c.add(n + "_257x1000_axis0", op, {sig(t, {257, 1000}), axes({0})}, {{"keepdims", int_attr(0)}});
    }
  for (Op op : {Op::ArgMax, Op::ArgMin})
    for (DType t : {DType::Float32, DType::Float64, DType::Int32})
      for (int64_t axis : {0, 1})
        for (int64_t last : {0, 1})
          c.add(lower(op_name(op)) + "_" + dtype_name(t) + "_257x1000_axis" + std::to_string(axis) + "_last" +
                    std::to_string(last),
                op, {sig(t, {257, 1000})}, {{"axis", int_attr(axis)}, {"select_last_index", int_attr(last)}});
  c.add("argmax_16x4096", Op::ArgMax, {f32({16, 4096})}, {{"axis", int_attr(1)}});
  c.add("instancenorm_2x8x32x32", Op::InstanceNormalization, {f32({2, 8, 32, 32}), f32({8}), f32({8})}, {});
  c.add("instancenorm_2x4x64x64", Op::InstanceNormalization, {f32({2, 4, 64, 64}), f32({4}), f32({4})}, {});
  c.add("hardmax_300x77", Op::Hardmax, {f32({300, 77})}, {{"axis", int_attr(-1)}});
  c.add("hardmax_16x4096", Op::Hardmax, {f32({16, 4096})}, {{"axis", int_attr(-1)}});
  c.add("hardmax_axis0_40x64", Op::Hardmax, {f32({40, 64})}, {{"axis", int_attr(0)}});
  for (int64_t p : {1, 2}) {
    c.add("lpnorm_p" + std::to_string(p) + "_64x128", Op::LpNormalization, {f32({64, 128})},
          {{"axis", int_attr(-1)}, {"p", int_attr(p)}});
    c.add("lpnorm_p" + std::to_string(p) + "_axis0_64x128", Op::LpNormalization, {f32({64, 128})},
          {{"axis", int_attr(0)}, {"p", int_attr(p)}});
  }
  c.add("mvn_2x8x16x16", Op::MeanVarianceNormalization, {f32({2, 8, 16, 16})}, {});
  c.add("mvn_last_64x2048", Op::MeanVarianceNormalization, {f32({64, 2048})}, {{"axes", ints_attr({1})}});
  c.add("globalmaxpool_2x8x64x64", Op::GlobalMaxPool, {f32({2, 8, 64, 64})}, {});
  c.add("globalavgpool_2x8x32x32", Op::GlobalAveragePool, {f32({2, 8, 32, 32})}, {});
  c.add("globallppool_2x8x32x32", Op::GlobalLpPool, {f32({2, 8, 32, 32})}, {{"p", int_attr(3)}});
  // Fused: a scale before the softmax and a residual add after it; the same around a layernorm; a
  // prologue into a NaN-propagating max.
  const TensorSig x{DType::Float32, {64, 4096}}, row{DType::Float32, {4096}}, one{DType::Float32, {1}};
  ReductionFusion scaled;
  scaled.prologue = binary_group(Op::Mul, x, one);
  scaled.epilogue = binary_group(Op::Add, x, x);
  c.add("softmax_fused_64x4096", Op::Softmax, {f32({64, 4096})}, {{"axis", int_attr(-1)}}, scaled);
  ReductionFusion residual;
  residual.epilogue = binary_group(Op::Add, x, x);
  c.add("layernorm_fused_64x4096", Op::LayerNormalization, {f32({64, 4096}), f32({4096}), f32({4096})},
        {{"axis", int_attr(-1)}}, residual);
  ReductionFusion biased;
  biased.prologue = binary_group(Op::Add, x, row);
  c.add("reducemax_fused_64x4096", Op::ReduceMax, {f32({64, 4096}), axes({1})}, {{"keepdims", int_attr(0)}}, biased);
  return c;
}

void write(const std::filesystem::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

// Each kernel's sources, the GPU IR its passes leave, and its schedule and launch.
void dump(const Corpus& c, const char* dir) {
  std::filesystem::create_directories(dir);
  for (const Case& k : c.cases)
    for (const LoweredFunc& f : k.funcs) {
      const std::filesystem::path at = std::filesystem::path(dir) / f.name;
      write(at.string() + ".cpp", render_c(f, Dialect::Cpp));
      const CudaSchedule s = schedule_cuda(f);
      write(at.string() + ".cu", render_cuda_program(std::vector<LoweredFunc>{f}, std::vector<CudaSchedule>{s}, f.name));
      write(at.string() + ".gpu.ir", to_string(gpu::run_gpu_passes(f, s).func));
      const CudaLaunch l = cuda_launch(s, 0, f.parallel_extent);
      write(at.string() + ".launch", std::string(cuda_mapping_name(s.mapping)) + " block " + std::to_string(s.block) +
                                         " grid " + std::to_string(l.grid) + " shared " +
                                         std::to_string(row_block_shared_bytes(s)) + "\n");
    }
}

TEST(ReductionCorpus, every_kernel_renders_for_both_tiers_and_the_cuda_compiles) {
  const Corpus c = make_corpus();
  std::vector<LoweredFunc> all;
  for (const Case& k : c.cases) {
    EXPECT_FALSE(k.funcs.empty()) << k.name;
    for (const LoweredFunc& f : k.funcs) {
      EXPECT_NE(render_c(f, Dialect::Cpp).find(f.name), std::string::npos) << f.name;
      all.push_back(f);
    }
  }
  ASSERT_GE(all.size(), 100u);
  if (const char* dir = std::getenv("TERRACE_REDUCTION_CORPUS_DIR"); dir && *dir) dump(c, dir);
  EXPECT_COMPILES_FOR_SM90(render_cuda_program(all, "reduction corpus"), "corpus.cu");
}

}  // namespace
}  // namespace terrace::kernels
