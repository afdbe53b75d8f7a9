// Reshape, Flatten, Squeeze, Unsqueeze, Shape, Size, Constant and ConstantOfShape.
#include "tests/ops_shape/shape_runner.h"

namespace terrace {
namespace {
using namespace shape_testing;

TEST(ShapeViews, ReshapeSharesStorageAndInfersDims) {
  Tensor x = iota({2, 3, 4});
  Tensor y = run1(Op::Reshape, {x, ints({3}, {0, -1, 2})});
  EXPECT_EQ(y.shape(), (Shape{2, 6, 2}));
  EXPECT_EQ(y.raw(), x.raw());
}

TEST(ShapeViews, ReshapeAllowzeroKeepsZeroDims) {
  Tensor x = Tensor::empty(DType::Float32, {0, 3});
  Tensor y = run1(Op::Reshape, {x, ints({2}, {3, 0})}, {{"allowzero", 1}});
  EXPECT_EQ(y.shape(), (Shape{3, 0}));
}

TEST(ShapeViews, ReshapeToWrongCountNamesNode) {
  Error e = error_of([] { run1(Op::Reshape, {iota({2, 3}), ints({1}, {5})}); });
  EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(e.message().find("node_under_test"), std::string::npos);
}

TEST(ShapeViews, FlattenNegativeAxis) {
  Tensor y = run1(Op::Flatten, {iota({2, 3, 4, 5})}, {{"axis", -1}});
  EXPECT_EQ(y.shape(), (Shape{24, 5}));
}

TEST(ShapeViews, SqueezeAxesFromAttributeOrInput) {
  Tensor x = iota({1, 3, 1, 2});
  EXPECT_EQ(run1(Op::Squeeze, {x}, {{"axes", i64({0})}}).shape(), (Shape{3, 1, 2}));
  EXPECT_EQ(run1(Op::Squeeze, {x, ints({1}, {-2})}).shape(), (Shape{1, 3, 2}));
  EXPECT_EQ(run1(Op::Squeeze, {x}).shape(), (Shape{3, 2}));
  EXPECT_EQ(error_of([&] { run1(Op::Squeeze, {x, ints({1}, {1})}); }).code(),
            ErrorCode::InvalidArgument);
}

TEST(ShapeViews, UnsqueezeUnsortedAxes) {
  Tensor y = run1(Op::Unsqueeze, {iota({3, 4}), ints({2}, {3, 0})});
  EXPECT_EQ(y.shape(), (Shape{1, 3, 4, 1}));
}

TEST(ShapeViews, ShapeStartEndClamp) {
  Tensor y = run1(Op::Shape, {iota({2, 3, 4})}, {{"start", -10}, {"end", -1}});
  EXPECT_EQ(values_of<int64_t>(y), i64({2, 3}));
  EXPECT_EQ(run1(Op::Size, {iota({2, 3, 4})}).data<int64_t>()[0], 24);
}

TEST(ShapeViews, ConstantFromListAttributes) {
  Tensor y = run1(Op::Constant, {}, {{"value_ints", i64({1, 2, 3})}});
  EXPECT_EQ(values_of<int64_t>(y), i64({1, 2, 3}));
  Tensor f = run1(Op::Constant, {}, {{"value_float", 2.5f}});
  EXPECT_EQ(f.rank(), 0);
  EXPECT_EQ(f.data<float>()[0], 2.5f);
}

TEST(ShapeViews, ConstantOfShapeFillsValueDtype) {
  Attribute v;
  v.kind = Attribute::Kind::Tensor;
  v.t = Tensor::scalar<int32_t>(7);
  Node n;
  n.op = Op::ConstantOfShape;
  n.inputs = {0};
  n.outputs = {1};
  n.attrs["value"] = v;
  RValue shape(ints({2}, {2, 2}));
  Tensor y = interpret_node(n, {&shape})[0].tensor;
  EXPECT_EQ(values_of<int32_t>(y), (std::vector<int32_t>{7, 7, 7, 7}));
}

}  // namespace
}  // namespace terrace
