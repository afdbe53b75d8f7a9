// HardSwish fusion (tiers/passes/hardswish_fusion.cpp) on hand-built decomposed HardSwishes: the
// exporters' forms become one HardSwish with the interpreter's answer (within the dtype's
// tolerance), near misses stay.
#include "tests/passes/helpers.h"
#include "tiers/passes/passes.h"

namespace terrace {
namespace {

using testing::GraphBuilder;
using testing::count_ops;
using testing::expect_fused_into;
using testing::expect_not_fused_into;
using testing::optimized;
using testing::random_tensor;

struct HardSwishForm {
  bool three_first = false;      // Add(3, x)
  bool clip_first = false;       // Mul(clip, x)
  bool sixth_first = false;      // x * (clip / 6)
  bool times_inverse = false;    // * (1/6) instead of / 6
  bool bounds_as_attrs = false;  // Clip's min and max as attributes (opset 6)
  float three = 3.0f, six = 6.0f, clip_max = 6.0f;
  bool clip_is_output = false;   // the Clip's result also a graph output
  bool other_factor = false;     // the product takes another value than x
};

std::shared_ptr<Graph> build_hardswish(const HardSwishForm& f) {
  GraphBuilder b;
  int in = b.input("in", DType::Float32, {4, 16});
  int x = b.node(Op::Relu, {b.node(Op::Neg, {in})});  // an intermediate, as after a convolution
  x = b.node(Op::Add, {x, in});
  int y = b.input("y", DType::Float32, {4, 16});
  auto c = [&](const char* name, float v) { return b.constant(name, Tensor::scalar<float>(v)); };
  int a = f.three_first ? b.node(Op::Add, {c("three", f.three), x}) : b.node(Op::Add, {x, c("three", f.three)});
  int clip = f.bounds_as_attrs ? b.node(Op::Clip, {a}, {{"min", GraphBuilder::attr_float(0.0f)},
                                                        {"max", GraphBuilder::attr_float(f.clip_max)}})
                               : b.node(Op::Clip, {a, c("lo", 0.0f), c("hi", f.clip_max)});
  const int factor = f.other_factor ? y : x;
  auto sixth = [&](int v) {
    return f.times_inverse ? b.node(Op::Mul, {v, c("inv6", 1.0f / 6.0f)}) : b.node(Op::Div, {v, c("six", f.six)});
  };
  int out = f.sixth_first ? b.node(Op::Mul, {factor, sixth(clip)})
                          : sixth(f.clip_first ? b.node(Op::Mul, {clip, factor}) : b.node(Op::Mul, {factor, clip}));
  b.output(out);
  if (f.clip_is_output) b.output(clip);
  auto g = b.build();
  g->opset = f.bounds_as_attrs ? 6 : 13;
  return g;
}

std::vector<RValue> hardswish_inputs() {
  return {RValue(random_tensor({4, 16}, 3, -6, 6)), RValue(random_tensor({4, 16}, 4))};
}

// Neg, Relu, Add and the HardSwish.
void expect_fused(const HardSwishForm& f) { expect_fused_into(build_hardswish(f), Op::HardSwish, 4, hardswish_inputs()); }
void expect_not_fused(const HardSwishForm& f) { expect_not_fused_into(build_hardswish(f), Op::HardSwish, hardswish_inputs()); }

TEST(HardSwishFusion, paddles_form_becomes_one_hardswish_with_the_interpreters_answer) {
  expect_fused({});
  EXPECT_EQ(count_ops(*optimized(build_hardswish({}), OptimizeLevel::Basic), Op::HardSwish), 0);
}

TEST(HardSwishFusion, every_ordering_and_clips_bounds_as_attributes_fuse) {
  for (bool three_first : {false, true})
    for (bool clip_first : {false, true})
      for (bool times_inverse : {false, true}) {
        SCOPED_TRACE(std::to_string(three_first) + std::to_string(clip_first) + std::to_string(times_inverse));
        HardSwishForm f;
        f.three_first = three_first;
        f.clip_first = clip_first;
        f.times_inverse = times_inverse;
        expect_fused(f);
      }
  HardSwishForm sixth;
  sixth.sixth_first = true;
  expect_fused(sixth);
  HardSwishForm attrs;
  attrs.bounds_as_attrs = true;
  expect_fused(attrs);
}

TEST(HardSwishFusion, near_misses_stay_as_they_are) {
  HardSwishForm f;
  f.three = 2.0f;
  expect_not_fused(f);
  f = {};
  f.six = 5.0f;
  expect_not_fused(f);
  f = {};
  f.clip_max = 5.0f;
  expect_not_fused(f);
  f = {};
  f.clip_is_output = true;  // the Clip's result is needed on its own
  expect_not_fused(f);
  f = {};
  f.other_factor = true;  // y * Clip(x + 3, 0, 6) / 6 is no HardSwish
  expect_not_fused(f);
}

}  // namespace
}  // namespace terrace
