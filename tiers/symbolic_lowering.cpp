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
    auto add = [&](Expr term) { e = e.defined() ? e + term : term; };
    if (p.a2) add(kernels::make_index(p.a2) * d * d);
    if (p.a1) add(p.a1 == 1 ? d : kernels::make_index(p.a1) * d);
    if (p.a0) add(kernels::make_index(p.a0));
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
};

uint64_t fnv(const void* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const unsigned char*>(p)[i]) * 1099511628211ull;
  return h;
}

bool small_integers(const Tensor& c) {
  return (c.dtype() == DType::Int64 || c.dtype() == DType::Int32) && c.numel() <= 16;
}

Sample describe(const LoweredRegion& l, const SymbolicDim& sym, int64_t d) {
  Sample s{d, {}, {}};
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
    os << "constant " << shape_str(c.shape()) << " " << fnv(c.raw(), size_t(c.numel()) * dtype_size(c.dtype())) << "\n";
  }
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
  std::vector<Sample> samples;  // in increasing size; a failed lowering's print says why
  for (int64_t d : sample_sizes(sym)) {
    try {
      samples.push_back(describe(lower_region(g, region, inputs_at(example, sym, d)), sym, d));
    } catch (const std::exception& e) {
      samples.push_back({d, std::string("failed: ") + e.what(), {}});
    }
  }
  // The run of sampled sizes around the largest size seen that lower to its program: a schedule
  // may change at small sizes, and a model may take no larger ones (a position table's length).
  // The version takes that run's range; exact versions the sizes outside it.
  size_t anchor = 0;
  while (samples[anchor].d != sym.observed.back()) ++anchor;
  const Sample& seen = samples[anchor];
  if (seen.print.rfind("failed: ", 0) == 0) {
    why = "lowering at size " + std::to_string(seen.d) + " " + seen.print;
    return std::nullopt;
  }
  auto same = [&](const Sample& s) { return s.print == seen.print && s.ints.size() == seen.ints.size(); };
  size_t first = anchor, last = anchor;
  while (first > 0 && same(samples[first - 1])) --first;
  while (last + 1 < samples.size() && same(samples[last + 1])) ++last;
  const int64_t below = first > 0 ? samples[first - 1].d : 0;
  samples = std::vector<Sample>(samples.begin() + long(first), samples.begin() + long(last) + 1);
  if (samples.size() < 4 || samples[1].d != samples[0].d + 1 || samples[2].d != samples[0].d + 2) {
    why = "the lowering at size " + std::to_string(below) + " is another program than at " + std::to_string(seen.d) +
          " (a schedule, a float constant or a step that depends on the size)";
    return std::nullopt;
  }
  sym.hi = samples.back().d;
  sym.lo = samples.front().d;
  const Sample& ref = samples.front();
  std::vector<Poly> polys(ref.ints.size());
  for (size_t k = 0; k < polys.size(); ++k) {
    std::optional<Poly> p = fit(samples[0].d, samples[0].ints[k], samples[1].ints[k], samples[2].ints[k]);
    bool ok = p.has_value();
    for (const Sample& s : samples) ok = ok && p->at(s.d) == s.ints[k];
    if (!ok) {
      why = "integer constant " + std::to_string(k) + " of the lowering is no polynomial of degree <= 2 of the size";
      return std::nullopt;
    }
    polys[k] = *p;
  }
  // Size 1 joins when it lowers to the same program and constants (a lowering usually folds a
  // size-1 dim's strides away: then size 1 is left to exact versions).
  if (sym.lo == 2) try {
      Sample one = describe(lower_region(g, region, inputs_at(example, sym, 1)), sym, 1);
      bool same = one.print == ref.print && one.ints.size() == polys.size();
      for (size_t k = 0; same && k < polys.size(); ++k) same = polys[k].at(1) == one.ints[k];
      if (same) sym.lo = 1;
    } catch (const std::exception&) {
    }

  SymbolicLowering out;
  out.samples = int(samples.size()) + 1;
  out.lowered = lower_region(g, region, inputs_at(example, sym, sym.hi));
  LoweredRegion& l = out.lowered;
  size_t at = 0;
  for (const kernels::TensorSig& s : l.slots) {
    out.slot_dims.emplace_back(polys.begin() + long(at), polys.begin() + long(at + s.shape.size()));
    at += s.shape.size();
  }
  // The arena is planned at hi: every size below must need no more (sizes non-decreasing in d).
  for (const auto& dims : out.slot_dims)
    for (const Poly& p : dims)
      if (p.a2 < 0 || p.a1 < 0 || (p.a2 == 0 && p.a1 == 0 && p.a0 < 0)) {
        why = "a value's size decreases as the dim grows";
        return std::nullopt;
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

}  // namespace terrace
