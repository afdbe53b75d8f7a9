// Tier 1's fused activations beyond Relu and Clip (jit/cpu/dnnl_activation.h): Sigmoid, Tanh,
// LeakyRelu, Elu, HardSwish and Gelu (erf and tanh forms) as oneDNN eltwise post-ops of MatMul,
// Gemm, Conv, a convolution chain and ConvTranspose, against the interpreter running the product
// and then the activation node; on inputs that are not all finite the interpreter's semantics; the
// nodes recognised, and the slope bound checked numerically. In the DnnlOps suite, so that the
// ctests dnnl_ops_on_AVX2 / _SSE41 run it on those instruction sets too.
#include "jit/cpu/dnnl_activation.h"

#include <cmath>
#include <limits>

#include "jit/cpu/dnnl_deconv.h"
#include "tests/jit/chain_builder.h"
#include "tests/support/node_runner.h"

namespace terrace::testing {
namespace {

#ifdef TERRACE_HAVE_DNNL

using Kind = jit::DnnlActivation::Kind;

// Each activation with the node the interpreter runs for it.
struct Activation {
  jit::DnnlActivation fused;
  Op op;
  std::map<std::string, Attr> attrs;
};

std::vector<Activation> activations() {
  jit::DnnlActivation leaky{Kind::LeakyRelu}, elu{Kind::Elu};
  leaky.alpha = 0.2f;
  elu.alpha = 0.7f;
  jit::DnnlActivation hard_sigmoid{Kind::HardSigmoid};
  hard_sigmoid.alpha = 0.3f;
  hard_sigmoid.beta = 0.4f;
  return {{{Kind::Sigmoid}, Op::Sigmoid, {}},
          {{Kind::Tanh}, Op::Tanh, {}},
          {leaky, Op::LeakyRelu, {{"alpha", 0.2f}}},
          {elu, Op::Elu, {{"alpha", 0.7f}}},
          {{Kind::HardSwish}, Op::HardSwish, {}},
          {hard_sigmoid, Op::HardSigmoid, {{"alpha", 0.3f}, {"beta", 0.4f}}},
          {{Kind::Gelu}, Op::Gelu, {}},
          {{Kind::GeluTanh}, Op::Gelu, {{"approximate", "tanh"}}}};
}

Tensor run_prim(const jit::DnnlPrimitive& prim, const std::vector<Tensor>& in) {
  Tensor got = Tensor::empty(DType::Float32, prim.output_shape());
  std::vector<const float*> ptrs;
  for (const Tensor& t : in) ptrs.push_back(t.data<float>());
  prim.run(ptrs, got.data<float>());
  return got;
}

struct Product {
  Op op;
  std::vector<Shape> shapes;
  std::map<std::string, Attr> attrs;
};

TEST(DnnlOps, products_with_each_fused_activation_match_the_interpreter) {
  const std::vector<Product> products = {
      {Op::MatMul, {{5, 7}, {7, 3}}, {}},
      {Op::Gemm, {{4, 6}, {5, 6}, {5}}, {{"transB", int64_t(1)}, {"alpha", 0.5f}}},
      {Op::Conv, {{1, 3, 7, 7}, {4, 3, 3, 3}, {4}}, {{"pads", std::vector<int64_t>{1, 1, 1, 1}}}},
      {Op::ConvTranspose, {{1, 3, 4, 4}, {3, 2, 3, 3}, {2}}, {{"strides", std::vector<int64_t>{2, 2}}}},
  };
  uint32_t seed = 40;
  for (const Product& p : products)
    for (const Activation& a : activations()) {
      std::vector<Tensor> in;
      for (const Shape& s : p.shapes) in.push_back(random_tensor(DType::Float32, s, -2, 2, seed++, false));
      const Node node = make_node(p.op, p.shapes.size(), p.attrs);
      const Tensor want = run1(a.op, {run_node(node, in).at(0)}, a.attrs);
      for (bool constant : {false, true}) {
        std::vector<const Tensor*> constants(in.size(), nullptr);
        if (constant) constants[1] = &in[1];
        auto prim = p.op == Op::ConvTranspose ? jit::make_dnnl_deconvolution(node, p.shapes, constants, a.fused)
                                              : jit::make_dnnl_primitive(node, p.shapes, constants, a.fused);
        const std::string what = std::string(op_name(p.op)) + " + " + jit::dnnl_activation_name(a.fused);
        EXPECT_NE(prim->describe().find(jit::dnnl_activation_name(a.fused)), std::string::npos) << prim->describe();
        expect_close(run_prim(*prim, in), want, what);
      }
    }
}

// A chain Conv -> activation -> Conv -> activation, in blocked layouts.
TEST(DnnlOps, conv_chains_with_each_fused_activation_match_the_interpreter) {
  for (const Activation& a : activations()) {
    std::vector<Tensor> in{random_tensor(DType::Float32, {1, 8, 6, 6}, -2, 2, 1, false),
                           random_tensor(DType::Float32, {8, 8, 3, 3}, -0.5, 0.5, 2, false),
                           random_tensor(DType::Float32, {8, 8, 1, 1}, -0.5, 0.5, 3, false)};
    const std::map<std::string, Attr> pads{{"pads", std::vector<int64_t>{1, 1, 1, 1}}};
    std::vector<jit::DnnlChainOp> ops(4);
    ops[0].node = make_node(Op::Conv, 2, pads);
    ops[0].inputs = {0, 1};
    ops[1].kind = jit::DnnlChainOp::Kind::Activation;
    ops[1].node = make_node(a.op, 1, a.attrs);
    ops[1].activation = a.fused;
    ops[2].node = make_node(Op::Conv, 2);
    ops[2].inputs = {-2, 2};
    ops[3] = ops[1];
    auto prim = jit::make_dnnl_conv_chain(ops, {in[0].shape(), in[1].shape(), in[2].shape()}, {nullptr, &in[1], &in[2]});
    Tensor h = run1(a.op, {run_node(ops[0].node, {in[0], in[1]}).at(0)}, a.attrs);
    Tensor want = run1(a.op, {run_node(ops[2].node, {h, in[2]}).at(0)}, a.attrs);
    expect_close(run_prim(*prim, in), want, "chain + " + jit::dnnl_activation_name(a.fused));
  }
}

// NaN, +inf and -inf through a fused activation: the interpreter's answer, position by position
// (e.g. Sigmoid(-inf) = 0, Tanh(+inf) = 1, NaN stays), not whatever oneDNN's vector code gives.
TEST(DnnlOps, fused_activations_on_non_finite_inputs_are_the_interpreters) {
  for (const Activation& a : activations()) {
    std::vector<Tensor> in{random_tensor(DType::Float32, {4, 3}, -1, 1, 5, false),
                           Tensor::from_vector<float>({3, 2}, {1, 0, 0, 1, 0, 0})};
    in[0].data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
    in[0].data<float>()[4] = std::numeric_limits<float>::infinity();
    in[0].data<float>()[7] = -std::numeric_limits<float>::infinity();
    const Node node = make_node(Op::MatMul, 2);
    const Tensor want = run1(a.op, {run_node(node, in).at(0)}, a.attrs);
    auto prim = jit::make_dnnl_primitive(node, {{4, 3}, {3, 2}}, {nullptr, nullptr}, a.fused);
    expect_close(run_prim(*prim, in), want, "non-finite + " + jit::dnnl_activation_name(a.fused));
  }
}

TEST(DnnlOps, activation_nodes_are_recognised_with_their_attributes) {
  for (const Activation& a : activations()) {
    std::optional<jit::DnnlActivation> got = jit::dnnl_activation_of(make_node(a.op, 1, a.attrs));
    ASSERT_TRUE(got.has_value()) << op_name(a.op);
    EXPECT_EQ(got->kind, a.fused.kind);
    EXPECT_EQ(got->alpha, a.fused.alpha);
    EXPECT_EQ(got->beta, a.fused.beta);
  }
  EXPECT_FALSE(jit::dnnl_activation_of(make_node(Op::Softplus, 1)).has_value());
  EXPECT_FALSE(jit::dnnl_activation_of(make_node(Op::Gelu, 1, {{"approximate", "fast"}})).has_value());
  EXPECT_FALSE(jit::dnnl_activation_of(make_node(Op::Relu, 1)).has_value()) << "Relu and Clip: cpu_library's";
}

// The slope each bound uses holds: |f(a) - f(b)| <= L |a - b| on a dense grid, with pairs a
// distance h apart, across each function's bends; and the interpreter's semantics match the
// interpreter (finite and not).
TEST(DnnlOps, activation_slopes_bound_their_differences) {
  for (const Activation& a : activations()) {
    const double L = jit::dnnl_activation_slope(a.fused);
    double worst = 0;
    for (double x = -12; x < 12; x += 1.0 / 512) {
      const double h = 1.0 / 1024;
      const double d = std::abs(double(jit::dnnl_activation_apply(a.fused, float(x + h))) -
                                double(jit::dnnl_activation_apply(a.fused, float(x))));
      worst = std::max(worst, d / h);
    }
    EXPECT_LE(worst, L * (1 + 1e-3)) << jit::dnnl_activation_name(a.fused);
    EXPECT_GE(worst, L * 0.9) << jit::dnnl_activation_name(a.fused) << ": the slope is not tight";
    Tensor x = random_tensor(DType::Float32, {64}, -8, 8, 9, true);  // with NaN and infinities
    Tensor want = run1(a.op, {x}, a.attrs);
    Tensor got = x.clone();
    for (int64_t i = 0; i < got.numel(); ++i) got.data<float>()[i] = jit::dnnl_activation_apply(a.fused, got.data<float>()[i]);
    expect_close(got, want, "apply " + jit::dnnl_activation_name(a.fused));
  }
}

#endif  // TERRACE_HAVE_DNNL

}  // namespace
}  // namespace terrace::testing
