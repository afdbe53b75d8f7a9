// Symbolic lowering by sampling (tiers/symbolic_lowering.h): lower at many sizes, check that the
// lowerings differ in integer constants only, fit each constant as a polynomial of the size, and
// rewrite the lowering at the largest size so that its kernels compute those constants at run time.
#include "tiers/symbolic_lowering.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <sstream>

#include "kernels/mutator.h"
#include "kernels/printer.h"

namespace terrace {

using kernels::Expr;
using kernels::Stmt;

std::string SymbolicDim::describe() const {
  std::string s;
  for (auto [i, d] : positions) s += (s.empty() ? "" : ", ") + ("input " + std::to_string(i) + " dim " + std::to_string(d));
  for (int i : values) s += ", the value of input " + std::to_string(i);
  return s;
}

ScalarValues scalar_values(const std::vector<Tensor>& in) {
  ScalarValues out;
  for (const Tensor& t : in) {
    std::optional<int64_t> v;
    if (t.numel() == 1 && !t.on_device() && t.dtype() == DType::Int64) v = t.data<int64_t>()[0];
    if (t.numel() == 1 && !t.on_device() && t.dtype() == DType::Int32) v = t.data<int32_t>()[0];
    out.push_back(v);
  }
  return out;
}

std::optional<SymbolicDim> find_symbolic_dim(const std::vector<Signature>& sigs, const std::vector<ScalarValues>& values,
                                             std::string& why) {
  if (sigs.size() < 2) {
    why = "fewer than two signatures";
    return std::nullopt;
  }
  const Signature& first = sigs.front();
  // Per varying position, its sizes across the signatures; positions varying alike share a symbol.
  std::vector<std::pair<std::vector<int64_t>, std::pair<int, int>>> varying;
  for (const Signature& s : sigs) {
    if (s.size() != first.size()) {
      why = "the input count varies";
      return std::nullopt;
    }
    for (size_t i = 0; i < s.size(); ++i)
      if (s.dtype(i) != first.dtype(i) || s.shape(i).size() != first.shape(i).size()) {
        why = "input " + std::to_string(i) + "'s dtype or rank varies";
        return std::nullopt;
      }
  }
  for (size_t i = 0; i < first.size(); ++i)
    for (size_t d = 0; d < first.shape(i).size(); ++d) {
      std::vector<int64_t> sizes;
      for (const Signature& s : sigs) sizes.push_back(s.shape(i)[d]);
      if (std::all_of(sizes.begin(), sizes.end(), [&](int64_t v) { return v == sizes.front(); })) continue;
      varying.push_back({sizes, {int(i), int(d)}});
    }
  if (varying.empty()) {
    why = "no dim varies";
    return std::nullopt;
  }
  SymbolicDim sym;
  for (const auto& [sizes, pos] : varying) {
    if (sizes != varying.front().first) {
      why = "two dims vary independently (input " + std::to_string(varying.front().second.first) + " dim " +
            std::to_string(varying.front().second.second) + ", input " + std::to_string(pos.first) + " dim " +
            std::to_string(pos.second) + "): one symbol per region for now";
      return std::nullopt;
    }
    sym.positions.push_back(pos);
  }
  std::sort(sym.positions.begin(), sym.positions.end());
  sym.observed = varying.front().first;
  if (values.size() == sigs.size())
    for (size_t i = 0; i < first.size(); ++i) {
      bool holds = true;
      for (size_t k = 0; k < sigs.size() && holds; ++k)
        holds = i < values[k].size() && values[k][i] == sym.observed[k];
      if (holds) sym.values.push_back(int(i));
    }
  std::sort(sym.observed.begin(), sym.observed.end());
  return sym;
}

std::vector<Tensor> inputs_at(const std::vector<Tensor>& example, const SymbolicDim& sym, int64_t d) {
  std::vector<Shape> shapes;
  for (const Tensor& t : example) shapes.push_back(t.shape());
  for (auto [i, k] : sym.positions) shapes[size_t(i)][size_t(k)] = d;
  std::vector<Tensor> out;  // an input the symbol is not in keeps its contents (a small one's are real)
  for (size_t i = 0; i < example.size(); ++i)
    out.push_back(shapes[i] == example[i].shape() ? example[i] : Tensor::empty(example[i].dtype(), shapes[i]));
  for (int i : sym.values) {  // holds the size itself
    Tensor& t = out[size_t(i)];
    t = Tensor::empty(t.dtype(), t.shape());
    if (t.dtype() == DType::Int64) t.data<int64_t>()[0] = d;
    else t.data<int32_t>()[0] = int32_t(d);
  }
  return out;
}

namespace {

// Every non-bool integer constant replaced by 0, its value appended to `ints` (in visit order).
class ZeroInts : public kernels::IRMutator {
 public:
  explicit ZeroInts(std::vector<int64_t>& ints) : ints_(ints) {}
  using IRMutator::mutate;

 protected:
  Expr visit(const kernels::IntImm* op, const Expr& self) override {
    if (op->type == DType::Bool) return self;
    ints_.push_back(op->value);
    return kernels::IntImm::make(op->type, 0);
  }

 private:
  std::vector<int64_t>& ints_;
};

// The constants that vary (their polynomials, in ZeroInts' order) as expressions of Var `d`.
class SymbolizeInts : public kernels::IRMutator {
 public:
  SymbolizeInts(const std::vector<Poly>& polys, size_t at, int64_t hi) : polys_(polys), at_(at), hi_(hi) {}
  using IRMutator::mutate;
  size_t at() const { return at_; }

 protected:
  Expr visit(const kernels::IntImm* op, const Expr& self) override {
    if (op->type == DType::Bool) return self;
    const Poly& p = polys_.at(at_++);
    TERRACE_CHECK(p.at(hi_) == op->value, InvalidArgument, "symbolic lowering: constants out of step");
    if (p.constant()) return self;
    const Expr d = kernels::Var::make(DType::Int64, "sym_d");
    Expr e;
    auto add = [&](int64_t c, Expr term) {
      if (!c) return;
      term = c == 1 ? term : kernels::make_index(c) * term;
      e = e.defined() ? e + term : term;
    };
    add(p.a2, d * d);
    add(p.a1, d);
    if (p.modulus) {
      const Expr q = kernels::Binary::make(kernels::BinaryOp::Div, d, kernels::make_index(p.modulus));
      const Expr r = kernels::Binary::make(kernels::BinaryOp::Mod, d, kernels::make_index(p.modulus));
      add(p.qq, q * q);
      add(p.qr, q * r);
      add(p.rr, r * r);
      add(p.q1, q);
      add(p.r1, r);
    }
    if (p.a0) e = e + kernels::make_index(p.a0);
    return kernels::Cast::make(op->type, e);
  }

 private:
  const std::vector<Poly>& polys_;
  size_t at_;
  int64_t hi_;
};

// One lowering reduced to what must not vary (`print`) and the integers that may.
struct Sample {
  int64_t d = 0;
  std::string print;
  std::vector<int64_t> ints;
  std::vector<Tensor> constants;  // the lowering's computed constants (compared after the fit)
};

bool small_integers(const Tensor& c) {
  return (c.dtype() == DType::Int64 || c.dtype() == DType::Int32) && c.numel() <= 16;
}

Sample describe(const LoweredRegion& l, const SymbolicDim& sym, int64_t d) {
  Sample s{d, {}, {}, {}};
  std::ostringstream os;
  // Value inputs other than the size keep the example's contents (the version guards them by value).
  os << "value inputs";
  for (int i : l.value_inputs) os << " " << i;
  os << "\n";
  for (size_t k = 0; k < l.slots.size(); ++k) {
    os << "slot " << dtype_name(l.slots[k].dtype) << " rank " << l.slots[k].shape.size() << " alias " << l.alias[k] << "\n";
    for (int64_t v : l.slots[k].shape) s.ints.push_back(v);
  }
  for (const Tensor& c : l.constants) {
    if (small_integers(c)) {  // a shape vector: its elements may be the size's polynomials
      os << "constant " << dtype_name(c.dtype()) << shape_str(c.shape()) << "\n";
      for (int64_t k = 0; k < c.numel(); ++k)
        s.ints.push_back(c.dtype() == DType::Int64 ? c.data<int64_t>()[k] : c.data<int32_t>()[k]);
      continue;
    }
    if (c.dtype() == DType::String) {
      os << "constant string" << shape_str(c.shape()) << "\n";
      continue;
    }
    // Its shape is its slot's (in the ints); its contents are checked once the range is known: a
    // prefix of the largest size's (the first d rows of a position table, gathered at compile time).
    os << "constant " << dtype_name(c.dtype()) << " rank " << c.rank() << "\n";
  }
  s.constants = l.constants;
  for (const LoweredStep& st : l.steps) {
    os << "step " << int(st.kind) << " " << st.node << " error " << st.error_slot << st.check_first << st.check_last
       << st.error_message << " slots";
    for (int x : st.slots) os << " " << x;
    os << "\n";
    if (st.kind != LoweredStep::Kind::Kernel) continue;
    for (const kernels::Buffer& b : st.func.buffers) os << b.name << ":" << dtype_name(b.dtype) << "@" << b.slot << " ";
    s.ints.push_back(st.func.parallel_extent);
    s.ints.push_back(st.func.work_per_iteration);
    ZeroInts z(s.ints);
    os << "\n" << kernels::to_string(z.mutate(st.func.body));
  }
  s.print = os.str();
  return s;
}

// The polynomial through (x, f(x)) at three consecutive sizes, or nullopt when its coefficients
// are not integers.
std::optional<Poly> fit(int64_t x, int64_t f0, int64_t f1, int64_t f2) {
  const int64_t second = f2 - 2 * f1 + f0;
  if (second % 2) return std::nullopt;
  Poly p;
  p.a2 = second / 2;
  p.a1 = f1 - f0 - p.a2 * (2 * x + 1);
  p.a0 = f0 - p.a2 * x * x - p.a1 * x;
  return p;
}

// The quasi-polynomial of `ints[k]` over `samples` (one residue class by `modulus`): coefficients
// of q^2, q*r, r^2, q, r, 1 solved exactly over the rationals from all samples (the columns that
// vanish on the class dropped), integers, and exact at every sample; or nullopt.
std::optional<Poly> fit_class(const std::vector<Sample>& samples, size_t k, int64_t modulus) {
  using I = __int128;
  struct Q {  // a rational
    I n = 0, d = 1;
  };
  auto norm = [](Q x) {
    if (x.d < 0) x.n = -x.n, x.d = -x.d;
    I a = x.n < 0 ? -x.n : x.n, b = x.d;
    while (b) {
      a %= b;
      std::swap(a, b);
    }
    if (a > 1) x.n /= a, x.d /= a;
    return x;
  };
  auto sub = [&](Q a, Q b) { return norm({a.n * b.d - b.n * a.d, a.d * b.d}); };
  auto mul = [&](Q a, Q b) { return norm({a.n * b.n, a.d * b.d}); };
  auto div = [&](Q a, Q b) { return norm({a.n * b.d, a.d * b.n}); };
  std::vector<std::vector<Q>> rows;
  for (const Sample& s : samples) {
    const I q = s.d / modulus, r = s.d % modulus;
    rows.push_back({{q * q}, {q * r}, {r * r}, {q}, {r}, {1}, {s.ints[k]}});
  }
  const size_t cols = 6;
  std::vector<int> pivot_of(cols, -1);
  size_t row = 0;
  for (size_t c = 0; c < cols && row < rows.size(); ++c) {
    size_t p = row;
    while (p < rows.size() && rows[p][c].n == 0) ++p;
    if (p == rows.size()) continue;  // a column that vanishes (or depends on the others): coefficient 0
    std::swap(rows[p], rows[row]);
    for (size_t i = 0; i < rows.size(); ++i) {
      if (i == row || rows[i][c].n == 0) continue;
      const Q f = div(rows[i][c], rows[row][c]);
      for (size_t j = c; j <= cols; ++j) rows[i][j] = sub(rows[i][j], mul(f, rows[row][j]));
    }
    pivot_of[c] = int(row++);
  }
  int64_t coef[6] = {};
  for (size_t c = 0; c < cols; ++c) {
    if (pivot_of[c] < 0) continue;
    const Q v = div(rows[size_t(pivot_of[c])][cols], rows[size_t(pivot_of[c])][c]);
    if (v.d != 1 || v.n > I(INT64_MAX) || v.n < I(INT64_MIN)) return std::nullopt;
    coef[c] = int64_t(v.n);
  }
  Poly p;
  p.modulus = modulus;
  p.qq = coef[0], p.qr = coef[1], p.rr = coef[2], p.q1 = coef[3], p.r1 = coef[4], p.a0 = coef[5];
  for (const Sample& s : samples)
    if (p.at(s.d) != s.ints[k]) return std::nullopt;
  return p;
}

// The sizes to lower at: every one up to 17, the powers of two and their neighbours, the
// sizes seen, and hi.
std::vector<int64_t> sample_sizes(const SymbolicDim& sym) {
  std::set<int64_t> s;
  for (int64_t v = sym.lo; v <= 17; ++v) s.insert(v);  // contiguous: a schedule may change anywhere here
  for (int64_t p = 4; p <= sym.hi; p *= 2)
    for (int64_t v : {p - 1, p, p + 1}) s.insert(v);
  for (int64_t v : {5, 7, 9, 13, 100}) s.insert(v);
  for (int64_t v : sym.observed) s.insert(v);
  s.insert(sym.hi);
  std::vector<int64_t> out;
  for (int64_t v : s)
    if (v >= sym.lo && v <= sym.hi) out.push_back(v);
  return out;
}

bool is_failed(const Sample& s) { return s.print.rfind("failed: ", 0) == 0; }

// The run of sampled sizes around the largest size seen that lower to its program: a schedule
// may change at small sizes, and a model may take no larger ones (a position table's length).
// Empty, and why, when it has no three consecutive sizes to start its fit from.
std::vector<Sample> contiguous_run(const std::vector<Sample>& samples, SymbolicDim& sym, std::string& why) {
  size_t anchor = 0;
  while (samples[anchor].d != sym.observed.back()) ++anchor;
  const Sample& seen = samples[anchor];
  if (is_failed(seen)) {
    why = "lowering at size " + std::to_string(seen.d) + " " + seen.print;
    return {};
  }
  auto same = [&](const Sample& s) { return s.print == seen.print && s.ints.size() == seen.ints.size(); };
  size_t first = anchor, last = anchor;
  while (first > 0 && same(samples[first - 1])) --first;
  while (last + 1 < samples.size() && same(samples[last + 1])) ++last;
  std::vector<Sample> run(samples.begin() + long(first), samples.begin() + long(last) + 1);
  if (run.size() < 4 || run[1].d != run[0].d + 1 || run[2].d != run[0].d + 2) {
    why = "the lowering at size " + std::to_string(first > 0 ? samples[first - 1].d : 0) + " is another program than at " +
          std::to_string(seen.d) + " (a schedule, a float constant or a step that depends on the size)";
    return {};
  }
  sym.lo = run.front().d;
  sym.hi = run.back().d;
  return run;
}

// A tiled schedule lowers sizes divisible by its tile to one program and the others to another
// (a remainder loop): the run, among the sizes of one residue class, around the largest size seen
// in the class that holds most of them, for the smallest modulus that gives one of at least 8.
std::vector<Sample> class_run(const std::vector<Sample>& samples, SymbolicDim& sym, std::string& why) {
  const int64_t forced = sym.modulus;  // the other class of a version already published
  for (int64_t t : {2, 4, 8, 16, 32, 64}) {
    if (forced && t != forced) continue;
    int64_t divisible = 0;
    for (int64_t d : sym.observed) divisible += d % t == 0;
    const bool cls = forced ? sym.divisible : 2 * divisible > int64_t(sym.observed.size());
    int64_t largest = -1;
    for (int64_t d : sym.observed)
      if ((d % t == 0) == cls) largest = d;
    std::vector<Sample> in;
    for (const Sample& s : samples)
      if ((s.d % t == 0) == cls) in.push_back(s);
    size_t anchor = 0;
    while (anchor < in.size() && in[anchor].d != largest) ++anchor;
    if (anchor == in.size() || is_failed(in[anchor])) continue;
    auto same = [&](const Sample& s) { return s.print == in[anchor].print && s.ints.size() == in[anchor].ints.size(); };
    size_t first = anchor, last = anchor;
    while (first > 0 && same(in[first - 1])) --first;
    while (last + 1 < in.size() && same(in[last + 1])) ++last;
    if (last - first + 1 < 8) continue;
    sym.modulus = t;
    sym.divisible = cls;
    sym.lo = in[first].d;
    sym.hi = in[last].d;
    return std::vector<Sample>(in.begin() + long(first), in.begin() + long(last) + 1);
  }
  why = "no residue class of its sizes lowers to one program either";
  return {};
}

}  // namespace

bool in_class(const SymbolicDim& sym, int64_t d) {
  return !sym.modulus || (d % sym.modulus == 0) == sym.divisible;
}

namespace {

// Each fitted integer of `run` as a function of the size, or nullopt and why.
std::optional<std::vector<Poly>> fit_all(const std::vector<Sample>& run, const SymbolicDim& sym, std::string& why) {
  std::vector<Poly> polys(run.front().ints.size());
  for (size_t k = 0; k < polys.size(); ++k) {
    std::optional<Poly> p = sym.modulus ? fit_class(run, k, sym.modulus)
                                        : fit(run[0].d, run[0].ints[k], run[1].ints[k], run[2].ints[k]);
    bool ok = p.has_value();
    for (const Sample& s : run) ok = ok && p->at(s.d) == s.ints[k];
    if (!ok) {
      why = "integer constant " + std::to_string(k) + " of the lowering is no polynomial of degree <= 2 of the size" +
            (sym.modulus ? " and its quotient and remainder by " + std::to_string(sym.modulus) : std::string());
      return std::nullopt;
    }
    polys[k] = *p;
  }
  return polys;
}

// True when every computed constant of `samples` (other than the fitted small integers) is a
// prefix of its value in `top`, the range's largest size, which the version holds.
bool prefixes_of(const std::vector<Sample>& samples, const Sample& top, std::string& why) {
  for (size_t c = 0; c < top.constants.size(); ++c) {
    const Tensor& big = top.constants[c];
    if (small_integers(big)) continue;
    for (const Sample& s : samples) {
      const Tensor& t = s.constants.at(c);
      const bool strings = t.dtype() == DType::String;
      const size_t bytes = size_t(t.numel()) * dtype_size(t.dtype());
      if (t.numel() > big.numel() || t.dtype() != big.dtype() ||
          (strings ? t.numel() != big.numel() || t.str() != big.str() : std::memcmp(t.raw(), big.raw(), bytes) != 0)) {
        why = "a constant computed at compile time at size " + std::to_string(s.d) + " is no prefix of its value at " +
              std::to_string(top.d);
        return false;
      }
    }
  }
  return true;
}

// The lowering at sym.hi with its kernels reading the size from a parameter (the fitted integers
// `polys`, in describe()'s order), or nullopt and why.
std::optional<SymbolicLowering> symbolize(LoweredRegion lowered, const std::vector<Poly>& polys, const SymbolicDim& sym,
                                          std::string& why) {
  SymbolicLowering out;
  out.lowered = std::move(lowered);
  LoweredRegion& l = out.lowered;
  size_t at = 0;
  for (const kernels::TensorSig& s : l.slots) {
    out.slot_dims.emplace_back(polys.begin() + long(at), polys.begin() + long(at + s.shape.size()));
    at += s.shape.size();
  }
  // The arena is planned at hi: no size the version takes may need more (checked at each of them).
  for (const auto& dims : out.slot_dims) {
    int64_t top_size = 1;
    for (const Poly& p : dims) top_size *= p.at(sym.hi);
    for (int64_t d = sym.lo; d <= sym.hi; ++d) {
      if (!in_class(sym, d)) continue;
      int64_t size = 1;
      for (const Poly& p : dims) size *= p.at(d);
      if (size > top_size || size < 0) {
        why = "a value's size at " + std::to_string(d) + " exceeds its size at " + std::to_string(sym.hi);
        return std::nullopt;
      }
    }
  }
  for (size_t i = 0; i < l.constants.size(); ++i) {
    if (!small_integers(l.constants[i])) continue;
    std::vector<Poly> elements(polys.begin() + long(at), polys.begin() + long(at) + l.constants[i].numel());
    at += size_t(l.constants[i].numel());
    if (std::any_of(elements.begin(), elements.end(), [](const Poly& p) { return !p.constant(); }))
      out.constants.emplace_back(int(i), std::move(elements));
  }
  out.dims_slot = l.add_slot({DType::Int64, {1}});
  out.slot_dims.push_back({Poly{0, 0, 1}});
  for (LoweredStep& st : l.steps) {
    out.extents.emplace_back();
    out.work.emplace_back();
    if (st.kind != LoweredStep::Kind::Kernel) continue;
    out.extents.back() = polys[at++];
    out.work.back() = polys[at++];
    SymbolizeInts sub(polys, at, sym.hi);
    Stmt body = sub.mutate(st.func.body);
    at = sub.at();
    const kernels::Buffer dims{"sym_dims", DType::Int64, int(st.func.buffers.size())};
    st.func.buffers.push_back(dims);
    st.slots.push_back(out.dims_slot);
    st.func.body = kernels::LetStmt::make("sym_d", kernels::Load::make(dims, kernels::make_index(0)), body);
  }
  TERRACE_CHECK(at == polys.size(), InvalidArgument, "symbolic lowering: constants left over");
  return out;
}

}  // namespace

std::optional<SymbolicLowering> lower_symbolic(const Graph& g, const Region& region, const std::vector<Tensor>& example,
                                               SymbolicDim& sym, std::string& why) {
  // Size 1 often lowers as a broadcast of its own; the version then starts at 2 (guarded).
  sym.lo = 2;
  int64_t top = 64;
  while (top < 2 * sym.observed.back()) top *= 2;
  sym.hi = std::min<int64_t>(top, 2048);  // lowering allocates inputs at each size
  if (sym.observed.back() > sym.hi || sym.observed.front() < 1) {
    why = "sizes beyond [1, 2048]";
    return std::nullopt;
  }
  auto sample = [&](int64_t d) { return describe(lower_region(g, region, inputs_at(example, sym, d)), sym, d); };
  std::vector<Sample> samples;  // in increasing size; a failed lowering's print says why
  for (int64_t d : sample_sizes(sym)) {
    try {
      samples.push_back(sample(d));
    } catch (const std::exception& e) {
      samples.push_back({d, std::string("failed: ") + e.what(), {}, {}});
    }
  }
  std::vector<Sample> run = sym.modulus ? std::vector<Sample>() : contiguous_run(samples, sym, why);
  if (run.empty()) {
    std::string class_why;
    run = class_run(samples, sym, class_why);
    if (!class_why.empty()) why += "; " + class_why;
  }
  if (run.empty()) return std::nullopt;
  why.clear();
  std::optional<std::vector<Poly>> polys = fit_all(run, sym, why);
  if (!polys || !prefixes_of(run, run.back(), why)) return std::nullopt;
  // Size 1 joins when it lowers to the same program and constants (a lowering usually folds a
  // size-1 dim's strides away: then size 1 is left to exact versions).
  if (sym.lo == 2 && !sym.modulus) try {
      Sample one = sample(1);
      bool same = one.print == run.front().print && one.ints.size() == polys->size();
      for (size_t k = 0; same && k < polys->size(); ++k) same = (*polys)[k].at(1) == one.ints[k];
      std::string ignored;
      if (same && prefixes_of({one}, run.back(), ignored)) sym.lo = 1;
    } catch (const std::exception&) {
    }
  std::optional<SymbolicLowering> out =
      symbolize(lower_region(g, region, inputs_at(example, sym, sym.hi)), *polys, sym, why);
  if (out) out->samples = int(run.size()) + 1;
  return out;
}

}  // namespace terrace
