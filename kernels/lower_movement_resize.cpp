// Resize (and Upsample) lowered to one kernel (kernels/lower_op.h): nearest (any dtype, elements moved
// bit-exactly) and linear (float32, float64) with the half_pixel, pytorch_half_pixel,
// align_corners, asymmetric and tf_half_pixel_for_nn coordinate transformations, and opset 18's
// axes and keep_aspect_ratio_policy (antialias, which widens linear filters, is not compiled). Each output
// position's source coordinate is computed in the kernel in float64, by the same operations in the
// same order as interp/ops/shape_resize.cpp (the specification), so the results are bit-identical
// to the interpreter's: linear mode sums its taps in float64 in the reference's order, each
// product bound to a name of its own so that Clang cannot contract it into a fused multiply-add.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>

#include "kernels/lower_movement.h"
#include "kernels/verify.h"

namespace terrace::kernels::movement {
namespace {

enum class Mode { Nearest, Linear };
enum class Coord { HalfPixel, PytorchHalfPixel, AlignCorners, Asymmetric, TfHalfPixelForNn };
enum class Rounding { RoundPreferFloor, RoundPreferCeil, Floor, Ceil };

struct Attrs {
  Mode mode = Mode::Nearest;
  Coord coord = Coord::Asymmetric;
  Rounding rounding = Rounding::Floor;
};

// The attributes, or the reason tier 1 cannot compile them (the interpreter judges bad values).
std::string read_attrs(const Node& node, Attrs& a) {
  std::string mode = node.attr_string("mode", "nearest");
  if (mode == "nearest") a.mode = Mode::Nearest;
  else if (mode == "linear" || mode == "bilinear") a.mode = Mode::Linear;
  else return "tier 1 compiles Resize in nearest and linear modes, not '" + mode + "'";
  if (node.inputs.size() <= 2) return "";  // opset 10: asymmetric coordinates, rounding down
  std::string coord = node.attr_string("coordinate_transformation_mode", "half_pixel");
  if (coord == "half_pixel") a.coord = Coord::HalfPixel;
  else if (coord == "pytorch_half_pixel") a.coord = Coord::PytorchHalfPixel;
  else if (coord == "align_corners") a.coord = Coord::AlignCorners;
  else if (coord == "asymmetric") a.coord = Coord::Asymmetric;
  else if (coord == "tf_half_pixel_for_nn") a.coord = Coord::TfHalfPixelForNn;
  else return "tier 1 does not compile Resize's coordinate_transformation_mode '" + coord + "'";
  std::string rounding = node.attr_string("nearest_mode", "round_prefer_floor");
  if (rounding == "round_prefer_floor") a.rounding = Rounding::RoundPreferFloor;
  else if (rounding == "round_prefer_ceil") a.rounding = Rounding::RoundPreferCeil;
  else if (rounding == "floor") a.rounding = Rounding::Floor;
  else if (rounding == "ceil") a.rounding = Rounding::Ceil;
  else return "tier 1 does not compile Resize's nearest_mode '" + rounding + "'";
  if (node.attr_int("exclude_outside", 0) != 0) return "tier 1 does not compile Resize with exclude_outside";
  // Opset 18's additions: axes and keep_aspect_ratio_policy are compiled (resize_axes,
  // lower_resize), antialias is not.
  if (node.attr_int("antialias", 0) != 0 && a.mode != Mode::Nearest)
    return "tier 1 does not compile Resize with antialias";
  const std::string policy = node.attr_string("keep_aspect_ratio_policy", "stretch");
  if (policy != "stretch" && policy != "not_larger" && policy != "not_smaller")
    return "tier 1 does not compile Resize's keep_aspect_ratio_policy '" + policy + "'";
  return "";
}

// One axis: the scale, lengths, and the source coordinate of output index x, written once as a
// template so that the compile-time check of trivial axes (below) and the kernel's IR compute the
// same thing.
struct Axis {
  double scale;
  int64_t in_len, out_len;
  double scaled_len() const { return scale * double(in_len); }  // unrounded, as the reference
};

template <typename D>
D source_coord(Coord c, const Axis& ax, const D& x, const D& half, auto constant) {
  const double out_len = ax.scaled_len();
  switch (c) {
    case Coord::HalfPixel: return (x + half) / constant(ax.scale) - half;
    case Coord::PytorchHalfPixel: return out_len > 1 ? (x + half) / constant(ax.scale) - half : constant(-0.5);
    case Coord::AlignCorners:
      return out_len == 1 ? constant(0.0) : x * constant(double(ax.in_len - 1)) / constant(out_len - 1);
    case Coord::Asymmetric: return x / constant(ax.scale);
    case Coord::TfHalfPixelForNn: return (x + half) / constant(ax.scale);
  }
  return x;
}

// The reference's two taps around coordinate xo: the window start (before clamping into the
// input) and the fraction r in (0, 1] past the first tap. Nearest takes the second tap when `up`.
struct HostTaps {
  int64_t start;
  double r;
};
HostTaps host_taps(const Attrs& a, const Axis& ax, int64_t x) {
  double xo = source_coord<double>(a.coord, ax, double(x), 0.5, [](double v) { return v; });
  double fl = std::floor(xo);
  double r = xo == fl ? 1.0 : xo - fl;
  double first = std::ceil(xo) - 1;
  return {int64_t(std::clamp(first, -1.0, double(ax.in_len - 1))), r};
}
bool host_up(Rounding m, double r) {
  return r == 1.0 || m == Rounding::Ceil || (m == Rounding::RoundPreferFloor && r > 0.5) ||
         (m == Rounding::RoundPreferCeil && r >= 0.5);
}

// True when every output index of the axis reads its own input index with weight 1 (the reference
// then computes 0 + 1 * v, which only turns -0 into +0; the kernel adds 0 once at the end).
bool is_identity(const Attrs& a, const Axis& ax) {
  if (ax.in_len != ax.out_len) return false;
  for (int64_t x = 0; x < ax.out_len; ++x) {
    HostTaps t = host_taps(a, ax, x);
    bool up = a.mode == Mode::Linear ? t.r == 1.0 : host_up(a.rounding, t.r);
    if (!up || std::clamp<int64_t>(t.start + 1, 0, ax.in_len - 1) != x) return false;
  }
  return true;
}

// Nearest mode's input index for output index x, as the reference picks it.
int64_t host_nearest(const Attrs& a, const Axis& ax, int64_t x) {
  HostTaps t = host_taps(a, ax, x);
  return std::clamp<int64_t>(t.start + (host_up(a.rounding, t.r) ? 1 : 0), 0, ax.in_len - 1);
}

// Integer forms of nearest's index map, (x * mul + add) / div: the usual integer scales (floor of
// x / scale, or of the pixel centre) need no float arithmetic. Each is used only when it gives the
// reference's index for every output index of the axis.
struct IntegerMap {
  int64_t mul, add, div;
};
std::optional<IntegerMap> integer_nearest(const Attrs& a, const Axis& ax) {
  if (ax.out_len == 0 || ax.in_len > (int64_t(1) << 30) || ax.out_len > (int64_t(1) << 30)) return std::nullopt;
  const IntegerMap candidates[] = {{ax.in_len, 0, ax.out_len}, {2 * ax.in_len, ax.in_len, 2 * ax.out_len}};
  for (const IntegerMap& m : candidates) {
    bool all = true;
    for (int64_t x = 0; x < ax.out_len && all; ++x) all = (x * m.mul + m.add) / m.div == host_nearest(a, ax, x);
    if (all) return m;
  }
  return std::nullopt;
}

Expr f64(double v) { return FloatImm::make(DType::Float64, v); }

// The kernel's taps of one axis at index expression `x`, bound by LetStmts named with `tag`.
struct KernelTaps {
  Expr i0, i1;  // clamped input indices of the two taps
  Expr w0, w1;  // weights (linear)
  Expr up;      // nearest: take tap 1
};
KernelTaps kernel_taps(const Attrs& a, const Axis& ax, const Expr& x, const std::string& tag,
                       const std::function<Expr(const std::string&, Expr)>& let) {
  Expr xd = Cast::make(DType::Float64, x);
  Expr xo = let("xo" + tag, source_coord<Expr>(a.coord, ax, xd, f64(0.5), [](double v) { return f64(v); }));
  Expr fl = Call::make(Intrinsic::Floor, {xo});
  Expr r = let("fr" + tag, select(cmp(CmpOp::EQ, xo, fl), f64(1.0), xo - fl));
  Expr first = Call::make(Intrinsic::Ceil, {xo}) - f64(1.0);
  Expr clamped = select(cmp(CmpOp::LT, first, f64(-1.0)), f64(-1.0), first);
  clamped = select(cmp(CmpOp::GT, clamped, f64(double(ax.in_len - 1))), f64(double(ax.in_len - 1)), clamped);
  Expr start = let("st" + tag, Cast::make(DType::Int64, clamped));
  KernelTaps t;
  t.i0 = clamp_index(start, 0, ax.in_len - 1);
  t.i1 = clamp_index(start + make_index(1), 0, ax.in_len - 1);
  if (a.mode == Mode::Linear) {
    t.w0 = f64(1.0) - r;
    t.w1 = r;
  } else {
    Expr is_one = cmp(CmpOp::EQ, r, f64(1.0));
    Expr up;
    switch (a.rounding) {
      case Rounding::Ceil: up = make_const(DType::Bool, 1); break;
      case Rounding::Floor: up = is_one; break;
      case Rounding::RoundPreferFloor: up = Binary::make(BinaryOp::Or, is_one, cmp(CmpOp::GT, r, f64(0.5))); break;
      case Rounding::RoundPreferCeil: up = Binary::make(BinaryOp::Or, is_one, cmp(CmpOp::GE, r, f64(0.5))); break;
    }
    t.up = up;
  }
  return t;
}

std::vector<double> float_values(const Node& node, const OpInput& in, const char* what) {
  TERRACE_CHECK(in.value != nullptr, NotImplemented, node.describe(), ": tier 1 needs input '", what,
                "' known at compile time (an initializer)");
  std::vector<double> v(size_t(in.value->numel()));
  for (int64_t i = 0; i < in.value->numel(); ++i) v[size_t(i)] = in.value->get_as_double(i);
  return v;
}

}  // namespace

// Opset 18's `axes`: the axes that scales and sizes speak of (all, in order, by default), checked
// as the interpreter checks them.
std::vector<size_t> resize_axes(const Node& node, size_t r) {
  std::vector<size_t> axes;
  if (!node.has_attr("axes")) {
    for (size_t d = 0; d < r; ++d) axes.push_back(d);
    return axes;
  }
  std::vector<bool> seen(r, false);
  for (int64_t v : node.attr_ints("axes")) {
    TERRACE_CHECK(v >= -int64_t(r) && v < int64_t(r), InvalidArgument, node.describe(), ": axis ", v,
                  " is out of range for rank ", r);
    const size_t d = size_t(v < 0 ? v + int64_t(r) : v);
    TERRACE_CHECK(!seen[d], InvalidArgument, node.describe(), ": axis ", v, " is listed twice");
    seen[d] = true;
    axes.push_back(d);
  }
  return axes;
}

std::string can_lower_resize(const Graph& g, const Node& node) {
  Attrs a;
  if (std::string why = read_attrs(node, a); !why.empty()) return why;
  const bool legacy = node.op == Op::Upsample || node.inputs.size() == 2;  // (X, scales)
  if (legacy) {
    if (std::string why = require_constant(g, node, 1, "scales"); !why.empty()) return why;
  } else {
    if (std::string why = require_constant(g, node, 2, "scales"); !why.empty()) return why;
    if (std::string why = require_constant(g, node, 3, "sizes"); !why.empty()) return why;
  }
  if (a.mode == Mode::Linear) {
    const auto& t = g.values[size_t(node.inputs[0])].info.dtype;
    if (!t || (*t != DType::Float32 && *t != DType::Float64))
      return "tier 1 compiles linear Resize of float32 and float64 only";
  }
  return "";
}

namespace {

// A Resize's output shape and per-axis scales, as interp/ops/shape_resize.cpp computes them.
struct ResizeGeometry {
  Shape out;
  std::vector<double> scales;
};

// From scales: an input's (on `axes`) or Upsample 7's attribute.
void from_scales(const Node& node, const std::vector<OpInput>& in, bool scales_attr, size_t scales_at,
                 const std::vector<size_t>& axes, const Shape& xshape, ResizeGeometry& g) {
  const size_t r = xshape.size();
  if (scales_attr) {
    for (float f : node.attr_floats("scales")) g.scales.push_back(f);
  } else {
    std::vector<double> given = float_values(node, in[scales_at], "scales");
    TERRACE_CHECK(given.size() == axes.size(), InvalidArgument, node.describe(), ": scales has ", given.size(),
                  " values for ", axes.size(), " axes");
    g.scales.assign(r, 1.0);
    for (size_t i = 0; i < axes.size(); ++i) g.scales[axes[i]] = given[i];
  }
  TERRACE_CHECK(g.scales.size() == r, InvalidArgument, node.describe(), ": ", g.scales.size(),
                " scales for an input of rank ", r);
  for (size_t d = 0; d < r; ++d) {
    TERRACE_CHECK(g.scales[d] > 0 && std::isfinite(g.scales[d]), InvalidArgument, node.describe(), ": scale ",
                  g.scales[d], " on axis ", d, " must be positive");
    double o = std::floor(double(xshape[d]) * g.scales[d]);
    TERRACE_CHECK(o < 9e15, InvalidArgument, node.describe(), ": scale ", g.scales[d], " makes axis ", d, " too large");
    g.out.push_back(int64_t(o));
  }
}

// From sizes (on `axes`), with opset 18's keep_aspect_ratio_policy.
void from_sizes(const Node& node, const std::vector<OpInput>& in, const std::vector<size_t>& axes, const Shape& xshape,
                ResizeGeometry& g) {
  const size_t r = xshape.size();
  const Shape given = constant_ints(node, in, 3, "sizes");
  TERRACE_CHECK(given.size() == axes.size(), InvalidArgument, node.describe(), ": sizes has ", given.size(),
                " values for ", axes.size(), " axes");
  g.out = xshape;
  for (size_t i = 0; i < axes.size(); ++i) {
    TERRACE_CHECK(given[i] >= 0, InvalidArgument, node.describe(), ": negative size");
    g.out[axes[i]] = given[i];
  }
  // keep_aspect_ratio_policy (opset 18): one scale for every listed axis, the smallest or the
  // largest asked, and sizes rounded from it, as interp/ops/shape_resize.cpp computes them.
  const std::string policy = node.attr_string("keep_aspect_ratio_policy", "stretch");
  if (policy == "stretch") {
    for (size_t d = 0; d < r; ++d) g.scales.push_back(xshape[d] ? double(g.out[d]) / double(xshape[d]) : 1.0);
    return;
  }
  double scale = policy == "not_larger" ? std::numeric_limits<double>::infinity() : 0.0;
  for (size_t d : axes) {
    TERRACE_CHECK(xshape[d] > 0, InvalidArgument, node.describe(), ": cannot keep the aspect ratio of an empty axis");
    const double ratio = double(g.out[d]) / double(xshape[d]);
    scale = policy == "not_larger" ? std::min(scale, ratio) : std::max(scale, ratio);
  }
  g.scales.assign(r, 1.0);
  for (size_t d : axes) {
    g.scales[d] = scale;
    g.out[d] = int64_t(std::floor(scale * double(xshape[d]) + 0.5));
  }
}

ResizeGeometry resize_geometry(const Node& node, const std::vector<OpInput>& in, const Shape& xshape) {
  const size_t r = xshape.size();
  // Resize from opset 11: (X, roi, scales, sizes); opset 10 and Upsample 9: (X, scales); Upsample 7:
  // (X) with a `scales` attribute.
  const bool legacy = node.op == Op::Upsample || node.inputs.size() == 2;
  const bool scales_attr = node.op == Op::Upsample && !has_input(in, 1);
  const size_t scales_at = legacy ? 1 : 2;
  const bool has_scales = scales_attr || (has_input(in, scales_at) && shape_numel(in[scales_at].sig.shape) > 0);
  const bool has_sizes = !legacy && has_input(in, 3) && shape_numel(in[3].sig.shape) > 0;
  TERRACE_CHECK(has_scales != has_sizes, InvalidArgument, node.describe(),
                ": exactly one of scales and sizes must be given");
  ResizeGeometry g;
  // Opset 18: scales and sizes may speak of some axes only (the others keep their size).
  const std::vector<size_t> axes = legacy ? resize_axes(Node{}, r) : resize_axes(node, r);
  if (has_scales) from_scales(node, in, scales_attr, scales_at, axes, xshape, g);
  else from_sizes(node, in, axes, xshape, g);
  for (size_t d = 0; d < r; ++d)
    TERRACE_CHECK(xshape[d] > 0 || g.out[d] == 0, InvalidArgument, node.describe(),
                  ": cannot resize an empty axis ", d, " to ", g.out[d]);
  return g;
}

using Lets = std::vector<std::pair<std::string, Expr>>;

// The kernel's taps per axis: an identity axis reads its own index (its part of `base`), nearest
// takes an integer map where one fits, else the reference's float64 coordinate. Bound per outer
// iteration, or per element (into inner_lets) for the last axis.
struct ResizeTaps {
  std::vector<KernelTaps> taps;
  std::vector<bool> moves;
  Expr base = make_index(0);  // the offset of the identity axes
};
ResizeTaps resize_taps(const Attrs& a, const ResizeGeometry& g, const Shape& xshape, const std::vector<int64_t>& xs,
                       DenseNest& nest, Lets& inner_lets) {
  const size_t r = xshape.size();
  ResizeTaps rt;
  rt.taps.resize(r);
  rt.moves.assign(r, false);
  for (size_t d = 0; d < r; ++d) {
    Axis ax{g.scales[d], xshape[d], g.out[d]};
    const Expr& xi = nest.index(d);
    if (is_identity(a, ax)) {
      if (xs[d] != 0 && g.out[d] > 1) rt.base = rt.base + xi * make_index(xs[d]);
      continue;
    }
    rt.moves[d] = true;
    if (a.mode != Mode::Linear) {
      if (std::optional<IntegerMap> m = integer_nearest(a, ax)) {
        Expr i = (xi * make_index(m->mul) + make_index(m->add)) / make_index(m->div);
        rt.taps[d].up = make_const(DType::Bool, 0);
        rt.taps[d].i0 = rt.taps[d].i1 = d + 1 == r && r > 1 ? i : nest.outer_let("ix" + std::to_string(d), i);
        continue;
      }
    }
    const bool last = d + 1 == r && r > 1;
    auto let = [&](const std::string& n, Expr v) -> Expr {
      if (!last) return nest.outer_let(n, v);
      inner_lets.push_back({n, v});
      return var(n, v.type());
    };
    rt.taps[d] = kernel_taps(a, ax, xi, std::to_string(d), let);
  }
  return rt;
}

// Nearest: one load at the taps' offsets (the identity axes' part per outer iteration).
Expr nearest_value(const Buffer& src, const ResizeTaps& rt, const std::vector<int64_t>& xs) {
  Expr at = rt.base;
  for (size_t d = 0; d < rt.taps.size(); ++d)
    if (rt.moves[d]) {
      const KernelTaps& t = rt.taps[d];
      at = at + (t.i0.same_as(t.i1) ? t.i0 : select(t.up, t.i1, t.i0)) * make_index(xs[d]);
    }
  return Load::make(src, at);
}

// Linear, in the reference's nesting: axis d's sum is 0 + w0 * (axis d+1's sum at tap 0) + w1 *
// (...), a tap of weight 0 left out. Products are bound to names (no contraction).
Expr linear_value(const Buffer& src, const ResizeTaps& rt, const std::vector<int64_t>& xs, DType dtype,
                  Lets& inner_lets) {
  const size_t r = rt.taps.size();
  int counter = 0;
  std::function<Expr(size_t, Expr)> level = [&](size_t d, Expr off) -> Expr {
    while (d < r && !rt.moves[d]) ++d;
    if (d == r) return Cast::make(DType::Float64, Load::make(src, off));
    Expr a0 = level(d + 1, off + rt.taps[d].i0 * make_index(xs[d]));
    Expr a1 = level(d + 1, off + rt.taps[d].i1 * make_index(xs[d]));
    std::string p0 = "m" + std::to_string(counter++), p1 = "m" + std::to_string(counter++);
    inner_lets.push_back({p0, rt.taps[d].w0 * a0});
    inner_lets.push_back({p1, rt.taps[d].w1 * a1});
    std::string s = "s" + std::to_string(counter++);
    Expr first = select(cmp(CmpOp::NE, rt.taps[d].w0, f64(0.0)), var(p0, DType::Float64), f64(0.0));
    inner_lets.push_back({s, (f64(0.0) + first) + var(p1, DType::Float64)});
    return var(s, DType::Float64);
  };
  Expr sum = level(0, rt.base);
  inner_lets.push_back({"total", f64(0.0) + sum});  // 0 + v, as an identity axis of the reference
  return Cast::make(dtype, var("total", DType::Float64));
}

}  // namespace

OpKernels lower_resize(const Node& node, const std::vector<OpInput>& in, const std::string& name) {
  Attrs a;
  if (std::string why = read_attrs(node, a); !why.empty()) fail(ErrorCode::NotImplemented, node.describe(), ": ", why);
  const TensorSig& x = in[0].sig;
  const size_t r = x.shape.size();
  const ResizeGeometry g = resize_geometry(node, in, x.shape);
  const Shape& out = g.out;
  const bool linear = a.mode == Mode::Linear;
  TERRACE_CHECK(!linear || x.dtype == DType::Float32 || x.dtype == DType::Float64, NotImplemented,
                node.describe(), ": tier 1 compiles linear Resize of float32 and float64 only");
  OpKernels k;
  k.outputs = {{x.dtype, out}};
  if (shape_numel(out) == 0) return k;

  LoweredFunc f;
  f.name = name;
  const DType t = linear ? x.dtype : mover_type(node, x.dtype);
  f.buffers = {{"src", t, 0}, {"dst", t, 1}};
  const Buffer src = f.buffers[0], dst = f.buffers[1];
  const std::vector<int64_t> xs = row_major_strides(x.shape);
  DenseNest nest(out);
  Lets inner_lets;
  const ResizeTaps rt = resize_taps(a, g, x.shape, xs, nest, inner_lets);
  const Expr value = linear ? linear_value(src, rt, xs, x.dtype, inner_lets) : nearest_value(src, rt, xs);
  // dst is written densely: the output offset is the flat position.
  Expr pos = make_index(0);
  const std::vector<int64_t> os = row_major_strides(out);
  for (size_t d = 0; d + 1 < r; ++d)
    if (out[d] > 1) pos = pos + nest.index(d) * make_index(os[d]);
  pos = nest.outer_let("dpos", pos);
  Stmt body = Store::make(dst, pos + nest.index(r - 1), value);
  for (auto it = inner_lets.rbegin(); it != inner_lets.rend(); ++it) body = LetStmt::make(it->first, it->second, body);
  f.body = nest.wrap(body);
  f.parallel_extent = nest.parallel_extent();
  f.work_per_iteration = nest.work_per_iteration();
  verify(f);
  k.calls.push_back({std::move(f), {0, int(in.size())}});
  return k;
}

}  // namespace terrace::kernels::movement
