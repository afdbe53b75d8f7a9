// A fixed corpus of reduction and normalisation kernels (every fold kind, both axis shapes, three
// dtypes, fused prologues and epilogues), each rendered as tier 1's C and tier 2's CUDA: every one
// renders and the CUDA compiles for sm_90 (skipped without NVRTC); the folds are lowered once,
// device-neutral, and each pipeline reads them from the IR. TERRACE_REDUCTION_CORPUS_DIR:
// each kernel's C, CUDA program, final GPU IR and launch written there under a stable name, so that
// two builds' corpora compare with `diff -r`.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "interp/error.h"
#include "kernels/gpu/pipeline.h"
#include "kernels/lower_op.h"
#include "kernels/lower_reduce.h"
#include "kernels/printer.h"
#include "kernels/render_c.h"
#include "kernels/schedule_cuda.h"
#include "kernels/verify.h"
#include "tests/support/attrs.h"
#include "tests/support/kernel_builders.h"
#include "tests/support/node_runner.h"

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
    Node n = testing::make_node(op, in.size());
    n.name = name;
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

const LoweredFunc& kernel(const Corpus& c, const std::string& name) {
  for (const Case& k : c.cases)
    if (k.name == name) return k.funcs.at(0);
  throw std::runtime_error("no corpus case " + name);
}

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

TEST(ReductionCorpus, every_fold_is_lowered_as_an_accumulate_without_vector_lanes) {
  const Corpus c = make_corpus();
  for (const Case& k : c.cases)
    for (const LoweredFunc& f : k.funcs) {
      const std::string ir = to_string(f);
      EXPECT_TRUE(has(ir, "fold ")) << ir;
      EXPECT_FALSE(has(ir, "lanes") || has(ir, "nans")) << ir;
      EXPECT_FALSE(has(ir, "fold ") && has(render_c(f, Dialect::Cpp), "fold")) << f.name;
    }
  const std::string max = to_string(kernel(c, "reducemax_257x1000_axis1"));
  EXPECT_TRUE(has(max, "fold r: acc[0] <- max_nan(in0[(base + r0)])")) << max;
  const std::string softmax = to_string(kernel(c, "softmax_300x77"));
  EXPECT_TRUE(has(softmax, "fold m: mx[0] <- max(in0[(base + r0)])")) << softmax;
  const std::string argmax = to_string(kernel(c, "argmax_float32_257x1000_axis1_last0"));
  EXPECT_TRUE(has(argmax, "fold i: at[0] <- first_index(")) << argmax;
}

TEST(ReductionCorpus, a_fold_whose_value_reads_its_accumulator_is_refused) {
  const Buffer acc{"acc", DType::Float64, kLocalSlot};
  LoweredFunc f;
  f.name = "bad";
  f.body = Allocate::make(acc, 1, For::make("r", make_index(0), make_index(8), ForKind::Serial,
                                            Accumulate::make(acc, make_index(0), Load::make(acc, make_index(0)),
                                                             FoldOp::Add, "r")));
  EXPECT_THROW(verify(f), Error);
  f.body = Allocate::make(acc, 1, For::make("r", make_index(0), make_index(8), ForKind::Serial,
                                            Accumulate::make(acc, make_index(0), make_const(DType::Float64, 1),
                                                             FoldOp::Add, "r")));
  EXPECT_NO_THROW(verify(f));
}

TEST(ReductionCorpus, tier_one_splits_a_rows_max_or_min_into_sixteen_lanes_with_nan_flags_where_nan_wins) {
  const Corpus c = make_corpus();
  const std::string max_f32 = render_c(kernel(c, "reducemax_257x1000_axis1"), Dialect::Cpp);
  EXPECT_TRUE(has(max_f32, "float rlanes[16];") && has(max_f32, "int32_t rnans[16];")) << max_f32;
  const std::string max_i32 = render_c(kernel(c, "reducemax_int32_257x1000_axis1"), Dialect::Cpp);
  EXPECT_TRUE(has(max_i32, "int64_t rlanes[16];") && !has(max_i32, "rnans")) << max_i32;
  const std::string softmax = render_c(kernel(c, "softmax_300x77"), Dialect::Cpp);
  EXPECT_TRUE(has(softmax, "float mlanes[16];") && !has(softmax, "mnans")) << softmax;
  // Over outer axes the lanes are the columns already; a sum and the positions fold in order.
  EXPECT_FALSE(has(render_c(kernel(c, "reducemax_257x1000_axis0"), Dialect::Cpp), "lanes"));
  EXPECT_FALSE(has(render_c(kernel(c, "reducesum_257x1000_axis1"), Dialect::Cpp), "lanes"));
  const std::string argmax = render_c(kernel(c, "argmax_float32_257x1000_axis1_last0"), Dialect::Cpp);
  EXPECT_TRUE(has(argmax, "float mlanes[16];") && !has(argmax, "ilanes")) << argmax;
}

TEST(ReductionCorpus, the_gpu_schedule_reads_its_folds_from_the_accumulates) {
  const Corpus c = make_corpus();
  const CudaSchedule s = schedule_cuda(kernel(c, "softmax_8192x4096"));
  ASSERT_EQ(s.mapping, CudaMapping::PerRowBlock);
  EXPECT_TRUE(s.rows_in_registers);
  std::vector<std::string> folds;
  for (const auto& [loop, fs] : s.folds)
    for (const CudaSchedule::Fold& f : fs)
      folds.push_back(std::string(fold_op_name(f.op)) + " " + f.accumulator.name + " " + std::to_string(f.slots) +
                      (f.whole ? " whole" : "") + (f.identity.defined() ? " from identity" : ""));
  std::sort(folds.begin(), folds.end());
  // The max over the row's 16 lanes combined as one value; the sum of exp from 0 on threads past the first.
  EXPECT_EQ(folds, (std::vector<std::string>{"add sum 0 from identity", "max mlanes 16 whole"}));
  // A float max in which NaN wins stays in one thread over outer axes; its lanes' flags fold by or.
  const CudaSchedule cols = schedule_cuda(kernel(c, "reducemax_257x1000_axis0"));
  EXPECT_EQ(cols.mapping, CudaMapping::PerIteration);
  const CudaSchedule rows = schedule_cuda(kernel(c, "reducemax_16x4096_axis1"));
  ASSERT_NE(rows.mapping, CudaMapping::PerIteration);
  bool nan_flags = false;
  for (const auto& [loop, fs] : rows.folds)
    for (const CudaSchedule::Fold& f : fs) nan_flags = nan_flags || (f.op == FoldOp::Or && f.accumulator.name == "rnans");
  EXPECT_TRUE(nan_flags);
}

}  // namespace
}  // namespace terrace::kernels
