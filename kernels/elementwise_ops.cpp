// ONNX elementwise ops as kernel IR: type rules first, then one case per op. NaN propagates the
// way numpy (and the ONNX reference) propagates it: max/min/clip/relu keep NaN inputs.
#include "kernels/elementwise_ops.h"

#include <cmath>
#include <limits>

namespace terrace::kernels {

DType compute_type(DType storage) {
  return storage == DType::Float16 || storage == DType::BFloat16 ? DType::Float32 : storage;
}

namespace {

using Args = std::vector<OperandValue>;

// Which dtypes an op accepts for its main operand ("T" in the ONNX schema).
enum class TypeClass { Float, Numeric, Signed, Integer, Bool, Any };

TypeClass type_class(Op op) {
  switch (op) {
    case Op::And: case Op::Or: case Op::Xor: case Op::Not:
      return TypeClass::Bool;
    case Op::BitShift: case Op::BitwiseAnd: case Op::BitwiseOr: case Op::BitwiseXor:
    case Op::BitwiseNot:
      return TypeClass::Integer;
    case Op::Neg:
      return TypeClass::Signed;
    case Op::Abs: case Op::Add: case Op::Sub: case Op::Mul: case Op::Div: case Op::Max:
    case Op::Min: case Op::Pow: case Op::Sign: case Op::Clip: case Op::Mod:
    case Op::Relu: case Op::PRelu: case Op::Shrink: case Op::Less: case Op::Greater:
    case Op::LessOrEqual: case Op::GreaterOrEqual:
      return TypeClass::Numeric;
    case Op::Identity: case Op::Where: case Op::Cast: case Op::CastLike: case Op::Equal:
      return TypeClass::Any;
    default:
      return TypeClass::Float;  // activations and math functions
  }
}

bool in_class(DType t, TypeClass c) {
  if (t == DType::String || is_narrow(t)) return false;  // no kernel takes strings or float8/int4/float4
  switch (c) {
    case TypeClass::Float: return is_float(t);
    case TypeClass::Numeric: return is_float(t) || is_integer(t);
    case TypeClass::Signed: return is_float(t) || is_signed(t);
    case TypeClass::Integer: return is_integer(t);
    case TypeClass::Bool: return t == DType::Bool;
    case TypeClass::Any: return true;
  }
  return false;
}

bool has_elementwise_lowering(Op op) {
  switch (op) {
    case Op::Acos: case Op::Acosh: case Op::Asin: case Op::Asinh: case Op::Atan: case Op::Atanh:
    case Op::Abs: case Op::Add: case Op::And: case Op::BitShift: case Op::BitwiseAnd:
    case Op::BitwiseNot: case Op::BitwiseOr: case Op::BitwiseXor: case Op::Cast:
    case Op::CastLike: case Op::Ceil: case Op::Celu: case Op::Clip: case Op::Cos: case Op::Cosh:
    case Op::Div: case Op::Elu: case Op::Equal: case Op::Erf: case Op::Exp: case Op::Floor:
    case Op::Gelu: case Op::Greater: case Op::GreaterOrEqual: case Op::HardSigmoid:
    case Op::HardSwish: case Op::Identity: case Op::IsInf: case Op::IsNaN: case Op::LeakyRelu: case Op::Less:
    case Op::LessOrEqual: case Op::Log: case Op::Max: case Op::Mean: case Op::Min: case Op::Mish:
    case Op::Mod: case Op::Mul: case Op::Neg: case Op::Not: case Op::Or: case Op::Pow:
    case Op::PRelu: case Op::Reciprocal: case Op::Relu: case Op::Round: case Op::Selu:
    case Op::Shrink: case Op::Sigmoid: case Op::Sign: case Op::Sin: case Op::Sinh:
    case Op::Softplus: case Op::Softsign: case Op::Sqrt: case Op::Sub: case Op::Sum: case Op::Tan:
    case Op::Tanh: case Op::ThresholdedRelu: case Op::Where: case Op::Xor:
      return true;
    default:
      return false;
  }
}

// ---- small expression builders ----
Expr cst(const Expr& like, double v) { return make_const(like.type(), v); }
Expr cmp(CmpOp op, const Expr& a, const Expr& b) { return Compare::make(op, a, b); }
Expr sel(const Expr& c, const Expr& a, const Expr& b) { return Select::make(c, a, b); }
Expr call(Intrinsic fn, const Expr& a) { return Call::make(fn, {a}); }
Expr bin(BinaryOp op, const Expr& a, const Expr& b) { return Binary::make(op, a, b); }
bool is_fp(const Expr& e) { return e.type() == DType::Float32 || e.type() == DType::Float64; }
Expr is_nan(const Expr& a) { return cmp(CmpOp::NE, a, a); }
Expr either(const Expr& a, const Expr& b) { return bin(BinaryOp::Or, a, b); }

// max/min that return NaN when either side is NaN (numpy.maximum/minimum).
Expr max_nan(const Expr& a, const Expr& b) {
  Expr take_a = cmp(CmpOp::GT, a, b);
  return sel(is_fp(a) ? either(take_a, is_nan(a)) : take_a, a, b);
}
Expr min_nan(const Expr& a, const Expr& b) {
  Expr take_a = cmp(CmpOp::LT, a, b);
  return sel(is_fp(a) ? either(take_a, is_nan(a)) : take_a, a, b);
}
Expr abs_of(const Expr& a) {
  return is_fp(a) ? call(Intrinsic::Abs, a) : sel(cmp(CmpOp::LT, a, cst(a, 0)), cst(a, 0) - a, a);
}
Expr exp_(const Expr& a) { return call(Intrinsic::Exp, a); }

// Integer division that cannot trap: x / 0 gives 0 and INT_MIN / -1 wraps, as the interpreter's
// checked division does.
Expr safe_int_div(const Expr& a, const Expr& b, BinaryOp op) {
  Expr zero = cst(a, 0), one = cst(a, 1);
  Expr b_is_zero = cmp(CmpOp::EQ, b, zero);
  if (!is_signed(a.type())) return sel(b_is_zero, zero, bin(op, a, sel(b_is_zero, one, b)));
  Expr b_is_m1 = cmp(CmpOp::EQ, b, cst(a, -1));
  Expr safe_b = sel(either(b_is_zero, b_is_m1), one, b);
  Expr by_m1 = op == BinaryOp::Div ? zero - a : zero;
  return sel(b_is_zero, zero, sel(b_is_m1, by_m1, bin(op, a, safe_b)));
}

// Python-style modulus (the sign of the divisor) from a truncated one.
Expr floor_mod(const Expr& r, const Expr& b) {
  Expr zero = cst(r, 0);
  Expr fix = bin(BinaryOp::And, cmp(CmpOp::NE, r, zero),
                 cmp(CmpOp::NE, cmp(CmpOp::LT, r, zero), cmp(CmpOp::LT, b, zero)));
  return sel(fix, r + b, r);
}

Expr fold(const Args& args, Expr (*f)(const Expr&, const Expr&)) {
  Expr acc = args[0].value;
  for (size_t i = 1; i < args.size(); ++i) acc = f(acc, args[i].value);
  return acc;
}
Expr add(const Expr& a, const Expr& b) { return a + b; }

// y = clip(alpha * x + beta, 0, 1); NaN stays NaN, as in the interpreter.
Expr hard_sigmoid(const Expr& x, double alpha, double beta) {
  Expr v = cst(x, alpha) * x + cst(x, beta);
  return sel(cmp(CmpOp::LT, v, cst(x, 0)), cst(x, 0), sel(cmp(CmpOp::GT, v, cst(x, 1)), cst(x, 1), v));
}
// log(1 + exp(x)) without overflow: max(x, 0) + log1p(exp(-|x|)).
Expr softplus(const Expr& x) {
  Expr pos = sel(cmp(CmpOp::GT, x, cst(x, 0)), x, cst(x, 0));
  return pos + call(Intrinsic::Log1p, exp_(cst(x, 0) - abs_of(x)));
}

// The value of a Clip bound: the operand (opset >= 11) or the attribute (older opsets).
Expr clip_bound(const Node& node, const Args& args, size_t i, const char* attr, const Expr& x) {
  if (i < args.size() && args[i].present()) return args[i].value;
  if (node.has_attr(attr)) return cst(x, node.attr_float(attr, 0));
  return Expr();
}

DType cast_target(const Node& node, const Args& args) {
  DType to;
  if (node.op == Op::CastLike)
    to = args.at(1).dtype;
  else
    TERRACE_CHECK(dtype_from_onnx(int(node.attr_int("to")), &to), NotImplemented, node.describe(),
                  ": cast to ONNX type ", node.attr_int("to"));
  TERRACE_CHECK(!is_narrow(to), NotImplemented, node.describe(), ": cast to ", dtype_name(to),
                ", which has no compiled kernels (float8, int4/uint4, float4)");
  return to;
}

Expr lower_cast(const Node& node, const Args& args) {
  DType to = cast_target(node, args);
  TERRACE_CHECK(to != DType::String, NotImplemented, node.describe(), ": cast to string");
  if (compute_type(to) == to) return Cast::make(to, args[0].value);
  // To a 16-bit float: round to it, then compute on in float32.
  return Cast::make(DType::Float32, Cast::make(to, Cast::make(DType::Float32, args[0].value)));
}

// One elementwise op as an expression of its operands, by family: each family's switch gives an
// undefined Expr for an op outside it.
struct OpLowering {
  const Node& node;
  const Args& a;
  const Expr& x() const { return a[0].value; }
  const Expr& y() const { return a.at(1).value; }
  Expr alpha(double def) const { return cst(x(), node.attr_float("alpha", float(def))); }
  Expr c(double v) const { return cst(x(), v); }
  Expr lt0() const { return cmp(CmpOp::LT, x(), c(0)); }

  // Arithmetic, its folds over any number of operands, and the sign functions.
  Expr arithmetic() const {
    switch (node.op) {
      case Op::Identity: return x();
      case Op::Add: return x() + y();
      case Op::Sub: return x() - y();
      case Op::Mul: return x() * y();
      case Op::Div: return is_fp(x()) ? x() / y() : safe_int_div(x(), y(), BinaryOp::Div);
      case Op::Mod: {
        Expr r = is_fp(x()) ? Call::make(Intrinsic::Fmod, {x(), y()})
                            : safe_int_div(x(), y(), BinaryOp::Mod);
        return node.attr_int("fmod", 0) ? r : floor_mod(r, y());
      }
      case Op::Pow: {
        if (is_fp(x())) return Call::make(Intrinsic::Pow, {x(), Cast::make(x().type(), y())});
        Expr p = Call::make(Intrinsic::Pow, {Cast::make(DType::Float64, x()),
                                             Cast::make(DType::Float64, y())});
        return Cast::make(x().type(), p);
      }
      case Op::Sum: return fold(a, add);
      case Op::Mean: return fold(a, add) / c(double(a.size()));
      case Op::Max: return fold(a, max_nan);
      case Op::Min: return fold(a, min_nan);
      case Op::Neg: return Unary::make(UnaryOp::Neg, x());
      case Op::Abs: return abs_of(x());
      case Op::Sign:
        return sel(cmp(CmpOp::GT, x(), c(0)), c(1), sel(lt0(), c(-1), x()));
      case Op::Reciprocal: return c(1) / x();
      default: return Expr();
    }
  }

  // The activation functions, in the interpreter's forms.
  Expr activation() const {
    switch (node.op) {
      case Op::Relu: return sel(lt0(), c(0), x());
      case Op::LeakyRelu: return sel(lt0(), alpha(0.01) * x(), x());
      case Op::PRelu: return sel(lt0(), y() * x(), x());
      case Op::ThresholdedRelu:
        return sel(cmp(CmpOp::GT, x(), alpha(1.0)), x(), c(0));
      case Op::Shrink: {  // integers are shifted in double and converted back
        Expr v = is_fp(x()) ? x() : Cast::make(DType::Float64, x());
        Expr lambd = cst(v, node.attr_float("lambd", 0.5f)), bias = cst(v, node.attr_float("bias", 0.0f));
        Expr r = sel(cmp(CmpOp::LT, v, cst(v, 0) - lambd), v + bias,
                     sel(cmp(CmpOp::GT, v, lambd), v - bias, cst(v, 0)));
        return Cast::make(x().type(), r);
      }
      case Op::Clip: {
        Expr v = x(), lo = clip_bound(node, a, 1, "min", v), hi = clip_bound(node, a, 2, "max", v);
        if (lo.defined()) v = sel(cmp(CmpOp::LT, v, lo), lo, v);
        if (hi.defined()) v = sel(cmp(CmpOp::GT, v, hi), hi, v);
        return v;
      }
      case Op::Sigmoid: return call(Intrinsic::Sigmoid, x());
      case Op::HardSigmoid:
        return hard_sigmoid(x(), node.attr_float("alpha", 0.2f), node.attr_float("beta", 0.5f));
      case Op::HardSwish: return x() * hard_sigmoid(x(), 1.0 / 6.0, 0.5);
      case Op::Elu: return sel(lt0(), alpha(1.0) * (exp_(x()) - c(1)), x());
      case Op::Selu: {
        Expr al = alpha(1.67326319217681884765625);
        Expr gamma = c(node.attr_float("gamma", 1.05070102214813232421875f));
        return sel(cmp(CmpOp::GT, x(), c(0)), gamma * x(), gamma * (al * exp_(x()) - al));
      }
      case Op::Celu: {  // the interpreter's form: NaN stays NaN
        Expr al = alpha(1.0);
        return sel(cmp(CmpOp::GT, x(), c(0)), x(), al * (exp_(x() / al) - c(1)));
      }
      case Op::Softplus: return softplus(x());
      case Op::Softsign: return x() / (c(1) + abs_of(x()));
      case Op::Mish: return x() * call(Intrinsic::Tanh, softplus(x()));
      case Op::Gelu: {  // the interpreter's forms (interp/ops/elementwise_activation.cpp)
        std::string form = node.attr_string("approximate", "none");
        TERRACE_CHECK(form == "none" || form == "tanh", InvalidModel, node.describe(),
                      ": attribute 'approximate' must be \"none\" or \"tanh\"");
        if (form == "tanh")  // 0.5 x (1 + tanh z) = x sigmoid(2 z)
          return x() * call(Intrinsic::Sigmoid, c(1.5957691216057308) * (x() + c(0.044715) * x() * x() * x()));
        return c(0.5) * x() * (c(1) + call(Intrinsic::Erf, x() * c(0.7071067811865476)));
      }
      default: return Expr();
    }
  }

  // Tests, comparisons, logic and bitwise ops, Where and Cast.
  Expr logic() const {
    switch (node.op) {
      case Op::IsNaN: return is_nan(x());
      case Op::IsInf: {
        Expr inf = c(std::numeric_limits<double>::infinity());
        Expr pos = cmp(CmpOp::EQ, x(), inf), neg = cmp(CmpOp::EQ, x(), c(0) - inf);
        bool want_pos = node.attr_int("detect_positive", 1), want_neg = node.attr_int("detect_negative", 1);
        if (want_pos && want_neg) return either(pos, neg);
        return want_pos ? pos : want_neg ? neg : make_const(DType::Bool, 0);
      }
      case Op::Where: return sel(x(), y(), a.at(2).value);
      case Op::Cast: case Op::CastLike: return lower_cast(node, a);
      case Op::Equal: return cmp(CmpOp::EQ, x(), y());
      case Op::Less: return cmp(CmpOp::LT, x(), y());
      case Op::Greater: return cmp(CmpOp::GT, x(), y());
      case Op::LessOrEqual: return cmp(CmpOp::LE, x(), y());
      case Op::GreaterOrEqual: return cmp(CmpOp::GE, x(), y());
      case Op::And: case Op::BitwiseAnd: return bin(BinaryOp::And, x(), y());
      case Op::Or: case Op::BitwiseOr: return bin(BinaryOp::Or, x(), y());
      case Op::Xor: case Op::BitwiseXor: return bin(BinaryOp::Xor, x(), y());
      case Op::Not: return Unary::make(UnaryOp::Not, x());
      case Op::BitwiseNot: return Unary::make(UnaryOp::BitNot, x());
      case Op::BitShift: {
        bool left = node.attr_string("direction", "") == "LEFT";
        Expr bits = c(double(dtype_size(x().type()) * 8));
        Expr shifted = bin(left ? BinaryOp::Shl : BinaryOp::Shr, x(), sel(cmp(CmpOp::LT, y(), bits), y(), c(0)));
        return sel(cmp(CmpOp::LT, y(), bits), shifted, c(0));  // numpy: shifting out every bit gives 0
      }
      default: return Expr();
    }
  }
};

Expr lower_op(const Node& node, const Args& a) {
  const OpLowering lowering{node, a};
  if (Expr e = lowering.arithmetic(); e.defined()) return e;
  if (Expr e = lowering.activation(); e.defined()) return e;
  if (Expr e = lowering.logic(); e.defined()) return e;
  // The rest map one to one onto intrinsics.
  static const std::pair<Op, Intrinsic> kDirect[] = {
      {Op::Exp, Intrinsic::Exp},     {Op::Log, Intrinsic::Log},     {Op::Tanh, Intrinsic::Tanh},
      {Op::Erf, Intrinsic::Erf},     {Op::Sqrt, Intrinsic::Sqrt},   {Op::Sin, Intrinsic::Sin},
      {Op::Cos, Intrinsic::Cos},     {Op::Tan, Intrinsic::Tan},     {Op::Asin, Intrinsic::Asin},
      {Op::Acos, Intrinsic::Acos},   {Op::Atan, Intrinsic::Atan},   {Op::Sinh, Intrinsic::Sinh},
      {Op::Cosh, Intrinsic::Cosh},   {Op::Asinh, Intrinsic::Asinh}, {Op::Acosh, Intrinsic::Acosh},
      {Op::Atanh, Intrinsic::Atanh}, {Op::Floor, Intrinsic::Floor}, {Op::Ceil, Intrinsic::Ceil},
      {Op::Round, Intrinsic::Round}};
  for (const auto& [op, fn] : kDirect)
    if (op == node.op) return call(fn, lowering.x());
  fail(ErrorCode::NotImplemented, node.describe(), ": no tier-1 lowering");
}

// The operands must share the main operand's dtype except where the schema says otherwise.
bool operand_needs_same_type(Op op, size_t i) {
  switch (op) {
    case Op::Pow: case Op::Cast: case Op::CastLike: return false;
    case Op::Where: return i == 2;  // x and y agree; the condition is bool
    default: return i > 0;
  }
}

void check_operands(const Node& node, const Args& args) {
  TERRACE_CHECK(has_elementwise_lowering(node.op), NotImplemented, node.describe(),
                ": no tier-1 lowering");
  TERRACE_CHECK(!args.empty() && args[0].present(), NotImplemented, node.describe(),
                ": missing first input");
  size_t main = node.op == Op::Where ? 1 : 0;
  TERRACE_CHECK(args.size() > main && args[main].present(), NotImplemented, node.describe(),
                ": missing input ", main);
  DType t = args[main].dtype;
  TERRACE_CHECK(in_class(t, type_class(node.op)), NotImplemented, node.describe(), ": dtype ",
                dtype_name(t), " not supported by tier 1");
  if (node.op == Op::Where)
    TERRACE_CHECK(args[0].dtype == DType::Bool, NotImplemented, node.describe(), ": condition not bool");
  for (size_t i = 0; i < args.size(); ++i) {
    if (!args[i].present()) continue;
    TERRACE_CHECK(args[i].dtype != DType::String, NotImplemented, node.describe(), ": string input");
    if (operand_needs_same_type(node.op, i) && i != main)
      TERRACE_CHECK(args[i].dtype == t, NotImplemented, node.describe(), ": input ", i, " is ",
                    dtype_name(args[i].dtype), ", input ", main, " is ", dtype_name(t));
  }
  if (node.op == Op::Pow) {  // integer ** integer is exact repeated squaring: not lowered
    DType e = args.at(1).dtype;
    bool float_base = is_float(t), int_base = t == DType::Int32 || t == DType::Int64;
    TERRACE_CHECK((float_base && (is_float(e) || is_integer(e))) || (int_base && is_float(e)),
                  NotImplemented, node.describe(), ": Pow of ", dtype_name(t), " by ",
                  dtype_name(e), " not supported by tier 1");
  }
}

}  // namespace

DType elementwise_result_dtype(const Node& node, const std::vector<OperandValue>& operands) {
  check_operands(node, operands);
  switch (node.op) {
    case Op::Cast: case Op::CastLike: return cast_target(node, operands);
    case Op::Equal: case Op::Less: case Op::Greater: case Op::LessOrEqual:
    case Op::GreaterOrEqual: case Op::IsNaN: case Op::IsInf:
      return DType::Bool;
    case Op::Where: return operands[1].dtype;
    default: return operands[0].dtype;
  }
}

Expr lower_elementwise(const Node& node, const std::vector<OperandValue>& operands) {
  DType want = compute_type(elementwise_result_dtype(node, operands));
  Expr e = lower_op(node, operands);
  TERRACE_ASSERT(e.type() == want, node.describe(), " lowered to ", dtype_name(e.type()),
                 ", expected ", dtype_name(want));
  return e;
}

}  // namespace terrace::kernels
