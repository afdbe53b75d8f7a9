// The prelude of every rendered kernel: typedefs, 16-bit float conversions, saturating casts and
// branch-free float32 math, written once for both dialects (a short per-dialect header maps
// TR_FN, bit casts and libm names). Every function is a chain of selects so that the loop
// vectoriser can widen it; NaN and +-Inf follow C's libm (the interpreter's std:: functions).
#include <cctype>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/render_c.h"

namespace terrace::kernels {
namespace {

constexpr const char* kCppHeader = R"(
#define TR_FN static inline __attribute__((always_inline))
#define TR_BUILTIN(name) __builtin_##name
typedef signed char int8_t; typedef unsigned char uint8_t;
typedef short int16_t; typedef unsigned short uint16_t;
typedef int int32_t; typedef unsigned int uint32_t;
typedef long long int64_t; typedef unsigned long long uint64_t;
TR_FN float tr_as_float(uint32_t i) { return __builtin_bit_cast(float, i); }
TR_FN uint32_t tr_as_uint(float f) { return __builtin_bit_cast(uint32_t, f); }
// A select whose sides are both computed (their reads unconditional), for the vectoriser to blend.
template <typename T> TR_FN T tr_select(bool c, T a, T b) { return c ? a : b; }
)";

constexpr const char* kCudaHeader = R"(
#define TR_FN static __device__ __forceinline__
#define TR_BUILTIN(name) name
typedef signed char int8_t; typedef unsigned char uint8_t;
typedef short int16_t; typedef unsigned short uint16_t;
typedef int int32_t; typedef unsigned int uint32_t;
typedef long long int64_t; typedef unsigned long long uint64_t;
TR_FN float tr_as_float(uint32_t i) { return __int_as_float((int)i); }
TR_FN uint32_t tr_as_uint(float f) { return (uint32_t)__float_as_int(f); }
// N elements moved as one access of N * sizeof(T) bytes (ld/st.global.v4 for 4 floats).
template <typename T, int N> struct alignas(sizeof(T) * N) tr_vec { T v[N]; };
// Element j of vector q of a 16-byte aligned float buffer (element 4 q + j), through the read-only
// cache: in an unrolled loop the four reads of one vector are one 16-byte load.
TR_FN float tr_ld4(const float* p, int q, int j) {
  const float4 v = __ldg((const float4*)p + q);
  return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w;
}
)";

// Shared by both dialects. Polynomials are Cephes' (logf, sinf/cosf, atanf), Eigen's rational erf,
// and our own fits for exp and tanh (tools/fit_math.py); each is within a few ulp of libm on its
// range (exp, tanh and sigmoid: tests/jit/math_accuracy_test.cpp).
constexpr const char* kMath = R"(
#define TR_INF (1.0f / 0.0f)
#define TR_NAN (0.0f / 0.0f)

// ---- 16-bit floats (round to nearest even, as interp/half.h) ----
TR_FN float tr_h2f(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  float normal = tr_as_float(sign | ((e + 112) << 23) | (m << 13));
  float special = tr_as_float(sign | 0x7f800000u | (m << 13));
  float sub = (float)m * (1.0f / 16777216.0f);
  sub = sign ? -sub : sub;
  return e == 0x1f ? special : (e == 0 ? sub : normal);
}
TR_FN uint16_t tr_f2h(float f) {
  uint32_t x = tr_as_uint(f), sign = (x >> 16) & 0x8000, ax = x & 0x7fffffffu;
  uint32_t special = sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0);
  float v = tr_as_float(ax < 0x38800000u ? ax : 0x38800000u) * 16777216.0f;
  uint32_t m = (uint32_t)v;
  float rem = v - (float)m;
  uint32_t sub = m + ((rem > 0.5f || (rem == 0.5f && (m & 1))) ? 1u : 0u);
  uint32_t normal = (ax + 0xfffu + ((ax >> 13) & 1) - 0x38000000u) >> 13;
  uint32_t r = ax < 0x38800000u ? sub : normal;
  r = ax >= 0x477ff000u ? 0x7c00u : r;
  return (uint16_t)(ax >= 0x7f800000u ? special : (sign | r));
}
TR_FN float tr_bf2f(uint16_t b) { return tr_as_float((uint32_t)b << 16); }
TR_FN uint16_t tr_f2bf(float f) {
  uint32_t x = tr_as_uint(f);
  uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1)) >> 16;
  return (uint16_t)((x & 0x7fffffffu) > 0x7f800000u ? ((x >> 16) | 0x40) : rounded);
}

// Float to integer as ONNX Cast in the interpreter: truncate, NaN gives 0, saturate at the ends.
template <typename T, typename F>
TR_FN T tr_sat_cast(F x, F lo, F hi, T tlo, T thi) {
  return x != x ? (T)0 : (x <= lo ? tlo : (x >= hi ? thi : (T)x));
}

// ---- float32 math ----
TR_FN float tr_abs_f32(float x) { return TR_BUILTIN(fabsf)(x); }
TR_FN float tr_floor_f32(float x) { return TR_BUILTIN(floorf)(x); }
TR_FN float tr_ceil_f32(float x) { return TR_BUILTIN(ceilf)(x); }
TR_FN float tr_round_f32(float x) { return TR_BUILTIN(rintf)(x); }
TR_FN float tr_sqrt_f32(float x) { return TR_BUILTIN(sqrtf)(x); }
TR_FN float tr_fmod_f32(float x, float y) { return TR_BUILTIN(fmodf)(x, y); }
TR_FN bool tr_isnan_f32(float x) { return x != x; }
TR_FN bool tr_isinf_f32(float x) { return tr_abs_f32(x) == TR_INF; }

// e^x = p 2^n for x already clamped to [-104, 88.8]: x = n ln2 + r with |r| <= ln2/2. n is
// rounded by adding 1.5*2^23 and read back from the float's bits, so there is no float-to-int
// conversion and a NaN passes through every step (no select needed). p(r) is a degree-5 minimax
// fit of e^r with p(0) = 1.
TR_FN float tr_exp_parts(float x, int32_t& n) {
  float t = x * 1.44269504088896341f + 12582912.0f;
  float nf = t - 12582912.0f;
  n = (int32_t)(tr_as_uint(t) - 0x4B400000u);
  float r = x - nf * 0.693359375f;
  r = r - nf * -2.12194440e-4f;
  float p = 8.2894591615e-3f;
  p = p * r + 4.1902557015e-2f;
  p = p * r + 1.6667675972e-1f;
  p = p * r + 4.9999114871e-1f;
  p = p * r + 9.9999970198e-1f;
  return p * r + 1.0f;
}

// exp: 2^n applied as two factors so that results near the overflow and subnormal ends are
// right. Within 1.7e-7 of e^x over every float (measured). Below ln(2^-150) e^x rounds to 0,
// returned as such: those lanes compute e^0 instead of a product that underflows, which on
// Intel cores takes a microcode assist (a softmax whose masked scores are -inf, GPT-2's, ran its
// rows 5x slower on the GPU host's Xeon than on an AMD core).
TR_FN float tr_exp_f32(float x) {
  const bool zero = x < -103.972084f;  // NaN compares false and passes through
  float xc = zero ? 0.0f : x;
  xc = xc > 88.8f ? 88.8f : xc;
  int32_t n;
  float p = tr_exp_parts(xc, n);
  int32_t n1 = n >> 1, n2 = n - n1;
  float y = p * tr_as_float((uint32_t)(n1 + 127) << 23) * tr_as_float((uint32_t)(n2 + 127) << 23);
  return zero ? 0.0f : y;
}

TR_FN float tr_expm1_f32(float x) {
  float e = tr_exp_f32(x) - 1.0f;
  return tr_abs_f32(x) < 1e-5f ? x + 0.5f * x * x : e;
}

// log: x = m 2^e with m in [sqrt(1/2), sqrt(2)); subnormals are scaled by 2^23 first.
TR_FN float tr_log_f32(float x) {
  int sub = x < 1.17549435e-38f;
  float xs = sub ? x * 8388608.0f : x;
  uint32_t ix = tr_as_uint(xs);
  int32_t e = (int32_t)((ix >> 23) & 0xff) - 126 - (sub ? 23 : 0);
  float m = tr_as_float((ix & 0x007fffffu) | 0x3f000000u);  // [0.5, 1)
  int small = m < 0.707106781186547524f;
  e = small ? e - 1 : e;
  m = small ? m + m - 1.0f : m - 1.0f;
  float z = m * m;
  float y = 7.0376836292e-2f;
  y = y * m - 1.1514610310e-1f;
  y = y * m + 1.1676998740e-1f;
  y = y * m - 1.2420140846e-1f;
  y = y * m + 1.4249322787e-1f;
  y = y * m - 1.6668057665e-1f;
  y = y * m + 2.0000714765e-1f;
  y = y * m - 2.4999993993e-1f;
  y = y * m + 3.3333331174e-1f;
  y = y * m * z;
  float fe = (float)e;
  y = y + fe * -2.12194440e-4f;
  y = y - 0.5f * z;
  float r = m + y + fe * 0.693359375f;
  r = x == 0.0f ? -TR_INF : r;
  r = x < 0.0f ? TR_NAN : r;
  r = x == TR_INF ? x : r;
  return x != x ? x : r;
}

// log1p: Goldberg's correction log(u) * x / (u - 1) for the rounding of u = 1 + x.
TR_FN float tr_log1p_f32(float x) {
  float u = 1.0f + x, d = u - 1.0f;
  float r = tr_log_f32(u) * (x / (d == 0.0f ? 1.0f : d));
  r = d == 0.0f ? x : r;
  return x == TR_INF ? x : r;
}

// tanh = sign(x) t P(t^2) / Q(t^2) with t = |x| clamped to 7.905 (where tanh reaches 1 in float),
// P and Q of degree 4: a rational fit of our own (tools/fit_math.py) that matches the accuracy of
// Eigen's [13/6] with one multiply-add fewer. P/Q is 1 at 0, so tiny and subnormal x keep their
// value to an ulp with no branch; NaN passes the clamp. Within 2.9e-7 of tanh over every float
// (measured).
TR_FN float tr_tanh_f32(float x) {
  float ax = tr_abs_f32(x);
  float t = ax > 7.90531110763549805f ? 7.90531110763549805f : ax;
  float z = t * t;
  float p = 1.541956252e-8f;
  p = p * z + 2.201778443e-5f;
  p = p * z + 3.578678239e-3f;
  p = p * z + 1.345036030e-1f;
  p = p * z + 1.0f;
  float q = 8.595534950e-7f;
  q = q * z + 3.423125891e-4f;
  q = q * z + 2.619105950e-2f;
  q = q * z + 4.678368866e-1f;
  q = q * z + 1.0f;
  return TR_BUILTIN(copysignf)(t * (p / q), x);
}

// e^-x as sigmoid and silu need it: m = -x clamped to [-87.3, 88.8], where 2^n is a single factor:
// a normal float, or +inf for n = 128 (x below -88.4, where sigmoid is under 4.5e-39 and gives 0).
// One scaling instead of exp's two saves a multiply and three integer operations; the clamps are
// on m itself because clamping x and negating after compiles to compare-and-blend instead of
// min/max.
TR_FN float tr_exp_neg_f32(float x) {
  float m = -x;
  m = m < -87.3f ? -87.3f : m;  // NaN compares false and passes through
  m = m > 88.8f ? 88.8f : m;
  int32_t n;
  float p = tr_exp_parts(m, n);
  return p * tr_as_float((uint32_t)(n + 127) << 23);
}

// Within 2.5e-7 of sigmoid over every float with a normal result (measured).
TR_FN float tr_sigmoid_f32(float x) { return 1.0f / (1.0f + tr_exp_neg_f32(x)); }

// x * sigmoid(x) as one division: a multiply and a rounding fewer than the two ops, and the same
// NaN and infinities (silu(-inf) is -inf * 0 = NaN, as the unfused ops give).
TR_FN float tr_silu_f32(float x) { return x / (1.0f + tr_exp_neg_f32(x)); }

TR_FN float tr_erf_f32(float x) {
  float xc = x < -4.0f ? -4.0f : (x > 4.0f ? 4.0f : x);
  float x2 = xc * xc;
  float p = -2.72614225801306e-10f;
  p = p * x2 + 2.77068142495902e-08f;
  p = p * x2 - 2.10102402082508e-06f;
  p = p * x2 - 5.69250639462346e-05f;
  p = p * x2 - 7.34990630326855e-04f;
  p = p * x2 - 2.95459980854025e-03f;
  p = p * x2 - 1.60960333262415e-02f;
  float q = -1.45660718464996e-05f;
  q = q * x2 - 2.13374055278905e-04f;
  q = q * x2 - 1.68282697438203e-03f;
  q = q * x2 - 7.37332916720468e-03f;
  q = q * x2 - 1.42647390514189e-02f;
  float r = xc * p / q;
  r = r > 1.0f ? 1.0f : (r < -1.0f ? -1.0f : r);
  return x != x ? x : r;
}

// pow = exp(y log|x|) with C's special cases: x^0 = 1^y = 1, (-1)^+-inf = 1, the sign of a
// negative base for odd integer y, NaN for a finite negative base and non-integer y.
TR_FN float tr_pow_f32(float x, float y) {
  float ax = tr_abs_f32(x);
  float r = tr_exp_f32(y * tr_log_f32(ax));
  int y_int = TR_BUILTIN(floorf)(y) == y;
  int y_odd = y_int && TR_BUILTIN(floorf)(y * 0.5f) * 2.0f != y;
  r = (tr_as_uint(x) >> 31) && y_odd ? -r : r;
  r = x < 0.0f && x > -TR_INF && !y_int ? TR_NAN : r;
  r = ax == 1.0f && tr_abs_f32(y) == TR_INF ? 1.0f : r;
  return y == 0.0f || x == 1.0f ? 1.0f : r;
}

// sin/cos: reduction by pi/4 octants in three exact-ish parts (accurate to |x| ~ 1e5).
TR_FN float tr_sincos_f32(float x, int want_cos) {
  float ax = tr_abs_f32(x);
  float axc = ax < 1e7f ? ax : 0.0f;
  int32_t j = (int32_t)(axc * 1.27323954473516f);
  j = (j + 1) & ~1;
  float fj = (float)j;
  float r = ((axc - fj * 0.78515625f) - fj * 2.4187564849853515625e-4f) - fj * 3.77489497744594108e-8f;
  int32_t q = j + (want_cos ? 2 : 0);
  float z = r * r;
  float ps = ((-1.9515295891e-4f * z + 8.3321608736e-3f) * z - 1.6666654611e-1f) * z * r + r;
  float pc = ((2.443315711809948e-5f * z - 1.388731625493765e-3f) * z + 4.166664568298827e-2f) * z * z - 0.5f * z + 1.0f;
  float v = (q & 2) ? pc : ps;
  v = (q & 4) ? -v : v;
  v = !want_cos && x < 0.0f ? -v : v;
  return ax == TR_INF || x != x ? TR_NAN : v;
}
TR_FN float tr_sin_f32(float x) { return tr_sincos_f32(x, 0); }
TR_FN float tr_cos_f32(float x) { return tr_sincos_f32(x, 1); }
TR_FN float tr_tan_f32(float x) { return tr_sin_f32(x) / tr_cos_f32(x); }

TR_FN float tr_atan_f32(float x) {
  float ax = tr_abs_f32(x);
  int big = ax > 2.414213562373095f, mid = ax > 0.4142135623730950f;
  float t = big ? -1.0f / ax : (mid ? (ax - 1.0f) / (ax + 1.0f) : ax);
  float y0 = big ? 1.5707963267948966f : (mid ? 0.7853981633974483f : 0.0f);
  float z = t * t;
  float y = (((8.05374449538e-2f * z - 1.38776856032e-1f) * z + 1.99777106478e-1f) * z - 3.33329491539e-1f) * z * t + t + y0;
  y = x < 0.0f ? -y : y;
  return x != x ? x : y;
}
TR_FN float tr_asin_f32(float x) { return tr_atan_f32(x / tr_sqrt_f32((1.0f - x) * (1.0f + x))); }
TR_FN float tr_acos_f32(float x) { return 1.5707963267948966f - tr_asin_f32(x); }
// sinh and cosh from exp(|x| - ln2) so that they stay finite up to where float overflows.
TR_FN float tr_sinh_f32(float x) {
  float ax = tr_abs_f32(x);
  float v = tr_exp_f32(ax - 0.69314718056f) - tr_exp_f32(-ax - 0.69314718056f);
  v = ax < 1e-4f ? ax : v;
  return x < 0.0f ? -v : (x != x ? x : v);
}
TR_FN float tr_cosh_f32(float x) {
  float ax = tr_abs_f32(x);
  return tr_exp_f32(ax - 0.69314718056f) + tr_exp_f32(-ax - 0.69314718056f);
}
TR_FN float tr_asinh_f32(float x) {
  float ax = tr_abs_f32(x);
  float v = tr_log1p_f32(ax + ax * ax / (1.0f + tr_sqrt_f32(1.0f + ax * ax)));
  v = ax > 1e10f ? tr_log_f32(ax) + 0.69314718056f : v;
  return x < 0.0f ? -v : v;
}
TR_FN float tr_acosh_f32(float x) {
  float v = tr_log_f32(x + tr_sqrt_f32(x * x - 1.0f));
  return x > 1e10f ? tr_log_f32(x) + 0.69314718056f : v;
}
TR_FN float tr_atanh_f32(float x) { return 0.5f * tr_log1p_f32(2.0f * x / (1.0f - x)); }

// ---- float64: libm (scalar); models rarely compute in double ----
#define TR_F64_LIBM(name, fn) TR_FN double tr_##name##_f64(double x) { return TR_BUILTIN(fn)(x); }
TR_F64_LIBM(abs, fabs) TR_F64_LIBM(floor, floor) TR_F64_LIBM(ceil, ceil) TR_F64_LIBM(round, rint)
TR_F64_LIBM(sqrt, sqrt) TR_F64_LIBM(exp, exp) TR_F64_LIBM(expm1, expm1) TR_F64_LIBM(log, log)
TR_F64_LIBM(log1p, log1p) TR_F64_LIBM(tanh, tanh) TR_F64_LIBM(erf, erf) TR_F64_LIBM(sin, sin)
TR_F64_LIBM(cos, cos) TR_F64_LIBM(tan, tan) TR_F64_LIBM(asin, asin) TR_F64_LIBM(acos, acos)
TR_F64_LIBM(atan, atan) TR_F64_LIBM(sinh, sinh) TR_F64_LIBM(cosh, cosh) TR_F64_LIBM(asinh, asinh)
TR_F64_LIBM(acosh, acosh) TR_F64_LIBM(atanh, atanh)
TR_FN double tr_pow_f64(double x, double y) { return TR_BUILTIN(pow)(x, y); }
TR_FN double tr_fmod_f64(double x, double y) { return TR_BUILTIN(fmod)(x, y); }
TR_FN double tr_sigmoid_f64(double x) { return 1.0 / (1.0 + tr_exp_f64(-x)); }
TR_FN double tr_silu_f64(double x) { return x / (1.0 + tr_exp_f64(-x)); }
TR_FN bool tr_isnan_f64(double x) { return x != x; }
TR_FN bool tr_isinf_f64(double x) { return tr_abs_f64(x) == (1.0 / 0.0); }
)";

// A top-level item of kMath (a function, a template or a macro, with the comment above it) and
// the names it defines.
struct PreludeItem {
  std::string text;
  std::vector<std::string> defines;
};

bool is_ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Every identifier in `text` that starts with "tr_" or "TR_".
std::set<std::string> names_used(std::string_view text) {
  std::set<std::string> names;
  for (size_t i = 0; i < text.size(); ++i) {
    bool prefixed = text.compare(i, 3, "tr_") == 0 || text.compare(i, 3, "TR_") == 0;
    if (!prefixed || (i > 0 && is_ident_char(text[i - 1]))) continue;
    size_t j = i;
    while (j < text.size() && is_ident_char(text[j])) ++j;
    names.emplace(text.substr(i, j - i));
    i = j;
  }
  return names;
}

// The identifier that starts at `at`, or the first "tr_" one after it ("tr_exp_f32" in
// "TR_FN float tr_exp_f32(...").
std::string name_at(const std::string& line, size_t at, bool first_tr_after) {
  size_t i = first_tr_after ? line.find("tr_", at) : at;
  if (i == std::string::npos) return "";
  size_t j = i;
  while (j < line.size() && is_ident_char(line[j])) ++j;
  return line.substr(i, j - i);
}

// Splits kMath at the lines that start a definition; comments go with the definition below them.
std::vector<PreludeItem> prelude_items() {
  std::vector<PreludeItem> items;
  std::string pending;        // comment and blank lines waiting for their definition
  bool open_template = false;  // a "template <...>" line waits for its function
  std::istringstream in(kMath);
  for (std::string line; std::getline(in, line);) {
    line += '\n';
    bool fn = line.rfind("TR_FN ", 0) == 0, define = line.rfind("#define ", 0) == 0;
    bool libm = line.rfind("TR_F64_LIBM(", 0) == 0, tmpl = line.rfind("template", 0) == 0;
    if (!fn && !define && !libm && !tmpl) {
      // A body line belongs to the open item; comments and blank lines between items wait.
      bool between = items.empty() || line == "\n" || line.rfind("//", 0) == 0;
      (between ? pending : items.back().text) += line;
      continue;
    }
    if (!(fn && open_template)) items.push_back({pending, {}});
    open_template = tmpl;
    pending.clear();
    PreludeItem& item = items.back();
    item.text += line;
    if (libm) {
      for (size_t at = 0; (at = line.find("TR_F64_LIBM(", at)) != std::string::npos;) {
        at += 12;
        item.defines.push_back("tr_" + line.substr(at, line.find(',', at) - at) + "_f64");
      }
    } else if (define) {
      item.defines.push_back(name_at(line, 8, false));
    } else if (fn) {
      item.defines.push_back(name_at(line, 6, true));
    }
  }
  return items;
}

}  // namespace

std::string render_prelude(Dialect dialect) {
  return std::string(dialect == Dialect::Cpp ? kCppHeader : kCudaHeader) + kMath;
}

std::string render_prelude(Dialect dialect, std::string_view code) {
  // Never destroyed: a compile a session abandoned may render while the process exits.
  static const std::vector<PreludeItem>& items = *new std::vector<PreludeItem>(prelude_items());
  // Names needed: those of `code`, then, to a fixed point, those of the items that define them.
  std::set<std::string> needed = names_used(code);
  std::vector<bool> take(items.size(), false);
  for (bool grew = true; grew;) {
    grew = false;
    for (size_t i = 0; i < items.size(); ++i) {
      if (take[i]) continue;
      for (const std::string& d : items[i].defines)
        if (needed.count(d)) take[i] = true;
      if (!take[i]) continue;
      grew = true;
      std::set<std::string> more = names_used(items[i].text);
      needed.insert(more.begin(), more.end());
    }
  }
  std::string out = dialect == Dialect::Cpp ? kCppHeader : kCudaHeader;
  for (size_t i = 0; i < items.size(); ++i)
    if (take[i]) out += items[i].text;
  return out;
}

}  // namespace terrace::kernels
