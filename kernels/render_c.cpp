// render_c(): kernel IR -> C++ or CUDA C. The dialects differ only in the entries of DialectTraits
// and in how a loop header is spelled (loop_header).
#include "kernels/render_c.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>
#include <sstream>

#include "kernels/visitor.h"

namespace terrace::kernels {
namespace {

struct DialectTraits {
  const char* kernel_qualifier;
  const char* restrict_kw;
  bool buffers_as_array;         // void** buffers (C++) or one parameter per buffer (CUDA)
  const char* vectorize_pragma;  // before an innermost loop
};

const DialectTraits& traits(Dialect d) {
  // Four vectors in flight per iteration: LLVM's cost model declines to interleave a long math
  // chain (exp, a division), which then waits on its own latency. On one Zen 3 core,
  // bench/elementwise_bench's chain took 46 ms not interleaved, 36 by 2 (by 4 spilled registers
  // while tanh used exp), and with the rational tanh 28.5 by 2 and 20.6 by 4.
  static const DialectTraits cpp{"extern \"C\" void", "__restrict", true,
                                 "#pragma clang loop vectorize(enable) interleave_count(4)\n"};
  static const DialectTraits cuda{"extern \"C\" __global__ void", "__restrict__", false, ""};
  return d == Dialect::Cpp ? cpp : cuda;
}

const char* c_type(DType t) {
  switch (t) {
    case DType::Float32: return "float";
    case DType::Float64: return "double";
    case DType::Int8: return "int8_t";
    case DType::UInt8: return "uint8_t";
    case DType::Int16: return "int16_t";
    case DType::UInt16: return "uint16_t";
    case DType::Int32: return "int32_t";
    case DType::UInt32: return "uint32_t";
    case DType::Int64: return "int64_t";
    case DType::UInt64: return "uint64_t";
    case DType::Bool: return "bool";
    case DType::Float16: case DType::BFloat16: return "uint16_t";  // storage bits
    default: fail(ErrorCode::NotImplemented, "render_c: dtype ", dtype_name(t));
  }
}

// The unsigned type signed integer arithmetic wraps in (C leaves signed overflow undefined; the
// interpreter wraps).
const char* wrap_type(DType t) {
  switch (t) {
    case DType::Int8: case DType::Int16: case DType::Int32: return "uint32_t";
    case DType::Int64: return "uint64_t";
    default: return nullptr;
  }
}

std::string float_literal(double v, DType t) {
  const char* f = t == DType::Float32 ? "f" : "";
  if (std::isnan(v)) return std::string("(0.0") + f + " / 0.0" + f + ")";
  if (std::isinf(v)) return std::string(v < 0 ? "(-1.0" : "(1.0") + f + " / 0.0" + f + ")";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", v);  // hex: exact
  return std::string(buf) + f;
}

std::string int_literal(int64_t v, DType t) {
  if (t == DType::Bool) return v ? "true" : "false";
  std::string lit = v == std::numeric_limits<int64_t>::min() ? "(-9223372036854775807LL - 1)"
                                                             : std::to_string(v) + "LL";
  return std::string("((") + c_type(t) + ")" + lit + ")";
}

std::string lower_name(const char* s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Buffers the body stores to (the others are declared const).
class StoredBuffers : public IRVisitor {
 public:
  std::set<int> slots;
  using IRVisitor::visit;

 protected:
  void visit_node(const Store* op) override {
    slots.insert(op->buffer.slot);
    IRVisitor::visit_node(op);
  }
};

bool has_loop(const Stmt& s) {
  struct Finder : IRVisitor {
    bool found = false;
    void visit_node(const For*) override { found = true; }
  } f;
  f.visit(s);
  return f.found;
}

class CRenderer : public IRVisitor {
 public:
  CRenderer(std::ostream& os, Dialect d) : os_(os), dialect_(d), traits_(traits(d)) {}

  std::string print(const Expr& e) {
    visit(e);
    return std::move(expr_);
  }
  void emit(const Stmt& s) { visit(s); }
  void indent(int n) { indent_ = n; }

 protected:
  void visit_node(const IntImm* op) override { expr_ = int_literal(op->value, op->type); }
  void visit_node(const FloatImm* op) override { expr_ = float_literal(op->value, op->type); }
  void visit_node(const Var* op) override { expr_ = op->name; }
  void visit_node(const Load* op) override {
    expr_ = op->buffer.name + "[" + print(op->index) + "]";
  }
  void visit_node(const Unary* op) override {
    std::string a = print(op->a);
    const char* w = wrap_type(op->type);
    if (op->op == UnaryOp::Neg && w)
      expr_ = cast(op->type, std::string("(0u - (") + w + ")" + a + ")");
    else
      expr_ = cast_if_int(op->type, std::string("(") + unary_op_name(op->op) + a + ")");
  }
  void visit_node(const Binary* op) override {
    std::string a = print(op->a), b = print(op->b);
    const char* w = wrap_type(op->type);
    bool wraps = w && (op->op == BinaryOp::Add || op->op == BinaryOp::Sub || op->op == BinaryOp::Mul);
    if (wraps) {
      a = std::string("(") + w + ")" + a;
      b = std::string("(") + w + ")" + b;
    }
    // Integer promotion makes a op b an int for small types; convert back to the node's type.
    expr_ = cast_if_int(op->type, "(" + a + " " + binary_op_name(op->op) + " " + b + ")");
  }
  void visit_node(const Compare* op) override {
    expr_ = "(" + print(op->a) + " " + cmp_op_name(op->op) + " " + print(op->b) + ")";
  }
  void visit_node(const Select* op) override {
    expr_ = "(" + print(op->cond) + " ? " + print(op->true_value) + " : " +
            print(op->false_value) + ")";
  }
  void visit_node(const Cast* op) override { expr_ = convert(op->value.type(), op->type, print(op->value)); }
  void visit_node(const Call* op) override {
    std::string s = "tr_" + lower_name(intrinsic_name(op->fn)) +
                    (op->args[0].type() == DType::Float32 ? "_f32(" : "_f64(");
    for (size_t i = 0; i < op->args.size(); ++i) s += (i ? ", " : "") + print(op->args[i]);
    expr_ = s + ")";
  }

  void visit_node(const For* op) override {
    bool innermost = !has_loop(op->body);
    if (innermost && (op->for_kind == ForKind::Vectorized || op->for_kind == ForKind::Parallel))
      line() << traits_.vectorize_pragma;
    line() << loop_header(op) << " {\n";
    ++indent_;
    visit(op->body);
    --indent_;
    line() << "}\n";
  }
  void visit_node(const Store* op) override {
    line() << op->buffer.name << "[" << print(op->index) << "] = " << print(op->value) << ";\n";
  }
  // Let bodies stay in the enclosing C scope: verify() guarantees every name is bound once.
  void visit_node(const LetStmt* op) override {
    line() << "const " << c_type(op->value.type()) << " " << op->name << " = " << print(op->value)
           << ";\n";
    visit(op->body);
  }
  // A local array in the enclosing C scope (names are unique, as for LetStmt).
  void visit_node(const Allocate* op) override {
    line() << c_type(op->buffer.dtype) << " " << op->buffer.name << "[" << op->extent << "];\n";
    visit(op->body);
  }
  void visit_node(const IfThenElse* op) override {
    line() << "if (" << print(op->cond) << ") {\n";
    nested(op->then_case);
    if (op->else_case.defined()) {
      line() << "} else {\n";
      nested(op->else_case);
    }
    line() << "}\n";
  }

 private:
  std::ostream& line() { return os_ << std::string(size_t(2 * indent_), ' '); }
  void nested(const Stmt& s) {
    ++indent_;
    visit(s);
    --indent_;
  }

  static std::string cast(DType t, const std::string& e) {
    return std::string("((") + c_type(t) + ")" + e + ")";
  }
  static std::string cast_if_int(DType t, const std::string& e) {
    return is_integer(t) ? cast(t, e) : e;
  }

  std::string loop_header(const For* op) {
    std::string v = op->var, b = print(op->begin), e = print(op->end);
    if (dialect_ == Dialect::Cuda) {
      switch (op->for_kind) {
        case ForKind::Parallel:  // a grid-stride loop over [begin, end)
          return "for (int64_t " + v + " = " + b + " + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; " +
                 v + " < " + e + "; " + v + " += (int64_t)gridDim.x * blockDim.x)";
        case ForKind::GpuBlock:
          return "for (int64_t " + v + " = " + b + " + blockIdx.x; " + v + " < " + e + "; " + v +
                 " += gridDim.x)";
        case ForKind::GpuThread:
          return "for (int64_t " + v + " = " + b + " + threadIdx.x; " + v + " < " + e + "; " + v +
                 " += blockDim.x)";
        default: break;
      }
    } else {
      TERRACE_ASSERT(op->for_kind != ForKind::GpuBlock && op->for_kind != ForKind::GpuThread,
                     "GPU loop '", op->var, "' in a C++ kernel");
    }
    return "for (int64_t " + v + " = " + b + "; " + v + " < " + e + "; ++" + v + ")";
  }

  // ONNX Cast semantics between compute and storage types.
  std::string convert(DType from, DType to, const std::string& e) {
    if (from == DType::Float16 || from == DType::BFloat16) {
      TERRACE_ASSERT(to == DType::Float32, "16-bit floats are only widened to float32");
      return (from == DType::Float16 ? "tr_h2f(" : "tr_bf2f(") + e + ")";
    }
    if (to == DType::Float16 || to == DType::BFloat16) {
      std::string f = from == DType::Float32 ? e : cast(DType::Float32, convert(from, DType::Float32, e));
      return (to == DType::Float16 ? "tr_f2h(" : "tr_f2bf(") + f + ")";
    }
    if (to == DType::Bool) return "(" + e + " != 0)";
    if (is_float(from) && is_integer(to)) return saturating(from, to, e);
    return cast(to, e);
  }

  std::string saturating(DType from, DType to, const std::string& e) {
    double lo = 0, hi = 0;
    dispatch_dtype(to, [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_integral_v<T>) {
        lo = double(std::numeric_limits<T>::lowest());
        hi = double(std::numeric_limits<T>::max());
      }
    });
    int64_t tlo = 0, tmax = 0;  // the integer ends (not int64_t(hi): 2^63 overflows int64)
    dispatch_dtype(to, [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_integral_v<T>) tlo = int64_t(std::numeric_limits<T>::lowest());
      if constexpr (std::is_integral_v<T> && !std::is_same_v<T, uint64_t>)
        tmax = int64_t(std::numeric_limits<T>::max());
    });
    // The upper end of uint64 does not fit int64: spell it as ~0.
    std::string thi = to == DType::UInt64 ? "(~(uint64_t)0)" : int_literal(tmax, to);
    return std::string("tr_sat_cast<") + c_type(to) + ", " + c_type(from) + ">(" + e + ", " +
           float_literal(lo, from) + ", " + float_literal(hi, from) + ", " + int_literal(tlo, to) +
           ", " + thi + ")";
  }

  std::ostream& os_;
  Dialect dialect_;
  const DialectTraits& traits_;
  std::string expr_;
  int indent_ = 1;
};

}  // namespace

std::string render_c(const LoweredFunc& f, Dialect dialect) {
  const DialectTraits& t = traits(dialect);
  StoredBuffers stored;
  stored.visit(f.body);
  std::ostringstream os;
  auto decl = [&](const Buffer& b) {
    bool is_const = stored.slots.count(b.slot) == 0;
    return std::string(is_const ? "const " : "") + c_type(b.dtype) + "* " + t.restrict_kw + " " + b.name;
  };
  os << t.kernel_qualifier << " " << f.name << "(";
  if (t.buffers_as_array) {
    os << "void** buffers, int64_t begin, int64_t end) {\n";
    for (const Buffer& b : f.buffers)
      os << "  " << decl(b) << " = (" << (stored.slots.count(b.slot) ? "" : "const ")
         << c_type(b.dtype) << "*)buffers[" << b.slot << "];\n";
  } else {
    for (const Buffer& b : f.buffers) os << decl(b) << ", ";
    os << "int64_t begin, int64_t end) {\n";
  }
  CRenderer r(os, dialect);
  r.emit(f.body);
  os << "}\n";
  std::string kernel = os.str();
  return "// Generated by Terrace from kernel " + f.name + ".\n" + render_prelude(dialect, kernel) +
         "\n" + kernel;
}

}  // namespace terrace::kernels
