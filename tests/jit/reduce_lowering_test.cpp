// Reductions and normalisations lowered to kernels (kernels/lower_reduce.cpp), compiled by tier 1's
// JIT and run, against the interpreter on the same node: every op over inner, outer, middle and all
// axes, keepdims on and off, size-1 and zero-sized dims, NaN and infinities.
#include <gtest/gtest.h>

#include <cmath>

#include "interp/interpreter.h"
#include "jit/cpu/cpu_kernel.h"
#include "kernels/lower_reduce.h"
#include "tests/jit/chain_builder.h"
#include "tests/support/attrs.h"

namespace terrace::testing {
namespace {

using kernels::OpInput;
using kernels::OpKernels;

struct Case {
  Node node;
  std::vector<Tensor> inputs;  // undefined: an absent optional input
  std::vector<bool> constant;  // inputs the lowering sees as known values
  int opset = 17;
};

Case make_case(Op op, std::vector<Tensor> inputs, std::map<std::string, Attribute> attrs = {}, int outputs = 1) {
  Case c;
  c.node.op = op;
  c.node.name = std::string("n_") + op_name(op);
  c.node.attrs = std::move(attrs);
  for (size_t i = 0; i < inputs.size(); ++i) c.node.inputs.push_back(inputs[i].defined() ? int(i) : -1);
  for (int j = 0; j < outputs; ++j) c.node.outputs.push_back(int(inputs.size()) + j);
  c.inputs = std::move(inputs);
  c.constant.assign(c.inputs.size(), false);
  return c;
}

// The interpreter's outputs for the node (at the case's opset, through a one-node graph's frame).
std::vector<Tensor> interpret(const Case& c) {
  Graph g;
  g.opset = c.opset;
  Frame frame;
  frame.graph = &g;
  std::vector<RValue> values;
  for (const Tensor& t : c.inputs) values.push_back(RValue(t));
  std::vector<const RValue*> ptrs;
  for (size_t i = 0; i < values.size(); ++i) ptrs.push_back(c.inputs[i].defined() ? &values[i] : nullptr);
  std::vector<Tensor> out;
  for (RValue& v : interpret_node(c.node, ptrs, &frame)) out.push_back(v.tensor);
  return out;
}

struct Compiled {
  OpKernels k;
  std::vector<jit::CpuKernel> kernels;
};

Compiled compile(const Case& c) {
  std::vector<OpInput> in;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    OpInput x;
    x.absent = !c.inputs[i].defined();
    if (!x.absent) x.sig = {c.inputs[i].dtype(), c.inputs[i].shape()};
    if (c.constant[i]) x.value = &c.inputs[i];
    in.push_back(x);
  }
  Compiled r;
  r.k = kernels::lower_reduction(c.node, in, "reduce_test", c.opset);
  for (const auto& call : r.k.calls) r.kernels.push_back(jit::compile_cpu_kernel(call.func));
  return r;
}

std::vector<Tensor> run(const Case& c, const Compiled& k) {
  std::vector<Tensor> outs, scratch;
  std::vector<void*> table;
  for (const Tensor& t : c.inputs) table.push_back(t.defined() ? const_cast<void*>(t.raw()) : nullptr);
  for (const auto& sig : k.k.outputs) {
    outs.push_back(Tensor::empty(sig.dtype, sig.shape));
    table.push_back(outs.back().raw());
  }
  for (const auto& sig : k.k.scratch) {
    scratch.push_back(Tensor::empty(sig.dtype, sig.shape));
    table.push_back(scratch.back().raw());
  }
  for (size_t i = 0; i < k.kernels.size(); ++i) {
    std::vector<void*> buffers;
    for (int s : k.k.calls[i].slots) buffers.push_back(table[size_t(s)]);
    jit::run_cpu_kernel(k.kernels[i], buffers);
  }
  return outs;
}

// Lowers, compiles and runs the case; its outputs must match the interpreter's.
void expect_matches(const Case& c, const std::string& what) {
  SCOPED_TRACE(what);
  std::vector<Tensor> want = interpret(c);
  Compiled k = compile(c);
  std::vector<Tensor> got = run(c, k);
  ASSERT_EQ(got.size(), want.size());
  for (size_t j = 0; j < want.size(); ++j) {
    if (!want[j].defined()) continue;  // an output the node does not ask for
    expect_close(got[j], want[j], what + " output " + std::to_string(j));
  }
}

std::string shape_name(const Shape& s) { return shape_str(s); }

const Op kReduceOps[] = {Op::ReduceSum,  Op::ReduceMean,      Op::ReduceMax,      Op::ReduceMin,
                         Op::ReduceProd, Op::ReduceL1,        Op::ReduceL2,       Op::ReduceLogSum,
                         Op::ReduceLogSumExp, Op::ReduceSumSquare};

// Inputs for op: positive for the logs (ReduceLogSum of a negative sum is NaN either way, but
// rounding could put a sum near 0 on either side), small for Prod (so products stay finite).
Tensor reduce_input(Op op, DType t, const Shape& s, uint32_t seed, bool specials = true) {
  if (op == Op::ReduceProd) return random_tensor(t, s, 0.8, 1.25, seed, specials);
  if (op == Op::ReduceLogSum) return random_tensor(t, s, 0.1, 3, seed, specials);
  return random_tensor(t, s, -3, 3, seed, specials);
}

TEST(ReduceLowering, EveryReduceOpOverInnerOuterMiddleAndAllAxesMatchesInterpreter) {
  const Shape shape{3, 5, 37};
  const std::vector<std::vector<int64_t>> axes_list = {{2}, {-1}, {0}, {1}, {0, 2}, {0, 1}, {}, {1, 2}};
  for (Op op : kReduceOps) {
    for (const auto& axes : axes_list) {
      for (int keep : {0, 1}) {
        Case c = make_case(op, {reduce_input(op, DType::Float32, shape, 11, false)},
                           {{"keepdims", int_attr(keep)}});
        if (!axes.empty()) c.node.attrs["axes"] = ints_attr(axes);
        expect_matches(c, std::string(op_name(op)) + " axes " + shape_name(axes) + " keepdims " + std::to_string(keep));
      }
    }
  }
}

TEST(ReduceLowering, NanAndInfinitiesPropagateAsInInterpreter) {
  for (Op op : kReduceOps) {
    for (const std::vector<int64_t>& axes : {std::vector<int64_t>{1}, std::vector<int64_t>{0}}) {
      // Long rows, so that max/min fold in vector lanes and a tail.
      Case c = make_case(op, {reduce_input(op, DType::Float32, {6, 75}, 12)}, {{"axes", ints_attr(axes)}});
      expect_matches(c, std::string(op_name(op)) + " with specials over axes " + shape_name(axes));
    }
  }
  // Rows of only NaN, only -inf, only +inf, and NaN after +inf.
  Tensor x = Tensor::from_vector<float>({4, 3}, {NAN, NAN, NAN, -INFINITY, -INFINITY, -INFINITY, INFINITY,
                                                 INFINITY, INFINITY, INFINITY, 1.0f, NAN});
  for (Op op : {Op::ReduceMax, Op::ReduceMin, Op::ReduceLogSumExp, Op::ReduceSum})
    expect_matches(make_case(op, {x}, {{"axes", ints_attr({1})}}), std::string(op_name(op)) + " special rows");
}

TEST(ReduceLowering, AxesAsInputNoopWithEmptyAxesAndSizeOneDims) {
  Tensor x = random_tensor(DType::Float32, {4, 1, 6, 1}, -2, 2, 13);
  Case c = make_case(Op::ReduceSum, {x, Tensor::from_vector<int64_t>({2}, {1, -2})});
  c.constant[1] = true;
  expect_matches(c, "ReduceSum axes as an input");
  Case noop = make_case(Op::ReduceL1, {x, Tensor::from_vector<int64_t>({0}, {})}, {{"noop_with_empty_axes", int_attr(1)}});
  noop.constant[1] = true;
  expect_matches(noop, "ReduceL1 with no axes and noop_with_empty_axes: |x| elementwise");
  Case all = make_case(Op::ReduceMean, {x, Tensor::from_vector<int64_t>({0}, {})});
  all.constant[1] = true;
  expect_matches(all, "ReduceMean with no axes: all of them");
  // Axes known only at run time: not lowered, and the error says why.
  Case dynamic = make_case(Op::ReduceSum, {x, Tensor::from_vector<int64_t>({1}, {2})});
  try {
    compile(dynamic);
    ADD_FAILURE() << "run-time axes were lowered";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::NotImplemented);
    EXPECT_NE(std::string(e.what()).find("n_ReduceSum"), std::string::npos) << e.what();
  }
}

TEST(ReduceLowering, ZeroSizedDimsGiveTheInterpretersIdentities) {
  for (Op op : kReduceOps) {
    // Reduced dim of size 0: sums are 0, max is -inf, mean is NaN, log-sum is -inf.
    expect_matches(make_case(op, {Tensor::empty(DType::Float32, {3, 0, 2})}, {{"axes", ints_attr({1})}}),
                   std::string(op_name(op)) + " over an empty axis");
    // Kept dim of size 0: an empty output.
    expect_matches(make_case(op, {Tensor::empty(DType::Float32, {0, 4})}, {{"axes", ints_attr({1})}}),
                   std::string(op_name(op)) + " with an empty kept dim");
  }
}

TEST(ReduceLowering, Float64AndIntegersMatchInterpreter) {
  for (Op op : kReduceOps) {
    expect_matches(make_case(op, {reduce_input(op, DType::Float64, {4, 9, 5}, 14)}, {{"axes", ints_attr({1})}}),
                   std::string(op_name(op)) + " float64");
  }
  for (DType t : {DType::Int32, DType::Int64, DType::UInt8}) {
    for (Op op : {Op::ReduceSum, Op::ReduceMean, Op::ReduceMax, Op::ReduceMin, Op::ReduceL1, Op::ReduceSumSquare,
                  Op::ReduceProd}) {
      for (const std::vector<int64_t>& axes : {std::vector<int64_t>{2}, std::vector<int64_t>{0, 1}}) {
        Tensor x = random_tensor(t, {3, 4, 33}, t == DType::UInt8 ? 0 : -100, 100, 15);
        expect_matches(make_case(op, {x}, {{"axes", ints_attr(axes)}}),
                       std::string(op_name(op)) + " " + dtype_name(t) + " axes " + shape_name(axes));
      }
    }
  }
}

// Random ranks (0 to 4), dims (0 to 6, mostly non-zero), axes, keepdims and dtypes for every
// op of the family: the lowering must agree with the interpreter on each.
TEST(ReduceLowering, RandomShapesAxesAndOpsMatchInterpreter) {
  std::mt19937 rng(2026);
  const Op ops[] = {Op::ReduceSum, Op::ReduceMean, Op::ReduceMax, Op::ReduceMin, Op::ReduceProd, Op::ReduceL1,
                    Op::ReduceL2, Op::ReduceLogSum, Op::ReduceLogSumExp, Op::ReduceSumSquare, Op::ArgMax,
                    Op::ArgMin, Op::Softmax, Op::LogSoftmax, Op::Hardmax, Op::LpNormalization,
                    Op::LayerNormalization, Op::GlobalAveragePool, Op::GlobalMaxPool};
  for (int trial = 0; trial < 120; ++trial) {
    const Op op = ops[rng() % std::size(ops)];
    const bool pool = op == Op::GlobalAveragePool || op == Op::GlobalMaxPool;
    const bool needs_axis = op == Op::ArgMax || op == Op::ArgMin || op == Op::Softmax || op == Op::LogSoftmax ||
                            op == Op::Hardmax || op == Op::LpNormalization || op == Op::LayerNormalization;
    int64_t rank = pool ? 3 + int64_t(rng() % 2) : int64_t(rng() % 5);
    if (needs_axis && rank == 0) rank = 1;
    Shape shape;
    for (int64_t d = 0; d < rank; ++d) shape.push_back(rng() % 8 == 0 ? 0 : 1 + int64_t(rng() % 6));
    const DType t = rng() % 4 == 0 ? DType::Float64 : DType::Float32;
    std::map<std::string, Attribute> attrs;
    if (needs_axis) {
      int64_t axis = int64_t(rng() % uint32_t(rank)) - (rng() % 2 ? rank : 0);
      attrs["axis"] = int_attr(axis);
      if (op == Op::ArgMax || op == Op::ArgMin) {
        if (shape[size_t(axis < 0 ? axis + rank : axis)] == 0) shape[size_t(axis < 0 ? axis + rank : axis)] = 3;
        attrs["select_last_index"] = int_attr(rng() % 2);
      }
    } else if (!pool) {
      std::vector<int64_t> axes;
      for (int64_t d = 0; d < rank; ++d)
        if (rng() % 2) axes.push_back(rng() % 2 ? d : d - rank);
      if (!axes.empty() || rng() % 2) attrs["axes"] = ints_attr(axes);
    }
    if (!pool && !needs_axis) attrs["keepdims"] = int_attr(rng() % 2);
    if (op == Op::ArgMax || op == Op::ArgMin) attrs["keepdims"] = int_attr(rng() % 2);
    if (op == Op::LpNormalization) attrs["p"] = int_attr(1 + rng() % 2);
    std::vector<Tensor> in{reduce_input(op, t, shape, 100 + uint32_t(trial), rng() % 2 == 0)};
    if (op == Op::LayerNormalization) {
      int64_t axis = attrs["axis"].i < 0 ? attrs["axis"].i + rank : attrs["axis"].i;
      Shape norm(shape.begin() + axis, shape.end());
      in.push_back(random_tensor(t, norm, 0.5, 2, 200 + uint32_t(trial), false));
      if (rng() % 2) in.push_back(random_tensor(t, norm, -1, 1, 300 + uint32_t(trial), false));
    }
    expect_matches(make_case(op, in, attrs), std::string(op_name(op)) + " trial " + std::to_string(trial) + " " +
                                                 dtype_name(t) + shape_name(shape));
  }
}

TEST(ReduceLowering, UnsupportedDtypesAreRefusedWithAReason) {
  Graph g;
  int x = g.add_value("x", ValueInfo{ValueKind::Tensor, DType::Float16, Shape{2, 3}, {}});
  Node n;
  n.op = Op::ReduceSum;
  n.inputs = {x};
  std::string why = kernels::can_lower_reduction(g, n);
  EXPECT_NE(why.find("float16"), std::string::npos) << why;
  n.op = Op::ReduceL2;
  g.values[size_t(x)].info.dtype = DType::Int32;
  why = kernels::can_lower_reduction(g, n);
  EXPECT_NE(why.find("int32"), std::string::npos) << why;
  g.values[size_t(x)].info.dtype = DType::Float32;
  EXPECT_EQ(kernels::can_lower_reduction(g, n), "");
}

TEST(ArgLowering, ArgMaxAndArgMinWithKeepdimsAndLastIndexMatchInterpreter) {
  // Few distinct values, so that ties are common.
  Tensor xf = random_tensor(DType::Float32, {5, 7, 19}, -3, 3, 16);
  Tensor xi = random_tensor(DType::Int32, {5, 7, 19}, -3, 3, 17);
  for (Op op : {Op::ArgMax, Op::ArgMin})
    for (const Tensor& x : {xf, xi})
      for (int64_t axis : {0, 1, 2, -1})
        for (int keep : {0, 1})
          for (int last : {0, 1})
            expect_matches(make_case(op, {x}, {{"axis", int_attr(axis)}, {"keepdims", int_attr(keep)},
                                               {"select_last_index", int_attr(last)}}),
                           std::string(op_name(op)) + " " + dtype_name(x.dtype()) + " axis " + std::to_string(axis) +
                               " keepdims " + std::to_string(keep) + " last " + std::to_string(last));
  Tensor nan_first = Tensor::from_vector<float>({2, 3}, {NAN, 5, 7, 1, NAN, NAN});
  expect_matches(make_case(Op::ArgMax, {nan_first}, {{"axis", int_attr(1)}}), "ArgMax: a NaN wins");
}

// What the interpreter rejects, the lowering rejects with the same code, naming the node.
void expect_error(const Case& c, ErrorCode code, const std::string& what) {
  SCOPED_TRACE(what);
  try {
    interpret(c);
    ADD_FAILURE() << "the interpreter accepted it";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
  }
  try {
    compile(c);
    ADD_FAILURE() << "the lowering accepted it";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(c.node.name), std::string::npos) << e.what();
  }
}

TEST(ReduceLowering, BadAttributesAndShapesAreTheInterpretersErrorsNamingTheNode) {
  Tensor x = random_tensor(DType::Float32, {3, 4}, -1, 1, 40);
  expect_error(make_case(Op::ReduceSum, {x}, {{"axes", ints_attr({2})}}), ErrorCode::InvalidModel, "axis out of range");
  expect_error(make_case(Op::ReduceMax, {x}, {{"axes", ints_attr({1, -1})}}), ErrorCode::InvalidModel, "repeated axis");
  expect_error(make_case(Op::Softmax, {x}, {{"axis", int_attr(-3)}}), ErrorCode::InvalidModel, "softmax axis");
  expect_error(make_case(Op::LayerNormalization, {x, random_tensor(DType::Float32, {3}, -1, 1, 41)}),
               ErrorCode::InvalidArgument, "scale that does not broadcast");
  expect_error(make_case(Op::GlobalAveragePool, {x}), ErrorCode::InvalidArgument, "global pool of rank 2");
}

TEST(ArgLowering, AnEmptyAxisIsInvalidArgumentNamingTheNode) {
  Case c = make_case(Op::ArgMax, {Tensor::empty(DType::Float32, {2, 0})}, {{"axis", int_attr(1)}});
  try {
    compile(c);
    ADD_FAILURE() << "an empty axis was lowered";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("n_ArgMax"), std::string::npos) << e.what();
  }
}

TEST(SoftmaxLowering, SoftmaxAndLogSoftmaxOverEveryAxisMatchInterpreter) {
  for (Op op : {Op::Softmax, Op::LogSoftmax}) {
    for (DType t : {DType::Float32, DType::Float64}) {
      for (int64_t axis : {-1, 0, 1, 2}) {
        Tensor x = random_tensor(t, {3, 4, 37}, -20, 20, 18, false);
        expect_matches(make_case(op, {x}, {{"axis", int_attr(axis)}}),
                       std::string(op_name(op)) + " " + dtype_name(t) + " axis " + std::to_string(axis));
      }
    }
    // Lanes with NaN, +inf, all -inf; a size-1 axis; an empty tensor.
    Tensor s = random_tensor(DType::Float32, {8, 40}, -5, 5, 19);
    expect_matches(make_case(op, {s}, {}), std::string(op_name(op)) + " with specials");
    Tensor inf_rows = Tensor::from_vector<float>({3, 3}, {-INFINITY, -INFINITY, -INFINITY, INFINITY, 1, 2, NAN, 0, 1});
    expect_matches(make_case(op, {inf_rows}, {}), std::string(op_name(op)) + " special rows");
    expect_matches(make_case(op, {random_tensor(DType::Float32, {5, 1}, -3, 3, 20)}, {}), std::string(op_name(op)) + " size-1 axis");
    expect_matches(make_case(op, {Tensor::empty(DType::Float32, {0, 3})}, {}), std::string(op_name(op)) + " empty");
    // Large inputs: the maximum is subtracted first, so nothing overflows.
    expect_matches(make_case(op, {random_tensor(DType::Float32, {4, 300}, 50, 90, 21, false)}, {}),
                   std::string(op_name(op)) + " large values");
  }
}

TEST(SoftmaxLowering, HardmaxMarksTheFirstMaximumAndIgnoresNaN) {
  for (int64_t axis : {-1, 0, 1}) {
    Tensor x = random_tensor(DType::Float32, {5, 6, 19}, -2, 2, 80);  // few values: ties
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = std::round(x.data<float>()[i]);
    expect_matches(make_case(Op::Hardmax, {x}, {{"axis", int_attr(axis)}}), "Hardmax axis " + std::to_string(axis));
    Case legacy = make_case(Op::Hardmax, {x}, {{"axis", int_attr(axis < 0 ? 1 : axis)}});
    legacy.opset = 11;
    expect_matches(legacy, "Hardmax opset 11, flattened from axis " + std::to_string(axis < 0 ? 1 : axis));
  }
  Tensor rows = Tensor::from_vector<float>({4, 3}, {NAN, -INFINITY, -INFINITY, NAN, 2, 2, -INFINITY, NAN, 1, 3, NAN, 3});
  expect_matches(make_case(Op::Hardmax, {rows}, {}), "Hardmax rows with NaN and -inf");
}

TEST(NormalizationLowering, LpNormalizationOfOneAndTwoOverEveryAxisMatchesInterpreter) {
  for (int64_t p : {1, 2})
    for (int64_t axis : {-1, 0, 1}) {
      Tensor x = random_tensor(DType::Float32, {4, 7, 33}, -3, 3, 81);
      for (int64_t i = 0; i < 33; ++i) x.data<float>()[i] = 0;  // a zero vector along the last axis
      expect_matches(make_case(Op::LpNormalization, {x}, {{"axis", int_attr(axis)}, {"p", int_attr(p)}}),
                     "LpNormalization p " + std::to_string(p) + " axis " + std::to_string(axis));
    }
  expect_error(make_case(Op::LpNormalization, {random_tensor(DType::Float32, {3, 4}, -1, 1, 82)}, {{"p", int_attr(3)}}),
               ErrorCode::InvalidModel, "p = 3");
}

TEST(SoftmaxLowering, BeforeOpset13TheInputIsFlattenedFromAxis) {
  for (Op op : {Op::Softmax, Op::LogSoftmax}) {
    for (int64_t axis : {0, 1, 2}) {
      Case c = make_case(op, {random_tensor(DType::Float32, {3, 4, 5}, -4, 4, 22, false)}, {{"axis", int_attr(axis)}});
      c.opset = 11;
      expect_matches(c, std::string(op_name(op)) + " opset 11 axis " + std::to_string(axis));
    }
    Case def = make_case(op, {random_tensor(DType::Float32, {3, 4, 5}, -4, 4, 23, false)});
    def.opset = 12;
    expect_matches(def, std::string(op_name(op)) + " opset 12 default axis (1, flattened)");
  }
}

// The opset < 13 form (dims from `axis` on as one lane) is lowered with the graph's opset (above),
// so tier 1 takes every form, and an input of unknown rank at load: a version knows its shapes.
TEST(SoftmaxLowering, EveryFormBeforeAndAfterOpset13IsOfferedToTier1) {
  Graph g;
  int x = g.add_value("x", ValueInfo{ValueKind::Tensor, DType::Float32, Shape{2, 3, 4}, {}});
  int unranked = g.add_value("u", ValueInfo{ValueKind::Tensor, DType::Float32, std::nullopt, {}});
  for (int opset : {11, 13})
    for (int input : {x, unranked})
      for (int64_t axis : {1, 2, -1}) {
        g.opset = opset;
        Node n;
        n.op = Op::Softmax;
        n.inputs = {input};
        n.attrs["axis"] = int_attr(axis);
        EXPECT_EQ(kernels::can_lower_reduction(g, n), "") << "opset " << opset << " axis " << axis;
      }
}

TEST(LayerNormLowering, WithAndWithoutBiasAndStatisticsMatchesInterpreter) {
  const Shape shape{4, 6, 40};
  for (DType t : {DType::Float32, DType::Float64}) {
    for (int64_t axis : {-1, 1, 0}) {
      Shape norm(shape.begin() + (axis < 0 ? axis + 3 : axis), shape.end());
      Tensor x = random_tensor(t, shape, -3, 3, 24, false);
      Tensor scale = random_tensor(t, norm, 0.5, 2, 25, false);
      Tensor bias = random_tensor(t, norm, -1, 1, 26, false);
      std::string what = std::string(dtype_name(t)) + " axis " + std::to_string(axis);
      expect_matches(make_case(Op::LayerNormalization, {x, scale, bias}, {{"axis", int_attr(axis)}}), what + " with bias");
      expect_matches(make_case(Op::LayerNormalization, {x, scale}, {{"axis", int_attr(axis)}}), what + " without bias");
      expect_matches(make_case(Op::LayerNormalization, {x, scale, bias}, {{"axis", int_attr(axis)}, {"epsilon", float_attr(1e-3f)}}, 3),
                     what + " with Mean and InvStdDev");
    }
  }
  // A scale broadcast over the normalized dims, an offset far from the spread (cancellation), a
  // group of one element, NaN and infinities.
  Tensor x = random_tensor(DType::Float32, {5, 3, 8}, 999, 1001, 27, false);
  Tensor scale = random_tensor(DType::Float32, {1, 8}, 0.5, 2, 28, false);
  expect_matches(make_case(Op::LayerNormalization, {x, scale}, {{"axis", int_attr(1)}}), "broadcast scale, offset inputs");
  expect_matches(make_case(Op::LayerNormalization, {random_tensor(DType::Float32, {6, 1}, -1, 1, 29), Tensor::scalar<float>(2.0f)},
                           {}, 3),
                 "groups of one element");
  expect_matches(make_case(Op::LayerNormalization, {random_tensor(DType::Float32, {6, 50}, -1, 1, 30),
                                                    random_tensor(DType::Float32, {50}, -1, 1, 31, false)}),
                 "NaN and infinities");
  Case stash = make_case(Op::LayerNormalization, {random_tensor(DType::Float32, {3, 16}, -1, 1, 32, false),
                                                  random_tensor(DType::Float32, {16}, -1, 1, 33, false)},
                         {{"stash_type", int_attr(11)}}, 3);
  expect_matches(stash, "float64 statistics (stash_type 11)");
}

TEST(NormalizationLowering, InstanceNormalizationPerSampleAndChannelMatchesInterpreter) {
  for (DType t : {DType::Float32, DType::Float64}) {
    for (const Shape& s : {Shape{2, 3, 5, 7}, Shape{1, 4, 10}, Shape{2, 3, 1, 1}, Shape{3, 2, 4, 2, 3}, Shape{2, 3, 0, 2}}) {
      Tensor x = random_tensor(t, s, -3, 3, 70);
      Tensor scale = random_tensor(t, {s[1]}, 0.5, 2, 71, false), bias = random_tensor(t, {s[1]}, -1, 1, 72, false);
      expect_matches(make_case(Op::InstanceNormalization, {x, scale, bias}, {{"epsilon", float_attr(1e-3f)}}),
                     std::string("InstanceNormalization ") + dtype_name(t) + shape_name(s));
    }
  }
  Case bad = make_case(Op::InstanceNormalization, {random_tensor(DType::Float32, {2, 3, 4}, -1, 1, 73),
                                                   random_tensor(DType::Float32, {4}, -1, 1, 74),
                                                   random_tensor(DType::Float32, {3}, -1, 1, 75)});
  expect_error(bad, ErrorCode::InvalidArgument, "a scale of the wrong length");
}

TEST(NormalizationLowering, MeanVarianceNormalizationOverAnyAxesMatchesInterpreter) {
  Tensor x = random_tensor(DType::Float32, {2, 3, 4, 5}, -3, 3, 76);
  expect_matches(make_case(Op::MeanVarianceNormalization, {x}), "MeanVarianceNormalization default axes {0,2,3}");
  for (const std::vector<int64_t>& axes : {std::vector<int64_t>{1}, std::vector<int64_t>{0, 1, 2, 3},
                                           std::vector<int64_t>{2, 3}, std::vector<int64_t>{-1}, std::vector<int64_t>{0}})
    expect_matches(make_case(Op::MeanVarianceNormalization, {random_tensor(DType::Float64, {2, 3, 4, 5}, -3, 3, 77)},
                             {{"axes", ints_attr(axes)}}),
                   "MeanVarianceNormalization axes " + shape_name(axes));
  expect_error(make_case(Op::MeanVarianceNormalization, {random_tensor(DType::Float32, {3, 4}, -1, 1, 78)}),
               ErrorCode::InvalidModel, "default axes on a rank-2 input");
}

TEST(GlobalPoolLowering, AverageAndMaxOverSpatialDimsMatchInterpreter) {
  for (Op op : {Op::GlobalAveragePool, Op::GlobalMaxPool, Op::GlobalLpPool}) {
    for (const Shape& s : {Shape{2, 3, 7, 7}, Shape{1, 16, 5}, Shape{2, 4, 3, 2, 2}, Shape{2, 3, 1, 1}, Shape{2, 3, 0, 4}}) {
      expect_matches(make_case(op, {random_tensor(DType::Float32, s, -5, 5, 34)}), std::string(op_name(op)) + " " + shape_name(s));
      expect_matches(make_case(op, {random_tensor(DType::Float64, s, -5, 5, 35)}), std::string(op_name(op)) + " f64 " + shape_name(s));
    }
  }
}

TEST(GlobalPoolLowering, LpPoolOfAnyOrderMatchesInterpreter) {
  for (int64_t p : {1, 2, 3})
    expect_matches(make_case(Op::GlobalLpPool, {random_tensor(DType::Float32, {2, 5, 6, 6}, -2, 2, 38)}, {{"p", int_attr(p)}}),
                   "GlobalLpPool p " + std::to_string(p));
}

TEST(ReduceLowering, KernelsSplitRowsAcrossThreadsAndVectoriseTheInnerLoop) {
  Case c = make_case(Op::ReduceSum, {random_tensor(DType::Float32, {512, 1024}, -1, 1, 36, false)}, {{"axes", ints_attr({1})}});
  Compiled k = compile(c);
  ASSERT_EQ(k.k.calls.size(), 1u);
  EXPECT_EQ(k.k.calls[0].func.parallel_extent, 512) << "one parallel iteration per output row";
  EXPECT_EQ(k.k.calls[0].func.work_per_iteration, 1024);
  EXPECT_NE(k.kernels[0].source.find("vectorize(enable)"), std::string::npos) << k.kernels[0].source;
  expect_matches(c, "large row sum");
  // Over the outer axis: the kept inner axis is the vector lane.
  Case cols = make_case(Op::ReduceMax, {random_tensor(DType::Float32, {300, 2000}, -1, 1, 37)}, {{"axes", ints_attr({0})}});
  Compiled kc = compile(cols);
  EXPECT_EQ(kc.k.calls[0].func.parallel_extent, 4) << "2000 columns in blocks of 512";
  expect_matches(cols, "column max in blocks");
}

}  // namespace
}  // namespace terrace::testing

namespace terrace::testing {
namespace {

// ---- elementwise ops fused into the reductions (kernels::ReductionFusion) ----

// A node lowered with a prologue computing its input 0 (built and referenced by `pro`) and an
// optional epilogue on its output 0 (`epi`, whose input 0 is output 0): compiled, run, and
// compared with the interpreter running the same ops one by one.
struct FusedCase {
  Node node;
  ChainBuilder pro{"pro"};
  std::optional<ChainBuilder> epi;
  std::vector<Tensor> params;  // the node's inputs after input 0 (LayerNormalization's Scale, B)
};

// Returns the kernels' sources.
std::string expect_fused_matches(FusedCase& c, const std::string& what) {
  SCOPED_TRACE(what);
  const Tensor& x = c.pro.expected.at(0);
  // The reference: the node on the prologue's value, then the epilogue's own reference.
  std::vector<RValue> values{RValue(x)};
  for (const Tensor& p : c.params) values.push_back(RValue(p));
  std::vector<const RValue*> ptrs;
  for (const RValue& v : values) ptrs.push_back(&v);
  Tensor want = interpret_node(c.node, ptrs).at(0).tensor;
  kernels::ReductionFusion fusion;
  fusion.prologue = c.pro.group;
  std::vector<OpInput> in(1 + c.params.size());
  in[0].sig = {x.dtype(), x.shape()};
  for (size_t i = 0; i < c.params.size(); ++i) in[1 + i].sig = {c.params[i].dtype(), c.params[i].shape()};
  if (c.epi) {
    fusion.epilogue = c.epi->group;
    fusion.epilogue_operand = 0;
    EXPECT_EQ(c.epi->inputs[0].numel(), want.numel());
    want = c.epi->expected.at(0);
  }
  OpKernels k = kernels::lower_reduction(c.node, in, "fused_test", 17, fusion);
  std::string sources;
  // Slots: the node's inputs (input 0 not read), its outputs, the prologue's inputs, the
  // epilogue's inputs but its first.
  std::vector<void*> table{nullptr};
  for (Tensor& p : c.params) table.push_back(p.raw());
  std::vector<Tensor> outs;
  for (const auto& sig : k.outputs) {
    outs.push_back(Tensor::empty(sig.dtype, sig.shape));
    table.push_back(outs.back().raw());
  }
  for (Tensor& t : c.pro.inputs) table.push_back(t.raw());
  if (c.epi)
    for (size_t i = 1; i < c.epi->inputs.size(); ++i) table.push_back(c.epi->inputs[i].raw());
  for (const auto& call : k.calls) {
    jit::CpuKernel kernel = jit::compile_cpu_kernel(call.func);
    std::vector<void*> buffers;
    for (int s : call.slots) buffers.push_back(table.at(size_t(s)));
    jit::run_cpu_kernel(kernel, buffers);
    EXPECT_EQ(kernel.source.find("in0["), std::string::npos) << "input 0 is computed, never loaded";
    sources += kernel.source;
  }
  expect_close(outs.at(0), want, what);
  return sources;
}

// GPT-2's causal attention: Softmax(Where(mask, -inf, scores / 8)), the masked half of each row
// -inf. The Where's sides are loads: rendered as tr_select (both computed, blended), not as a
// ternary that clang keeps as a branch per element.
TEST(FusedReduction, CausalMaskWhereFusesIntoSoftmax) {
  FusedCase c;
  Ref q = c.pro.input(random_tensor(DType::Float32, {2, 3, 16, 16}, -8, 8, 52, false));
  Tensor causal = Tensor::empty(DType::Bool, {16, 16});
  for (int64_t i = 0; i < 16; ++i)
    for (int64_t j = 0; j < 16; ++j) causal.data<bool>()[i * 16 + j] = j > i;
  Ref mask = c.pro.input(causal);
  Ref minus_inf = c.pro.input(Tensor::scalar<float>(-INFINITY));
  Ref scale = c.pro.constant(Tensor::scalar<float>(8.0f));
  c.pro.output(c.pro.op(Op::Where, {mask, minus_inf, c.pro.op(Op::Div, {q, scale})}));
  c.node.op = Op::Softmax;
  c.node.name = "causal_softmax";
  c.node.inputs = {0};
  c.node.outputs = {1};
  c.node.attrs["axis"] = int_attr(-1);
  const std::string source = expect_fused_matches(c, "Softmax(Where(causal, -inf, q / 8))");
  const std::string body = source.substr(source.find("extern \"C\""));  // past the prelude's own ternaries
  EXPECT_NE(body.find("tr_select<float>("), std::string::npos) << body;
  EXPECT_EQ(body.find(" ? "), std::string::npos) << "a select with loads rendered as a ternary:\n" << body;
}

TEST(FusedReduction, ScaleAndMaskFuseIntoSoftmaxOverRowsAndColumns) {
  for (int64_t axis : {-1, 1}) {
    FusedCase c;
    Ref q = c.pro.input(random_tensor(DType::Float32, {2, 4, 16, 16}, -8, 8, 50, false));
    Ref mask = c.pro.input(random_tensor(DType::Float32, {16, 16}, -2, 2, 51));
    Ref scale = c.pro.constant(Tensor::scalar<float>(0.125f));
    c.pro.output(c.pro.op(Op::Add, {c.pro.op(Op::Mul, {q, scale}), mask}));
    c.node.op = Op::Softmax;
    c.node.name = "attention_softmax";
    c.node.inputs = {0};
    c.node.outputs = {1};
    c.node.attrs["axis"] = int_attr(axis);
    expect_fused_matches(c, "Softmax(q * scale + mask) axis " + std::to_string(axis));
  }
}

TEST(FusedReduction, ResidualAddsFuseIntoLayerNormalizationBeforeAndAfter) {
  FusedCase c;
  Ref x = c.pro.input(random_tensor(DType::Float32, {3, 10, 64}, -3, 3, 52, false));
  Ref r = c.pro.input(random_tensor(DType::Float32, {3, 10, 64}, -1, 1, 53, false));
  c.pro.output(c.pro.op(Op::Add, {x, r}));
  c.node.op = Op::LayerNormalization;
  c.node.name = "block_layernorm";
  c.node.inputs = {0, 1, 2};
  c.node.outputs = {3};
  c.params = {random_tensor(DType::Float32, {64}, 0.5, 1.5, 54, false), random_tensor(DType::Float32, {64}, -1, 1, 55, false)};
  // The reference of the layernorm's output, for the epilogue's chain.
  std::vector<RValue> v{RValue(c.pro.expected[0]), RValue(c.params[0]), RValue(c.params[1])};
  Tensor ln = interpret_node(c.node, {&v[0], &v[1], &v[2]}).at(0).tensor;
  c.epi.emplace("epi");
  Ref y = c.epi->input(ln);
  Ref res = c.epi->input(random_tensor(DType::Float32, {3, 10, 64}, -1, 1, 56));
  Ref bias = c.epi->input(random_tensor(DType::Float32, {64}, -1, 1, 57, false));
  c.epi->output(c.epi->op(Op::Add, {c.epi->op(Op::Add, {y, res}), bias}));
  expect_fused_matches(c, "LayerNormalization(x + r) + res + bias");
}

TEST(FusedReduction, BroadcastPrologueOperandsFeedReductionsArgMaxAndLogSoftmaxEpilogue) {
  for (Op op : {Op::ReduceMean, Op::ReduceMax, Op::ReduceSumSquare, Op::ArgMax}) {
    for (const std::vector<int64_t>& axes : {std::vector<int64_t>{2}, std::vector<int64_t>{1}, std::vector<int64_t>{0, 2}}) {
      FusedCase c;
      Ref x = c.pro.input(random_tensor(DType::Float32, {4, 8, 33}, -3, 3, 58));
      Ref centre = c.pro.input(random_tensor(DType::Float32, {8, 1}, -1, 1, 59, false));
      c.pro.output(c.pro.op(Op::Abs, {c.pro.op(Op::Sub, {x, centre})}));
      c.node.op = op;
      c.node.name = "fused_reduce";
      c.node.inputs = {0};
      c.node.outputs = {1};
      if (op == Op::ArgMax) c.node.attrs["axis"] = int_attr(axes.back());
      else c.node.attrs["axes"] = ints_attr(axes);
      expect_fused_matches(c, std::string(op_name(op)) + "(|x - centre|) axes " + shape_str(axes));
    }
  }
  FusedCase c;
  Ref x = c.pro.input(random_tensor(DType::Float32, {6, 40}, -5, 5, 60, false));
  c.pro.output(c.pro.op(Op::Mul, {x, c.pro.constant(Tensor::scalar<float>(2.0f))}));
  c.node.op = Op::LogSoftmax;
  c.node.name = "fused_log_softmax";
  c.node.inputs = {0};
  c.node.outputs = {1};
  std::vector<RValue> v{RValue(c.pro.expected[0])};
  Tensor ls = interpret_node(c.node, {&v[0]}).at(0).tensor;
  c.epi.emplace("epi");
  c.epi->output(c.epi->op(Op::Neg, {c.epi->input(ls)}));
  expect_fused_matches(c, "-LogSoftmax(2x)");
}

TEST(FusedReduction, MismatchedGroupsAreRefusedNamingTheNode) {
  ChainBuilder pro("pro");
  Ref x = pro.input(random_tensor(DType::Float32, {4, 5}, -1, 1, 61));
  pro.output(pro.op(Op::Relu, {x}));
  Node node;
  node.op = Op::ReduceSum;
  node.name = "bad_fusion";
  node.inputs = {0};
  node.outputs = {1};
  kernels::ReductionFusion fusion;
  fusion.prologue = pro.group;
  std::vector<OpInput> in(1);
  in[0].sig = {DType::Float32, {4, 6}};  // not what the prologue gives
  try {
    kernels::lower_reduction(node, in, "bad", 17, fusion);
    ADD_FAILURE() << "a prologue of the wrong shape was fused";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("bad_fusion"), std::string::npos) << e.what();
  }
  in[0].sig = {DType::Float32, {4, 5}};
  fusion.epilogue = pro.group;  // Reduce* outputs are not X-shaped: no epilogue
  try {
    kernels::lower_reduction(node, in, "bad", 17, fusion);
    ADD_FAILURE() << "an epilogue was fused into ReduceSum";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::NotImplemented);
  }
}

}  // namespace
}  // namespace terrace::testing
