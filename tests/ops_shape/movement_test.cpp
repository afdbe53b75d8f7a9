// Transpose, Slice, Concat, Split, Tile, Expand, Pad, DepthToSpace: data movement for every dtype.
#include <limits>

#include "tests/ops_shape/shape_runner.h"

namespace terrace {
namespace {
using namespace shape_testing;

// Transpose by definition: out[i] = in[i permuted back], one element at a time.
std::vector<float> naive_transpose(const Tensor& x, const std::vector<int64_t>& perm) {
  Shape out_shape;
  for (int64_t p : perm) out_shape.push_back(x.shape()[size_t(p)]);
  auto in_strides = row_major_strides(x.shape());
  std::vector<float> out(size_t(x.numel()));
  std::vector<int64_t> idx(perm.size(), 0);
  for (size_t o = 0; o < out.size(); ++o) {
    int64_t off = 0;
    for (size_t d = 0; d < perm.size(); ++d) off += idx[d] * in_strides[size_t(perm[d])];
    out[o] = x.data<float>()[off];
    for (int64_t d = int64_t(perm.size()) - 1; d >= 0; --d) {
      if (++idx[size_t(d)] < out_shape[size_t(d)]) break;
      idx[size_t(d)] = 0;
    }
  }
  return out;
}

TEST(ShapeMovement, TransposeMatchesDefinitionOnRowAndTiledPaths) {
  struct Case { Shape shape; std::vector<int64_t> perm; };
  for (const Case& c : {Case{{1, 128, 12, 64}, {0, 2, 1, 3}}, Case{{1, 128, 12, 64}, {0, 2, 3, 1}},
                        Case{{37, 45}, {1, 0}}, Case{{3, 5, 7, 2}, {3, 1, 0, 2}},
                        Case{{2, 1, 70, 3}, {2, 3, 1, 0}}}) {
    Tensor x = iota(c.shape);
    Tensor y = run1(Op::Transpose, {x}, {{"perm", c.perm}});
    EXPECT_EQ(values_of<float>(y), naive_transpose(x, c.perm)) << shape_str(c.shape);
  }
}

TEST(ShapeMovement, TransposeDefaultReversesStrings) {
  Tensor x = Tensor::from_vector<std::string>({2, 2}, {"a", "b", "c", "d"});
  Tensor y = run1(Op::Transpose, {x});
  EXPECT_EQ(values_of<std::string>(y), (std::vector<std::string>{"a", "c", "b", "d"}));
}

TEST(ShapeMovement, TransposeOfUnitDimsSharesStorage) {
  Tensor x = iota({1, 4, 1, 3});
  Tensor y = run1(Op::Transpose, {x}, {{"perm", i64({2, 1, 0, 3})}});
  EXPECT_EQ(y.shape(), (Shape{1, 4, 1, 3}));
  EXPECT_EQ(y.raw(), x.raw());
}

TEST(ShapeMovement, SliceAndGatherMoveStrings) {
  Tensor x = Tensor::from_vector<std::string>({4}, {"w", "x", "y", "z"});
  Tensor s = run1(Op::Slice, {x, ints({1}, {-1}), ints({1}, {0}), ints({1}, {0}), ints({1}, {-2})});
  EXPECT_EQ(values_of<std::string>(s), (std::vector<std::string>{"z", "x"}));
  Tensor g = run1(Op::Gather, {x, ints({2}, {2, -4})});
  EXPECT_EQ(values_of<std::string>(g), (std::vector<std::string>{"y", "w"}));
}

TEST(ShapeMovement, SliceNegativeStepsAndHugeBounds) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  Tensor x = iota({10});
  Tensor y = run1(Op::Slice, {x, ints({1}, {kMax}), ints({1}, {-kMax}), ints({1}, {0}),
                              ints({1}, {-3})});
  EXPECT_EQ(values_of<float>(y), (std::vector<float>{9, 6, 3, 0}));
  Tensor z = run1(Op::Slice, {iota({2, 5}), ints({1}, {1}), ints({1}, {1000})},
                  {});
  EXPECT_EQ(z.shape(), (Shape{1, 5}));
}

TEST(ShapeMovement, SliceAttributesBeforeOpset10) {
  Tensor y = run1(Op::Slice, {iota({3, 4})},
                  {{"starts", i64({1, -2})}, {"ends", i64({3, 4})}, {"axes", i64({0, 1})}});
  EXPECT_EQ(values_of<float>(y), (std::vector<float>{6, 7, 10, 11}));
}

TEST(ShapeMovement, SliceWithInt32IndicesAndZeroStepFails) {
  Tensor s = Tensor::from_vector<int32_t>({1}, {0}), e = Tensor::from_vector<int32_t>({1}, {2});
  EXPECT_EQ(run1(Op::Slice, {iota({4}), s, e}).numel(), 2);
  Tensor zero = Tensor::from_vector<int32_t>({1}, {0});
  EXPECT_EQ(error_of([&] { run1(Op::Slice, {iota({4}), s, e, Tensor(), zero}); }).code(),
            ErrorCode::InvalidArgument);
}

TEST(ShapeMovement, ConcatStringsAlongInnerAxis) {
  Tensor a = Tensor::from_vector<std::string>({2, 1}, {"a", "b"});
  Tensor b = Tensor::from_vector<std::string>({2, 2}, {"c", "d", "e", "f"});
  Tensor y = run1(Op::Concat, {a, b}, {{"axis", -1}});
  EXPECT_EQ(values_of<std::string>(y), (std::vector<std::string>{"a", "c", "d", "b", "e", "f"}));
}

TEST(ShapeMovement, ConcatRejectsMismatchedShapes) {
  Error e = error_of([] { run1(Op::Concat, {iota({2, 3}), iota({3, 3})}, {{"axis", 1}}); });
  EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
}

TEST(ShapeMovement, SplitUnevenIntoEqualPartsAndBySizes) {
  auto parts = run_op(Op::Split, {iota({5})}, {}, 2);
  EXPECT_EQ(values_of<float>(parts[0]), (std::vector<float>{0, 1, 2}));
  EXPECT_EQ(values_of<float>(parts[1]), (std::vector<float>{3, 4}));
  auto sized = run_op(Op::Split, {iota({2, 4}), ints({2}, {1, 3})}, {{"axis", 1}}, 2);
  EXPECT_EQ(values_of<float>(sized[1]), (std::vector<float>{1, 2, 3, 5, 6, 7}));
}

TEST(ShapeMovement, TileAndExpand) {
  Tensor t = run1(Op::Tile, {iota({2, 2}), ints({2}, {1, 2})});
  EXPECT_EQ(values_of<float>(t), (std::vector<float>{0, 1, 0, 1, 2, 3, 2, 3}));
  Tensor e = run1(Op::Expand, {iota({3, 1}), ints({3}, {2, 1, 2})});
  EXPECT_EQ(e.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(values_of<float>(e), (std::vector<float>{0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 2, 2}));
}

TEST(ShapeMovement, PadModesAndNegativePads) {
  Tensor x = iota({4});
  auto pad = [&](const char* mode, std::vector<int64_t> p) {
    return values_of<float>(run1(Op::Pad, {x, ints({2}, p)}, {{"mode", mode}}));
  };
  EXPECT_EQ(pad("reflect", {2, 3}), (std::vector<float>{2, 1, 0, 1, 2, 3, 2, 1, 0}));
  EXPECT_EQ(pad("edge", {1, 2}), (std::vector<float>{0, 0, 1, 2, 3, 3, 3}));
  EXPECT_EQ(pad("constant", {-1, 1}), (std::vector<float>{1, 2, 3, 0}));
  Tensor c = run1(Op::Pad, {x}, {{"pads", i64({1, 0})}, {"value", 9.0f}});  // opset < 11
  EXPECT_EQ(values_of<float>(c), (std::vector<float>{9, 0, 1, 2, 3}));
}

TEST(ShapeMovement, DepthToSpaceInvertsSpaceToDepth) {
  Tensor x = iota({1, 2, 4, 6});
  Tensor d = run1(Op::SpaceToDepth, {x}, {{"blocksize", 2}});
  EXPECT_EQ(d.shape(), (Shape{1, 8, 2, 3}));
  Tensor back = run1(Op::DepthToSpace, {d}, {{"blocksize", 2}, {"mode", "DCR"}});
  EXPECT_EQ(values_of<float>(back), values_of<float>(x));
}

}  // namespace
}  // namespace terrace
