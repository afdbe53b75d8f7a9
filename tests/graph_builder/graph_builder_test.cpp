// The public graph API (interp/graph_builder.h): graphs built in code are validated and inferred
// as imported models are, run through Session, and their errors name what is at fault.
#include <gtest/gtest.h>

#include <cmath>

#include "interp/graph_builder.h"
#include "interp/onnx_import.h"
#include "tiers/session.h"

namespace terrace {
namespace {

Options interp_only() {
  Options o;
  o.max_tier = Tier::Interp;
  o.cache_dir = "";
  return o;
}

template <typename F>
Error error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected a terrace::Error";
  return Error(ErrorCode::Internal, "no error");
}

// y = relu(x @ w + b), x [batch, 3].
GraphBuilder mlp() {
  GraphBuilder b("mlp");
  auto x = b.input("x", DType::Float32, {"batch", 3});
  auto w = b.constant("w", Tensor::from_vector<float>({3, 2}, {1, -1, 2, 0, -3, 1}));
  auto bias = b.constant("b", Tensor::from_vector<float>({2}, {0.5f, -0.5f}));
  b.output(b.op("Relu", {b.op("Add", {b.op("MatMul", {x, w}), bias})}));
  return b;
}

TEST(GraphBuilder, built_graph_runs_in_a_session_and_computes_the_product) {
  auto session = Session::from_graph(mlp().build(), interp_only());
  Tensor x = Tensor::from_vector<float>({2, 3}, {1, 2, 3, -1, 0, 1});
  NamedTensors out = session->run({{"x", x}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].first, "Relu2_0");  // nodes MatMul0, Add1, Relu2
  ASSERT_EQ(out[0].second.shape(), (Shape{2, 2}));
  // Row 0: [1*1+2*2+3*-3, 1*-1+0+3*1] + b = [-4+0.5, 2-0.5] -> relu [0, 1.5]; row 1: [-1-3, 1+1] + b.
  const float* y = out[0].second.data<float>();
  EXPECT_FLOAT_EQ(y[0], 0.0f);
  EXPECT_FLOAT_EQ(y[1], 1.5f);
  EXPECT_FLOAT_EQ(y[2], 0.0f);
  EXPECT_FLOAT_EQ(y[3], 1.5f);
}

TEST(GraphBuilder, build_infers_shapes_and_keeps_symbolic_dim_names_as_import_does) {
  auto g = mlp().build();
  const Value& y = g->value(g->outputs[0]);
  ASSERT_TRUE(y.info.dtype.has_value());
  EXPECT_EQ(*y.info.dtype, DType::Float32);
  ASSERT_TRUE(y.info.shape.has_value());
  EXPECT_EQ(*y.info.shape, (Shape{-1, 2}));
  ASSERT_EQ(y.info.dim_names.size(), 2u);
  EXPECT_EQ(y.info.dim_names[0], "batch");
  const Value& mm = g->value(g->find_value("MatMul0_0"));
  ASSERT_TRUE(mm.info.shape.has_value());
  EXPECT_EQ(*mm.info.shape, (Shape{-1, 2}));
}

TEST(GraphBuilder, built_graph_equals_the_import_of_its_onnx_bytes) {
  GraphBuilder b = mlp();
  auto built = b.build();
  auto loaded = load_onnx_bytes(b.to_onnx()).graph;
  ASSERT_EQ(built->nodes.size(), loaded->nodes.size());
  ASSERT_EQ(built->values.size(), loaded->values.size());
  for (size_t i = 0; i < built->values.size(); ++i) {
    EXPECT_EQ(built->values[i].name, loaded->values[i].name);
    EXPECT_EQ(built->values[i].info.shape, loaded->values[i].info.shape) << built->values[i].name;
  }
}

TEST(GraphBuilder, every_attribute_kind_reaches_the_node) {
  GraphBuilder b;
  auto x = b.input("x", DType::Float32, {2, 3});
  auto c = b.op("Constant", {}, {{"value", Tensor::from_vector<float>({3, 2}, {1, 2, 3, 4, 5, 6})}});  // tensor
  auto t = b.op("Transpose", {c}, {{"perm", std::vector<int64_t>{1, 0}}});                             // ints
  auto l = b.op("LeakyRelu", {b.op("Sub", {x, t})}, {{"alpha", 0.5f}});                                // float
  auto i = b.op("Cast", {l}, {{"to", int64_t(7)}});                                                    // int
  auto p = b.op("Pad", {x, b.constant("pads", Tensor::from_vector<int64_t>({4}, {0, 1, 0, 0}))},
                {{"mode", "edge"}});                                                                   // string
  b.output(i);
  b.output(p);
  auto session = Session::from_graph(b.build(), interp_only());
  NamedTensors out = session->run({{"x", Tensor::from_vector<float>({2, 3}, {0, 0, 0, 10, 10, 10})}});
  // x - transpose(c) = [[-1,-3,-5],[8,6,4]], leaky 0.5 -> [-0.5,-1.5,-2.5, 8,6,4], cast to int64 truncates.
  ASSERT_EQ(out[0].second.dtype(), DType::Int64);
  EXPECT_EQ(out[0].second.to_int64_vector(), (std::vector<int64_t>{0, -1, -2, 8, 6, 4}));
  ASSERT_EQ(out[1].second.shape(), (Shape{2, 4}));
  EXPECT_FLOAT_EQ(out[1].second.data<float>()[4], 10.0f);  // edge padding repeats x[1][0]
}

TEST(GraphBuilder, a_loop_body_built_with_a_builder_captures_an_outer_value) {
  GraphBuilder body("body");
  body.input("i", DType::Int64, {});
  auto cond = body.input("cond", DType::Bool, {});
  auto v = body.input("v", DType::Float32, {1});
  body.output(body.op("Identity", {cond}), DType::Bool, {});
  body.output(body.op("Add", {v, "step"}), DType::Float32, {1});  // "step" is the outer graph's
  GraphBuilder b;
  auto trip = b.input("trip", DType::Int64, {});
  auto x = b.input("x", DType::Float32, {1});
  b.constant("step", Tensor::from_vector<float>({1}, {2.0f}));
  auto y = b.op("Loop", {trip, "", x}, {{"body", body}});
  // ONNX 1.12's inference gives a Loop's outputs no rank: an output of unknown rank must be
  // declared, and the error says so.
  GraphBuilder undeclared = b;
  undeclared.output(y);
  Error e = error_of([&] { undeclared.build(); });
  EXPECT_EQ(e.code(), ErrorCode::InvalidModel);
  EXPECT_NE(e.message().find("graph output '" + y + "': its rank cannot be inferred; declare it"), std::string::npos)
      << e.message();
  b.output(y, DType::Float32, {1});
  auto session = Session::from_graph(b.build(), interp_only());
  NamedTensors out = session->run({{"trip", Tensor::scalar<int64_t>(4)}, {"x", Tensor::from_vector<float>({1}, {1.0f})}});
  EXPECT_FLOAT_EQ(out[0].second.data<float>()[0], 9.0f);
}

TEST(GraphBuilder, the_readme_example_builds_and_runs) {
  terrace::GraphBuilder b;
  auto x = b.input("x", terrace::DType::Float32, {"batch", 3});
  auto w = b.constant("w", terrace::Tensor::from_vector<float>({3, 2}, {1, -1, 2, 0, -3, 1}));
  auto y = b.op("Gemm", {x, w}, {{"alpha", 0.5f}, {"transB", 0}});
  b.output(b.op("Relu", {y}));
  auto session = terrace::Session::from_graph(b.build(), interp_only());
  NamedTensors out = session->run({{"x", Tensor::from_vector<float>({1, 3}, {1, 2, 3})}});
  ASSERT_EQ(out[0].second.shape(), (Shape{1, 2}));
  EXPECT_FLOAT_EQ(out[0].second.data<float>()[0], 0.0f);  // relu(0.5 * (1 + 4 - 9))
  EXPECT_FLOAT_EQ(out[0].second.data<float>()[1], 1.0f);  // relu(0.5 * (-1 + 0 + 3))
}

TEST(GraphBuilder, an_unknown_op_type_is_not_implemented_naming_node_and_op) {
  GraphBuilder b;
  auto x = b.input("x", DType::Float32, {2});
  Error e = error_of([&] { b.op("Frobnicate", {x}); });
  EXPECT_EQ(e.code(), ErrorCode::NotImplemented);
  EXPECT_NE(e.message().find("node 'Frobnicate0' (Frobnicate): op 'Frobnicate'"), std::string::npos) << e.message();
}

TEST(GraphBuilder, reading_an_undefined_value_is_invalid_model_naming_node_and_value) {
  GraphBuilder b;
  auto x = b.input("x", DType::Float32, {2});
  b.output(b.op("Add", {x, "nowhere"}));
  Error e = error_of([&] { b.build(); });
  EXPECT_EQ(e.code(), ErrorCode::InvalidModel);
  EXPECT_NE(e.message().find("Add0"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("'nowhere', which is not defined"), std::string::npos) << e.message();
}

TEST(GraphBuilder, an_attribute_of_the_wrong_kind_is_invalid_model_naming_it) {
  GraphBuilder b;
  auto x = b.input("x", DType::Float32, {2, 3});
  b.output(b.op("Transpose", {x}, {{"perm", 1.5f}}));
  Error e = error_of([&] { b.build(); });
  EXPECT_EQ(e.code(), ErrorCode::InvalidModel);
  EXPECT_NE(e.message().find("perm"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("Transpose"), std::string::npos) << e.message();
}

TEST(GraphBuilder, a_value_defined_twice_is_invalid_model_naming_it) {
  GraphBuilder b;
  auto x = b.input("x", DType::Float32, {2});
  b.node("Relu", "first", {x}, {}, {"y"});
  b.node("Neg", "second", {x}, {}, {"y"});
  b.output("y");
  Error e = error_of([&] { b.build(); });
  EXPECT_EQ(e.code(), ErrorCode::InvalidModel);
  EXPECT_NE(e.message().find("value 'y' is defined more than once"), std::string::npos) << e.message();
}

TEST(GraphBuilder, a_negative_dim_is_invalid_argument_naming_the_input) {
  GraphBuilder b;
  Error e = error_of([&] { b.input("x", DType::Float32, {2, -5}); });
  EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(e.message().find("graph input 'x': dim 1 is -5"), std::string::npos) << e.message();
}

TEST(GraphBuilder, an_output_that_is_not_a_value_is_invalid_argument_naming_it) {
  GraphBuilder b;
  b.input("x", DType::Float32, {2});
  Error e = error_of([&] { b.output("z"); });
  EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(e.message().find("graph output 'z'"), std::string::npos) << e.message();
}

TEST(GraphBuilder, a_missing_input_of_an_op_is_invalid_model_from_the_onnx_checker) {
  GraphBuilder b;
  auto x = b.input("x", DType::Float32, {2});
  b.output(b.op("Add", {x}));
  Error e = error_of([&] { b.build(); });
  EXPECT_EQ(e.code(), ErrorCode::InvalidModel);
  EXPECT_NE(e.message().find("Add"), std::string::npos) << e.message();
}

}  // namespace
}  // namespace terrace
