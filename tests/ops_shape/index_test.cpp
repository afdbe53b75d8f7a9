// Gather, GatherElements, GatherND, Scatter*, Compress, NonZero, OneHot, Trilu, Unique, Resize.
#include <omp.h>

#include <cstring>
#include <limits>

#include "tests/ops_shape/shape_runner.h"

namespace terrace {
namespace {
using namespace shape_testing;

TEST(ShapeIndex, GatherWrapsNegativeInt32Indices) {
  Tensor idx = Tensor::from_vector<int32_t>({2}, {-1, 0});
  Tensor y = run1(Op::Gather, {iota({3, 2}), idx});
  EXPECT_EQ(values_of<float>(y), (std::vector<float>{4, 5, 0, 1}));
}

TEST(ShapeIndex, GatherOutOfRangeIsInvalidArgumentNamingNode) {
  Error e = error_of([] { run1(Op::Gather, {iota({3, 2}), ints({1}, {3})}); });
  EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(e.message().find("node_under_test"), std::string::npos);
  EXPECT_EQ(error_of([] { run1(Op::GatherElements, {iota({2, 2}), ints({2, 1}, {0, -3})}); }).code(),
            ErrorCode::InvalidArgument);
  EXPECT_EQ(error_of([] { run1(Op::GatherND, {iota({2, 2}), ints({1, 2}, {0, 2})}); }).code(),
            ErrorCode::InvalidArgument);
}

// Every index-taking op with an index past either end (INT64_MIN and INT64_MAX included, where
// wrapping a negative index would overflow) is InvalidArgument naming the node: never a read or a
// write out of bounds. Slice's starts and ends are clamped, as ONNX defines, not errors.
TEST(ShapeIndex, OutOfRangeIndicesAreInvalidArgumentInEveryIndexOp) {
  const int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  for (int64_t bad : {int64_t(3), int64_t(-4), lo, hi}) {
    SCOPED_TRACE("index " + std::to_string(bad));
    std::vector<Error> errors = {
        error_of([&] { run1(Op::Gather, {iota({3, 2}), ints({1}, {bad})}); }),
        error_of([&] { run1(Op::GatherElements, {iota({3, 2}), ints({1, 2}, {0, bad})}); }),
        error_of([&] { run1(Op::GatherND, {iota({3, 2}), ints({1, 1}, {bad})}); }),
        error_of([&] { run1(Op::ScatterND, {iota({3, 2}), ints({1, 1}, {bad}), iota({1, 2})}); }),
        error_of([&] { run1(Op::ScatterElements, {iota({3, 2}), ints({1, 1}, {bad}), iota({1, 1})}); }),
    };
    for (const Error& e : errors) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
      EXPECT_NE(e.message().find("node_under_test"), std::string::npos) << e.what();
    }
  }
  Tensor y = run1(Op::Slice, {iota({3, 2}), ints({1}, {lo}), ints({1}, {hi}), ints({1}, {0})});
  EXPECT_EQ(values_of<float>(y), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  y = run1(Op::Slice, {iota({3, 2}), ints({1}, {hi}), ints({1}, {lo}), ints({1}, {0}), ints({1}, {-1})});
  EXPECT_EQ(values_of<float>(y), (std::vector<float>{4, 5, 2, 3, 0, 1}));
}

TEST(ShapeIndex, GatherElementsAlongAxis1) {
  Tensor y = run1(Op::GatherElements, {iota({2, 2}), ints({2, 2}, {0, 0, 1, 0})}, {{"axis", 1}});
  EXPECT_EQ(values_of<float>(y), (std::vector<float>{0, 0, 3, 2}));
}

TEST(ShapeIndex, GatherNDWithBatchDims) {
  Tensor y = run1(Op::GatherND, {iota({2, 2, 2}), ints({2, 1}, {1, 0})}, {{"batch_dims", 1}});
  EXPECT_EQ(values_of<float>(y), (std::vector<float>{2, 3, 4, 5}));
}

TEST(ShapeIndex, ScatterElementsDuplicatesAddInOrder) {
  Tensor y = run1(Op::ScatterElements,
                  {iota({1, 3}), ints({1, 2}, {1, 1}), Tensor::from_vector<float>({1, 2}, {10, 20})},
                  {{"axis", 1}, {"reduction", "add"}});
  EXPECT_EQ(values_of<float>(y), (std::vector<float>{0, 31, 2}));
}

TEST(ShapeIndex, ScatterNDMultiplySlices) {
  Tensor y = run1(Op::ScatterND,
                  {iota({2, 2}), ints({1, 1}, {1}), Tensor::from_vector<float>({1, 2}, {2, 3})},
                  {{"reduction", "mul"}});
  EXPECT_EQ(values_of<float>(y), (std::vector<float>{0, 1, 4, 9}));
}

TEST(ShapeIndex, CompressAndNonZero) {
  Tensor cond = Tensor::from_vector<bool>({2}, {false, true});
  EXPECT_EQ(values_of<float>(run1(Op::Compress, {iota({3, 2}), cond}, {{"axis", 1}})),
            (std::vector<float>{1, 3, 5}));
  Tensor nz = run1(Op::NonZero, {Tensor::from_vector<float>({2, 2}, {0, 1, 2, 0})});
  EXPECT_EQ(nz.shape(), (Shape{2, 2}));
  EXPECT_EQ(values_of<int64_t>(nz), i64({0, 1, 1, 0}));
}

TEST(ShapeIndex, OneHotOutOfRangeRowsStayOff) {
  Tensor y = run1(Op::OneHot, {ints({2}, {-1, 5}), Tensor::scalar<int64_t>(3),
                               Tensor::from_vector<float>({2}, {0, 1})});
  EXPECT_EQ(values_of<float>(y), (std::vector<float>{0, 0, 1, 0, 0, 0}));
}

TEST(ShapeIndex, TriluLowerWithNegativeK) {
  Tensor y = run1(Op::Trilu, {iota({3, 3}), Tensor::scalar<int64_t>(-1)}, {{"upper", 0}});
  EXPECT_EQ(values_of<float>(y), (std::vector<float>{0, 0, 0, 3, 0, 0, 6, 7, 0}));
}

TEST(ShapeIndex, UniqueSortedWithAllOutputs) {
  auto out = run_op(Op::Unique, {Tensor::from_vector<float>({5}, {2, 1, 2, 3, 1})}, {}, 4);
  EXPECT_EQ(values_of<float>(out[0]), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(values_of<int64_t>(out[1]), i64({1, 0, 3}));
  EXPECT_EQ(values_of<int64_t>(out[2]), i64({1, 0, 1, 2, 0}));
  EXPECT_EQ(values_of<int64_t>(out[3]), i64({2, 2, 1}));
}

TEST(ShapeIndex, ResizeLinearHalfPixelUpsample) {
  Tensor scales = Tensor::from_vector<float>({2}, {1, 2});
  Tensor y = run1(Op::Resize, {Tensor::from_vector<float>({1, 2}, {0, 4}), Tensor(), scales},
                  {{"mode", "linear"}});
  EXPECT_EQ(values_of<float>(y), (std::vector<float>{0, 1, 3, 4}));
}

TEST(ShapeIndex, ResizeCubicIsBitIdenticalForAnyThreadCount) {
  Tensor x = iota({2, 3, 40, 50});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = float(i % 17) * 0.37f;
  Tensor sizes = ints({4}, {2, 3, 97, 61});
  auto resize = [&] {
    return run1(Op::Resize, {x, Tensor(), Tensor(), sizes}, {{"mode", "cubic"}});
  };
  int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  Tensor one = resize();
  omp_set_num_threads(4);
  Tensor four = resize();
  omp_set_num_threads(saved);
  ASSERT_EQ(one.shape(), four.shape());
  EXPECT_EQ(std::memcmp(one.raw(), four.raw(), one.nbytes()), 0);
}

TEST(ShapeIndex, UpsampleNearestRepeats) {
  Tensor y = run1(Op::Upsample, {iota({1, 2}), Tensor::from_vector<float>({2}, {1, 2})});
  EXPECT_EQ(values_of<float>(y), (std::vector<float>{0, 0, 1, 1}));
}

}  // namespace
}  // namespace terrace
