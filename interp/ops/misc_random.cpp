// RandomNormal, RandomUniform (and their *Like forms) and Bernoulli. The interpreter must be
// deterministic, so every node draws from a 64-bit Mersenne Twister seeded with its `seed`
// attribute (0 when absent), in row-major order on one thread.
#include <cmath>
#include <cstring>
#include <numbers>
#include <random>

#include "interp/ops/misc_kernels.h"

namespace terrace::ops {
namespace {

class Generator {
 public:
  explicit Generator(const Node& node) {
    float seed = node.attr_float("seed", 0.f);
    uint32_t bits;
    std::memcpy(&bits, &seed, 4);
    engine_.seed(bits);
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return double(engine_() >> 11) * 0x1.0p-53; }
  // Standard normal by Box-Muller (one draw per pair of uniforms, for simplicity).
  double normal() {
    double u1 = 1.0 - uniform(), u2 = uniform();
    return std::sqrt(-2 * std::log(u1)) * std::cos(2 * std::numbers::pi * u2);
  }

 private:
  std::mt19937_64 engine_;
};

// The output shape and dtype: from attributes, or from the input for the *Like forms (whose
// dtype attribute, when present, overrides the input's).
struct Target {
  Shape shape;
  DType dtype;
};

Target target(KernelContext& ctx, bool like) {
  const Node& node = ctx.node;
  if (!like) {
    TERRACE_CHECK(node.has_attr("shape"), InvalidModel, node.describe(),
                  ": attribute 'shape' is required");
    return {node.attr_ints("shape"), dtype_attr(node, "dtype", 1)};
  }
  const Tensor& in = ctx.input(0);
  DType t = node.has_attr("dtype") ? dtype_attr(node, "dtype", 1) : in.dtype();
  return {in.shape(), t};
}

// Fills a float64 tensor of the target shape with draw() and casts it to the target dtype.
template <typename Draw>
Tensor fill(const Node& node, const Target& t, Draw draw) {
  TERRACE_CHECK(is_float(t.dtype) || is_integer(t.dtype) || t.dtype == DType::Bool,
                InvalidModel, node.describe(), ": cannot produce ", dtype_name(t.dtype));
  Tensor out = Tensor::empty(DType::Float64, t.shape);
  double* p = out.data<double>();
  for (int64_t i = 0; i < out.numel(); ++i) p[i] = draw(i);
  return out.cast(t.dtype);
}

template <bool Like>
void random_normal(KernelContext& ctx) {
  Generator gen(ctx.node);
  double mean = ctx.node.attr_float("mean", 0.f), scale = ctx.node.attr_float("scale", 1.f);
  ctx.set_output(0, fill(ctx.node, target(ctx, Like),
                         [&](int64_t) { return mean + scale * gen.normal(); }));
}

template <bool Like>
void random_uniform(KernelContext& ctx) {
  Generator gen(ctx.node);
  double lo = ctx.node.attr_float("low", 0.f), hi = ctx.node.attr_float("high", 1.f);
  ctx.set_output(0, fill(ctx.node, target(ctx, Like),
                         [&](int64_t) { return lo + (hi - lo) * gen.uniform(); }));
}

void bernoulli(KernelContext& ctx) {
  Generator gen(ctx.node);
  const Tensor& p = ctx.input(0);
  TERRACE_CHECK(is_float(p.dtype()), InvalidArgument, ctx.node.describe(),
                ": probabilities must be a float tensor, got ", dtype_name(p.dtype()));
  ctx.set_output(0, fill(ctx.node, target(ctx, true), [&](int64_t i) {
                   return gen.uniform() < p.get_as_double(i) ? 1.0 : 0.0;
                 }));
}

}  // namespace

void register_misc_random_kernels(KernelTable& t) {
  t.add(Op::RandomNormal, random_normal<false>);
  t.add(Op::RandomNormalLike, random_normal<true>);
  t.add(Op::RandomUniform, random_uniform<false>);
  t.add(Op::RandomUniformLike, random_uniform<true>);
  t.add(Op::Bernoulli, bernoulli);
}

}  // namespace terrace::ops
