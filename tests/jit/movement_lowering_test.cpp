// Data movement lowered to tier-1 kernels (kernels/lower_movement*.cpp), compiled and run over a
// slot table as tier 1 runs them, against the interpreter bit for bit: every op, several shapes
// and attributes, negative axes, zero-sized dims, aliases, and run-time index checks.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <set>

#include "jit/cpu/cpu_kernel.h"
#include "kernels/lower_movement.h"
#include "kernels/lower_op.h"
#include "tests/support/graph_builder.h"
#include "tests/support/node_runner.h"

namespace terrace::testing {
namespace {

using kernels::OpInput;
using kernels::OpKernels;

// A node named "node_under_test" reading values 0..n-1 (an undefined tensor: an absent input).
Node movement_node(Op op, const std::vector<Tensor>& in, std::map<std::string, Attr> attrs = {},
                   size_t n_out = 1) {
  Node n;
  n.op = op;
  n.name = "node_under_test";
  for (size_t i = 0; i < in.size(); ++i) n.inputs.push_back(in[i].defined() ? int(i) : -1);
  for (size_t i = 0; i < n_out; ++i) n.outputs.push_back(int(in.size() + i));
  for (auto& [k, v] : attrs) n.attrs[k] = v.a;
  return n;
}

// Lowers `node` (inputs listed in `runtime` are known only at run time, the others are constants
// as initializers are), compiles its kernels and runs them over a slot table as tier 1 does: the
// error word zeroed first and read last, aliases mapped to their input. `lowered` gets the kernels.
std::vector<Tensor> run_lowered(const Node& node, const std::vector<Tensor>& inputs,
                                const std::set<size_t>& runtime = {0}, OpKernels* lowered = nullptr) {
  std::vector<OpInput> in;
  for (size_t i = 0; i < inputs.size(); ++i) {
    OpInput x;
    x.absent = !inputs[i].defined();
    if (!x.absent) x.sig = {inputs[i].dtype(), inputs[i].shape()};
    if (!x.absent && !runtime.count(i)) x.value = &inputs[i];
    in.push_back(x);
  }
  OpKernels k = kernels::lower_op(node, in, "movement_test");
  std::vector<Tensor> slots;
  for (const Tensor& t : inputs) slots.push_back(t);
  for (size_t j = 0; j < k.outputs.size(); ++j) {
    int alias = k.alias_of.empty() ? -1 : k.alias_of[j];
    if (alias >= 0) slots.push_back(inputs[size_t(alias)].reshaped(k.outputs[j].shape));
    else slots.push_back(Tensor::empty(k.outputs[j].dtype, k.outputs[j].shape));
  }
  for (const kernels::TensorSig& s : k.scratch) slots.push_back(Tensor::zeros(s.dtype, s.shape));
  std::vector<void*> table;
  for (Tensor& t : slots) table.push_back(t.defined() ? t.raw() : nullptr);
  if (k.error_slot >= 0) std::memset(table[size_t(k.error_slot)], 0, 2 * sizeof(int64_t));
  for (const OpKernels::Call& call : k.calls) {
    jit::CpuKernel kernel = jit::compile_cpu_kernel(call.func);
    std::vector<void*> buffers;
    for (int s : call.slots) buffers.push_back(table[size_t(s)]);
    jit::run_cpu_kernel(kernel, buffers);
  }
  if (k.error_slot >= 0) {
    const auto* word = static_cast<const int64_t*>(table[size_t(k.error_slot)]);
    if (word[0] != 0) fail(ErrorCode::InvalidArgument, node.describe(), ": ", k.error_message, " (got ", word[1], ")");
  }
  std::vector<Tensor> out(slots.begin() + int64_t(inputs.size()), slots.begin() + int64_t(inputs.size() + k.outputs.size()));
  if (lowered) *lowered = std::move(k);
  return out;
}

void expect_bitwise_equal(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what << ": " << shape_str(got.shape()) << " vs " << shape_str(want.shape());
  EXPECT_EQ(std::memcmp(got.raw(), want.raw(), want.nbytes()), 0)
      << what << ": got " << got.str(16) << ", want " << want.str(16);
}

// The lowered op against the interpreter, every output bit for bit.
OpKernels expect_matches_interpreter(const Node& node, const std::vector<Tensor>& inputs,
                                     const std::set<size_t>& runtime = {0}) {
  std::vector<Tensor> want = run_node(node, inputs);
  OpKernels k;
  std::vector<Tensor> got = run_lowered(node, inputs, runtime, &k);
  EXPECT_EQ(got.size(), want.size());
  for (size_t j = 0; j < std::min(got.size(), want.size()); ++j) {
    if (node.outputs[j] < 0) continue;
    expect_bitwise_equal(got[j], want[j], node.describe() + " output " + std::to_string(j));
  }
  return k;
}

// Random bits of any dtype (bools 0 or 1): data movement must move NaN payloads untouched.
Tensor random_bits(DType t, Shape shape, uint64_t seed) {
  Tensor x = Tensor::empty(t, std::move(shape));
  std::mt19937_64 rng(seed);
  auto* p = static_cast<uint8_t*>(x.raw());
  for (size_t i = 0; i < x.nbytes(); ++i) p[i] = t == DType::Bool ? uint8_t(rng() & 1) : uint8_t(rng());
  return x;
}

Tensor ints(std::vector<int64_t> v) { return Tensor::from_vector<int64_t>({int64_t(v.size())}, v); }
Tensor floats(std::vector<float> v) { return Tensor::from_vector<float>({int64_t(v.size())}, v); }

constexpr DType kMoved[] = {DType::Float32, DType::Float16, DType::Int8, DType::Int64, DType::Bool};

// ---- Transpose, DepthToSpace, SpaceToDepth ----

TEST(MovementLowering, TransposeMatchesInterpreterForShapesPermsAndDtypes) {
  struct Case {
    Shape shape;
    std::vector<int64_t> perm;
  };
  std::vector<Case> cases = {{{2, 3, 4}, {2, 0, 1}},       {{4, 6, 40, 16}, {0, 2, 1, 3}},
                             {{3, 70, 45}, {0, 2, 1}},     {{33, 65}, {1, 0}},
                             {{2, 3, 5, 7}, {3, 1, 0, 2}}, {{5, 9, 12}, {-1, -3, -2}}};
  for (DType t : kMoved)
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(dtype_name(t)) + shape_str(c.shape));
      Tensor x = random_bits(t, c.shape, 1);
      OpKernels k = expect_matches_interpreter(movement_node(Op::Transpose, {x}, {{"perm", c.perm}}), {x});
      EXPECT_EQ(k.calls.size(), 1u);
    }
}

TEST(MovementLowering, TransposeWithoutPermReversesDims) {
  Tensor x = random_bits(DType::Float32, {3, 4, 5}, 2);
  expect_matches_interpreter(movement_node(Op::Transpose, {x}), {x});
}

TEST(MovementLowering, TransposeMovingOnlyUnitDimsIsAnAlias) {
  Tensor x = random_bits(DType::Float32, {1, 6, 1, 5}, 3);
  OpKernels k = expect_matches_interpreter(movement_node(Op::Transpose, {x}, {{"perm", std::vector<int64_t>{2, 1, 0, 3}}}), {x});
  EXPECT_TRUE(k.calls.empty());
  ASSERT_EQ(k.alias_of.size(), 1u);
  EXPECT_EQ(k.alias_of[0], 0);
}

TEST(MovementLowering, TransposeOfZeroSizedTensorHasNoKernel) {
  Tensor x = random_bits(DType::Float32, {0, 3, 5}, 4);
  OpKernels k = expect_matches_interpreter(movement_node(Op::Transpose, {x}, {{"perm", std::vector<int64_t>{2, 0, 1}}}), {x});
  EXPECT_TRUE(k.calls.empty());
}

TEST(MovementLowering, TransposeWithBadPermIsInvalidArgumentNamingTheNode) {
  Tensor x = random_bits(DType::Float32, {2, 3}, 5);
  Error e = error_of([&] { run_lowered(movement_node(Op::Transpose, {x}, {{"perm", std::vector<int64_t>{0, 0}}}), {x}); });
  EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(e.message().find("node_under_test"), std::string::npos) << e.message();
}

TEST(MovementLowering, DepthToSpaceAndSpaceToDepthMatchInterpreter) {
  Tensor x = random_bits(DType::Float32, {2, 8, 3, 5}, 6);
  expect_matches_interpreter(movement_node(Op::DepthToSpace, {x}, {{"blocksize", 2}}), {x});
  expect_matches_interpreter(movement_node(Op::DepthToSpace, {x}, {{"blocksize", 2}, {"mode", "CRD"}}), {x});
  Tensor y = random_bits(DType::Int16, {2, 3, 6, 9}, 7);
  expect_matches_interpreter(movement_node(Op::SpaceToDepth, {y}, {{"blocksize", 3}}), {y});
}

// ---- Slice, Concat, Split ----

TEST(MovementLowering, SliceMatchesInterpreterWithStepsAxesAndClamping) {
  Tensor x = random_bits(DType::Float32, {6, 7, 8}, 8);
  struct Case {
    std::vector<int64_t> starts, ends, axes, steps;
  };
  std::vector<Case> cases = {
      {{1, 2}, {5, 6}, {0, 2}, {1, 1}},         {{-1}, {-100}, {1}, {-2}},
      {{0, 0, 0}, {100, 100, 100}, {0, 1, 2}, {2, 3, 4}},
      {{5}, {1}, {-1}, {-1}},                   {{2}, {2}, {0}, {1}},  // empty
      {{INT64_MIN}, {INT64_MAX}, {-3}, {3}},    {{7}, {0}, {2}, {INT64_MIN}}};
  for (const Case& c : cases) {
    Tensor s = ints(c.starts), e = ints(c.ends), a = ints(c.axes), st = ints(c.steps);
    expect_matches_interpreter(movement_node(Op::Slice, {x, s, e, a, st}), {x, s, e, a, st});
  }
  // Without axes and steps, and in opset 1's attribute form.
  Tensor s = ints({1, 1}), e = ints({3, -1});
  expect_matches_interpreter(movement_node(Op::Slice, {x, s, e}), {x, s, e});
  expect_matches_interpreter(movement_node(Op::Slice, {x}, {{"starts", std::vector<int64_t>{1}},
                                                            {"ends", std::vector<int64_t>{4}},
                                                            {"axes", std::vector<int64_t>{-1}}}),
                             {x});
}

TEST(MovementLowering, SliceKeepingEverythingIsAnAlias) {
  Tensor x = random_bits(DType::Int64, {4, 5}, 9);
  Tensor s = ints({0}), e = ints({INT64_MAX});
  OpKernels k = expect_matches_interpreter(movement_node(Op::Slice, {x, s, e}), {x, s, e});
  EXPECT_TRUE(k.calls.empty());
  EXPECT_EQ(k.alias_of, std::vector<int>{0});
}

TEST(MovementLowering, SliceWithRunTimeStartsIsNotImplemented) {
  Tensor x = random_bits(DType::Float32, {4, 5}, 10);
  Tensor s = ints({1}), e = ints({3});
  Error err = error_of([&] { run_lowered(movement_node(Op::Slice, {x, s, e}), {x, s, e}, {0, 1}); });
  EXPECT_EQ(err.code(), ErrorCode::NotImplemented);
  EXPECT_NE(err.message().find("starts"), std::string::npos) << err.message();
}

TEST(MovementLowering, ConcatMatchesInterpreterOnEveryAxis) {
  for (DType t : kMoved) {
    Tensor a = random_bits(t, {2, 3, 4}, 11), b = random_bits(t, {2, 5, 4}, 12), c = random_bits(t, {2, 0, 4}, 13);
    expect_matches_interpreter(movement_node(Op::Concat, {a, b, c}, {{"axis", 1}}), {a, b, c}, {0, 1, 2});
    expect_matches_interpreter(movement_node(Op::Concat, {a, a}, {{"axis", -1}}), {a, a}, {0, 1});
    expect_matches_interpreter(movement_node(Op::Concat, {a, a, a}, {{"axis", 0}}), {a, a, a}, {0, 1, 2});
  }
}

TEST(MovementLowering, ConcatOfFewLongRowsSplitsThemIntoParallelChunks) {
  Tensor a = random_bits(DType::Int8, {2, 131072}, 37), b = random_bits(DType::Int8, {2, 131072}, 38);
  OpKernels k = expect_matches_interpreter(movement_node(Op::Concat, {a, b}, {{"axis", 1}}), {a, b}, {0, 1});
  ASSERT_EQ(k.calls.size(), 2u);
  EXPECT_EQ(k.calls[0].func.parallel_extent, 2 * 131072 / 16384) << "two rows, cut into chunks of 16384";
}

TEST(MovementLowering, ConcatOfMismatchedShapesIsInvalidArgument) {
  Tensor a = random_bits(DType::Float32, {2, 3}, 14), b = random_bits(DType::Float32, {3, 3}, 15);
  Error e = error_of([&] { run_lowered(movement_node(Op::Concat, {a, b}, {{"axis", 1}}), {a, b}, {0, 1}); });
  EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(e.message().find("node_under_test"), std::string::npos);
}

TEST(MovementLowering, SplitMatchesInterpreterWithSplitInputAttributeAndEqualParts) {
  Tensor x = random_bits(DType::Float16, {4, 10, 3}, 16);
  Tensor sizes = ints({2, 5, 3});
  expect_matches_interpreter(movement_node(Op::Split, {x, sizes}, {{"axis", 1}}, 3), {x, sizes});
  expect_matches_interpreter(movement_node(Op::Split, {x}, {{"axis", -2}, {"split", std::vector<int64_t>{7, 0, 3}}}, 3), {x});
  expect_matches_interpreter(movement_node(Op::Split, {x}, {{"axis", 0}}, 2), {x});
  expect_matches_interpreter(movement_node(Op::Split, {x}, {{"axis", 1}, {"num_outputs", 3}}, 3), {x});  // 4, 4, 2
  Node unused = movement_node(Op::Split, {x}, {{"axis", 2}}, 3);
  unused.outputs[1] = -1;
  OpKernels k = expect_matches_interpreter(unused, {x});
  EXPECT_EQ(k.calls.size(), 2u) << "an output nobody reads is not copied";
}

// ---- Expand, Tile ----

TEST(MovementLowering, ExpandMatchesInterpreter) {
  Tensor x = random_bits(DType::Int32, {3, 1}, 17);
  for (std::vector<int64_t> shape : {std::vector<int64_t>{2, 3, 4}, {3, 5}, {1, 1}, {4, 3, 0}, {3, 1}}) {
    Tensor s = ints(shape);
    expect_matches_interpreter(movement_node(Op::Expand, {x, s}), {x, s});
  }
  Tensor y = random_bits(DType::UInt8, {1, 4, 1}, 18), s = ints({5, 1, 4, 7});
  expect_matches_interpreter(movement_node(Op::Expand, {y, s}), {y, s});
  Tensor column = random_bits(DType::Float32, {16, 1}, 36), wide = ints({3, 16, 32});  // a row filled per element
  expect_matches_interpreter(movement_node(Op::Expand, {column, wide}), {column, wide});
}

TEST(MovementLowering, TileMatchesInterpreter) {
  Tensor x = random_bits(DType::Float64, {2, 3}, 19);
  for (std::vector<int64_t> r : {std::vector<int64_t>{2, 3}, {1, 1}, {3, 1}, {0, 2}, {1, 40}}) {
    Tensor reps = ints(r);
    expect_matches_interpreter(movement_node(Op::Tile, {x, reps}), {x, reps});
  }
}

// ---- Gather, GatherElements ----

TEST(MovementLowering, GatherMatchesInterpreterOnAxesWithNegativeIndices) {
  Tensor data = random_bits(DType::Float32, {5, 6, 7}, 20);
  Tensor idx = Tensor::from_vector<int64_t>({2, 2}, {0, -1, 4, -5});
  Tensor idx32 = Tensor::from_vector<int32_t>({3}, {2, -3, 0});
  Tensor scalar = Tensor::scalar<int64_t>(-2);
  for (int64_t axis : {0, 1, 2, -1, -3})
    for (const Tensor* i : {&idx, &idx32, &scalar}) {
      SCOPED_TRACE("axis " + std::to_string(axis) + " indices " + i->str());
      expect_matches_interpreter(movement_node(Op::Gather, {data, *i}, {{"axis", axis}}), {data, *i}, {0, 1});
      expect_matches_interpreter(movement_node(Op::Gather, {data, *i}, {{"axis", axis}}), {data, *i}, {0});
    }
  Tensor flat = random_bits(DType::Bool, {9}, 21);
  OpKernels k = expect_matches_interpreter(movement_node(Op::Gather, {flat, idx}), {flat, idx}, {0, 1});
  ASSERT_EQ(k.calls.size(), 1u);
  EXPECT_EQ(k.calls[0].func.parallel_extent, 4) << "one data row: the indices are the parallel loop";
}

TEST(MovementLowering, GatherWithRunTimeIndexOutOfRangeIsInvalidArgumentNamingTheNode) {
  Tensor data = random_bits(DType::Float32, {5, 8}, 22);
  for (int64_t axis : {0, 1}) {
    for (int64_t bad : {5 + 3 * axis, -6 - 3 * axis, int64_t(1) << 40}) {
      Tensor idx = Tensor::from_vector<int64_t>({3}, {0, bad, 1});
      Error e = error_of([&] { run_lowered(movement_node(Op::Gather, {data, idx}, {{"axis", axis}}), {data, idx}, {0, 1}); });
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
      EXPECT_NE(e.message().find("node_under_test"), std::string::npos) << e.message();
      EXPECT_NE(e.message().find("got " + std::to_string(bad)), std::string::npos) << e.message();
    }
  }
}

TEST(MovementLowering, GatherChecksIndicesEvenWhenTheOutputIsEmpty) {
  Tensor data = random_bits(DType::Float32, {4, 0}, 23);
  Tensor idx = ints({1, 9});
  EXPECT_THROW(run_node(movement_node(Op::Gather, {data, idx}), {data, idx}), Error);
  Error e = error_of([&] { run_lowered(movement_node(Op::Gather, {data, idx}), {data, idx}, {0, 1}); });
  EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  Tensor good = ints({1, -4});
  expect_matches_interpreter(movement_node(Op::Gather, {data, good}), {data, good}, {0, 1});
}

TEST(MovementLowering, GatherWithConstantIndexOutOfRangeFailsAtLowering) {
  Tensor data = random_bits(DType::Float32, {5, 8}, 24);
  Tensor idx = ints({0, 7});
  Error e = error_of([&] { run_lowered(movement_node(Op::Gather, {data, idx}), {data, idx}, {0}); });
  EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(e.message().find("node_under_test"), std::string::npos) << e.message();
}

TEST(MovementLowering, GatherElementsMatchesInterpreterAndChecksIndices) {
  Tensor data = random_bits(DType::Int64, {4, 5, 6}, 25);
  std::mt19937_64 rng(26);
  for (int64_t axis : {0, 1, 2, -1}) {
    int64_t dim = data.dim(axis);
    Tensor idx = Tensor::empty(DType::Int64, {3, 4, 5});
    for (int64_t i = 0; i < idx.numel(); ++i) idx.data<int64_t>()[i] = int64_t(rng() % uint64_t(2 * dim)) - dim;
    expect_matches_interpreter(movement_node(Op::GatherElements, {data, idx}, {{"axis", axis}}), {data, idx}, {0, 1});
    expect_matches_interpreter(movement_node(Op::GatherElements, {data, idx}, {{"axis", axis}}), {data, idx}, {0});
    idx.data<int64_t>()[17] = dim;
    Error e = error_of([&] {
      run_lowered(movement_node(Op::GatherElements, {data, idx}, {{"axis", axis}}), {data, idx}, {0, 1});
    });
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(e.message().find("node_under_test"), std::string::npos) << e.message();
  }
}

// ---- Pad ----

TEST(MovementLowering, PadMatchesInterpreterInEveryMode) {
  Tensor x = random_bits(DType::Float32, {3, 4, 5}, 27);
  std::vector<std::vector<int64_t>> pads = {
      {0, 1, 2, 1, 0, 3}, {1, 0, 0, 0, 2, 1}, {0, -1, -2, 0, 1, 2}, {0, 0, 4, 0, 0, 4}, {0, 0, 0, 0, 0, 0}};
  for (const char* mode : {"constant", "reflect", "edge", "wrap"})
    for (const auto& p : pads) {
      SCOPED_TRACE(std::string(mode) + " " + shape_str(p));
      Tensor pt = ints(p);
      expect_matches_interpreter(movement_node(Op::Pad, {x, pt}, {{"mode", mode}}), {x, pt});
    }
  // The fill as a run-time input, and opset 2's attributes.
  Tensor pt = ints({1, 2, 0, 0, 3, 1}), fill = Tensor::scalar<float>(-7.5f);
  expect_matches_interpreter(movement_node(Op::Pad, {x, pt, fill}), {x, pt, fill}, {0, 2});
  expect_matches_interpreter(movement_node(Op::Pad, {x}, {{"pads", std::vector<int64_t>{1, 0, 1, 0, 2, 2}}, {"value", 2.5f}}), {x});
  // Opset 18's axes: the pads speak of these dims only.
  Tensor axes = ints({-1, 0}), some = ints({2, 1, 0, 3});
  expect_matches_interpreter(movement_node(Op::Pad, {x, some, Tensor(), axes}, {{"mode", "edge"}}), {x, some, Tensor(), axes});
  Tensor b = random_bits(DType::Bool, {6}, 28), p1 = ints({2, 3});
  expect_matches_interpreter(movement_node(Op::Pad, {b, p1}, {{"mode", "reflect"}}), {b, p1});
}

TEST(MovementLowering, PadOfZeroSizedInputFillsOrFails) {
  Tensor x = random_bits(DType::Float32, {0, 3}, 29), p = ints({1, 1, 1, 0});
  expect_matches_interpreter(movement_node(Op::Pad, {x, p}), {x, p});
  Error e = error_of([&] { run_lowered(movement_node(Op::Pad, {x, p}, {{"mode", "edge"}}), {x, p}); });
  EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
}

// ---- Resize ----

TEST(MovementLowering, ResizeNearestMatchesInterpreterForRoundingAndCoordinateModes) {
  Tensor x = random_bits(DType::Float32, {1, 3, 5, 7}, 30);
  std::vector<std::vector<float>> scales = {{1, 1, 2, 2}, {1, 1, 0.5f, 0.6f}, {1, 1, 1.5f, 2.5f}, {1, 2, 3, 1}};
  for (const char* coord : {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_half_pixel_for_nn"})
    for (const char* rounding : {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"})
      for (const auto& s : scales) {
        SCOPED_TRACE(std::string(coord) + " " + rounding + " " + std::to_string(s[2]));
        Tensor st = floats(s);
        expect_matches_interpreter(
            movement_node(Op::Resize, {x, Tensor(), st}, {{"coordinate_transformation_mode", coord}, {"nearest_mode", rounding}}),
            {x, Tensor(), st});
      }
  // Sizes instead of scales, other dtypes, and opset 10's (X, scales).
  Tensor i8 = random_bits(DType::Int8, {2, 3, 4}, 31), sizes = ints({2, 7, 9});
  expect_matches_interpreter(movement_node(Op::Resize, {i8, Tensor(), Tensor(), sizes}), {i8, Tensor(), Tensor(), sizes});
  Tensor st = floats({1, 1, 2, 3});
  expect_matches_interpreter(movement_node(Op::Resize, {x, st}), {x, st});
  // Upsample: scales as an input (opset 9) or an attribute (opset 7), nearest and linear.
  expect_matches_interpreter(movement_node(Op::Upsample, {x, st}), {x, st});
  Tensor finite = random_tensor({1, 3, 5, 7}, 39, -4, 4);  // linear arithmetic: no NaN payloads to compare
  expect_matches_interpreter(movement_node(Op::Upsample, {finite}, {{"scales", std::vector<float>{1, 1, 1.5f, 2}}, {"mode", "linear"}}), {finite});
}

TEST(MovementLowering, ResizeLinearMatchesInterpreterBitForBit) {
  Tensor x = random_tensor({2, 3, 6, 5}, 32, -4, 4);
  x.data<float>()[0] = -0.0f;
  std::vector<std::vector<float>> scales = {{1, 1, 2, 2}, {1, 1, 0.5f, 0.8f}, {1, 1, 1.7f, 3}, {1, 1.5f, 2, 1}};
  for (const char* coord : {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"})
    for (const auto& s : scales) {
      SCOPED_TRACE(std::string(coord) + " " + std::to_string(s[1]) + " " + std::to_string(s[2]));
      Tensor st = floats(s);
      expect_matches_interpreter(
          movement_node(Op::Resize, {x, Tensor(), st}, {{"mode", "linear"}, {"coordinate_transformation_mode", coord}}),
          {x, Tensor(), st});
    }
  Tensor d = random_tensor({4, 9}, 33).cast(DType::Float64), sizes = ints({7, 4});
  expect_matches_interpreter(movement_node(Op::Resize, {d, Tensor(), Tensor(), sizes}, {{"mode", "linear"}}),
                             {d, Tensor(), Tensor(), sizes});
}

// Opset 18's axes and keep_aspect_ratio_policy: compiled, bit-identical to the interpreter.
TEST(MovementLowering, ResizeAxesAndAspectRatioPolicyMatchInterpreter) {
  Tensor x = random_tensor({1, 2, 5, 7}, 40, -4, 4);
  for (const char* mode : {"nearest", "linear"}) {
    for (std::vector<int64_t> axes : {std::vector<int64_t>{2, 3}, std::vector<int64_t>{3, 2}, std::vector<int64_t>{-1}}) {
      SCOPED_TRACE(std::string(mode) + " axes " + std::to_string(axes[0]));
      std::vector<float> sv = axes.size() == 2 ? std::vector<float>{1.5f, 0.6f} : std::vector<float>{2.5f};
      Tensor st = floats(sv);
      expect_matches_interpreter(movement_node(Op::Resize, {x, Tensor(), st}, {{"mode", mode}, {"axes", axes}}),
                                 {x, Tensor(), st});
      Tensor sizes = axes.size() == 2 ? ints({9, 4}) : ints({3});
      for (const char* policy : {"stretch", "not_larger", "not_smaller"}) {
        SCOPED_TRACE(policy);
        expect_matches_interpreter(
            movement_node(Op::Resize, {x, Tensor(), Tensor(), sizes},
                          {{"mode", mode}, {"axes", axes}, {"keep_aspect_ratio_policy", policy}}),
            {x, Tensor(), Tensor(), sizes});
      }
    }
  }
  // The policies without axes: every dim takes the one scale.
  Tensor sizes = ints({1, 2, 9, 4});
  for (const char* policy : {"not_larger", "not_smaller"})
    expect_matches_interpreter(movement_node(Op::Resize, {x, Tensor(), Tensor(), sizes}, {{"keep_aspect_ratio_policy", policy}}),
                               {x, Tensor(), Tensor(), sizes});
  // An axis listed twice is the interpreter's error too.
  Tensor st = floats({2, 2});
  Error e = error_of([&] {
    run_lowered(movement_node(Op::Resize, {x, Tensor(), st}, {{"axes", std::vector<int64_t>{2, -2}}}), {x, Tensor(), st});
  });
  EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
}

// ---- aliases ----

TEST(MovementLowering, ReshapeFlattenSqueezeUnsqueezeIdentityAreAliases) {
  Tensor x = random_bits(DType::Float32, {2, 1, 3, 4}, 34);
  Tensor shape = ints({0, -1, 2}), axes = ints({1}), uaxes = ints({0, -1});
  std::vector<std::pair<Node, std::vector<Tensor>>> cases = {
      {movement_node(Op::Reshape, {x, shape}), {x, shape}},
      {movement_node(Op::Flatten, {x}, {{"axis", -2}}), {x}},
      {movement_node(Op::Squeeze, {x, axes}), {x, axes}},
      {movement_node(Op::Squeeze, {x}), {x}},
      {movement_node(Op::Unsqueeze, {x, uaxes}), {x, uaxes}},
      {movement_node(Op::Unsqueeze, {x}, {{"axes", std::vector<int64_t>{2}}}), {x}},
      {movement_node(Op::Identity, {x}), {x}}};
  for (auto& [node, in] : cases) {
    SCOPED_TRACE(node.describe());
    OpKernels k = expect_matches_interpreter(node, in);
    EXPECT_TRUE(k.calls.empty());
    EXPECT_EQ(k.alias_of, std::vector<int>{0});
  }
  Tensor bad = ints({5, -1});
  Error e = error_of([&] { run_lowered(movement_node(Op::Reshape, {x, bad}), {x, bad}); });
  EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
}

// ---- index maps for fusion ----

// Reads input 0 through the op's strided view on the host, element by element.
Tensor read_through(const kernels::movement::StridedView& v, const Tensor& x) {
  Tensor out = Tensor::empty(x.dtype(), v.shape);
  const size_t size = dtype_size(x.dtype());
  for (int64_t p = 0; p < out.numel(); ++p) {
    int64_t at = v.from.base, rest = p;
    for (size_t d = v.shape.size(); d-- > 0;) {
      at += rest % v.shape[d] * v.from.strides[d];
      rest /= v.shape[d];
    }
    std::memcpy(static_cast<char*>(out.raw()) + size_t(p) * size, static_cast<const char*>(x.raw()) + size_t(at) * size, size);
  }
  return out;
}

TEST(MovementLowering, StridedViewsReadWhatTheInterpreterComputes) {
  Tensor x = random_bits(DType::Float32, {4, 1, 6, 5}, 35);
  Tensor starts = ints({1, -1}), ends = ints({4, 0}), axes = ints({0, 3}), steps = ints({2, -2});
  Tensor shape = ints({3, 4, 1, 6, 5}), flat = ints({-1, 30});
  std::vector<std::pair<Node, std::vector<Tensor>>> cases = {
      {movement_node(Op::Transpose, {x}, {{"perm", std::vector<int64_t>{3, 0, 2, 1}}}), {x}},
      {movement_node(Op::Slice, {x, starts, ends, axes, steps}), {x, starts, ends, axes, steps}},
      {movement_node(Op::Expand, {x, shape}), {x, shape}},
      {movement_node(Op::Reshape, {x, flat}), {x, flat}},
      {movement_node(Op::Squeeze, {x}), {x}}};
  for (auto& [node, in] : cases) {
    SCOPED_TRACE(node.describe());
    std::vector<OpInput> sigs;
    for (const Tensor& t : in) sigs.push_back({{t.dtype(), t.shape()}, &t});
    std::optional<kernels::movement::StridedView> v = kernels::movement::strided_view_of(node, sigs);
    ASSERT_TRUE(v.has_value());
    expect_bitwise_equal(read_through(*v, x), run_node(node, in)[0], node.describe());
  }
  Tensor idx = ints({0});
  EXPECT_FALSE(kernels::movement::strided_view_of(movement_node(Op::Gather, {x, idx}), {{{x.dtype(), x.shape()}}, {{DType::Int64, {1}}}}));
}

// ---- what the partitioner is told ----

TEST(MovementLowering, CanLowerNeedsShapeInputsKnownBeforeTheRun) {
  GraphBuilder b;
  int x = b.input("x", DType::Float32, {4, 5});
  int runtime_starts = b.input("starts", DType::Int64, {1});
  int starts = b.constant("c_starts", ints({1}));
  int ends = b.constant("c_ends", ints({3}));
  int by_constant = b.node(Op::Slice, {x, starts, ends});
  int by_input = b.node(Op::Slice, {x, runtime_starts, ends});
  int idx = b.input("idx", DType::Int64, {2});
  b.node(Op::Gather, {x, idx});
  b.output(by_constant);
  b.output(by_input);
  auto g = b.build();
  EXPECT_EQ(kernels::can_lower_op(*g, g->nodes[0]), "");
  std::string why = kernels::can_lower_op(*g, g->nodes[1]);
  EXPECT_NE(why.find("starts"), std::string::npos) << why;
  EXPECT_EQ(kernels::can_lower_op(*g, g->nodes[2]), "") << "run-time Gather indices are checked in the kernel";
  Node no_indices = g->nodes[2];
  no_indices.inputs.resize(1);
  EXPECT_NE(kernels::can_lower_op(*g, no_indices), "") << "a malformed node is refused, not a crash";
}

TEST(MovementLowering, CanLowerRefusesResizeModesItDoesNotCompile) {
  GraphBuilder b;
  int x = b.input("x", DType::Float32, {1, 1, 4, 4});
  int scales = b.constant("scales", floats({1, 1, 2, 2}));
  b.node(Op::Resize, {x, -1, scales}, {{"mode", str_attr("cubic")}});
  b.node(Op::Resize, {x, -1, scales}, {{"coordinate_transformation_mode", str_attr("tf_crop_and_resize")}});
  b.node(Op::Resize, {x, -1, scales}, {{"mode", str_attr("linear")}});
  auto g = b.build();
  EXPECT_NE(kernels::can_lower_op(*g, g->nodes[0]).find("cubic"), std::string::npos);
  EXPECT_NE(kernels::can_lower_op(*g, g->nodes[1]).find("tf_crop_and_resize"), std::string::npos);
  EXPECT_EQ(kernels::can_lower_op(*g, g->nodes[2]), "");
}

TEST(MovementLowering, CanLowerRefusesResizeAntialiasOnlyWhereItFilters) {
  GraphBuilder b;
  int x = b.input("x", DType::Float32, {1, 1, 4, 4});
  int scales = b.constant("scales", floats({0.5f, 0.5f}));
  b.node(Op::Resize, {x, -1, scales}, {{"mode", str_attr("linear")}, {"antialias", int_attr(1)}, {"axes", ints_attr({2, 3})}});
  b.node(Op::Resize, {x, -1, scales}, {{"antialias", int_attr(1)}, {"axes", ints_attr({2, 3})}});  // nearest: no filter
  b.node(Op::Resize, {x, -1, scales}, {{"keep_aspect_ratio_policy", str_attr("fill")}, {"axes", ints_attr({2, 3})}});
  auto g = b.build();
  EXPECT_NE(kernels::can_lower_op(*g, g->nodes[0]).find("antialias"), std::string::npos);
  EXPECT_EQ(kernels::can_lower_op(*g, g->nodes[1]), "");
  EXPECT_NE(kernels::can_lower_op(*g, g->nodes[2]).find("keep_aspect_ratio_policy 'fill'"), std::string::npos);
}

}  // namespace
}  // namespace terrace::testing
