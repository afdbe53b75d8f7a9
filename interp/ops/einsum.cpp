// Einsum: parses the equation (ellipsis, repeated labels = diagonals, implicit output) and sums
// products over the contracted labels, each output element in a fixed order.
#include <cctype>
#include <map>

#include "interp/ops/common.h"
#include "interp/ops/linalg_gemm.h"
#include "interp/ops/linalg_parts.h"

namespace terrace::ops {
namespace {

// An equation resolved against the input shapes: every label (ellipsis dims included) has an
// id, a size, and per input a stride (summed over repeated occurrences, 0 where absent or
// broadcast).
struct EinsumPlan {
  std::vector<int64_t> size;                 // per label id
  std::vector<std::vector<int64_t>> stride;  // [input][label id]
  std::vector<int> out_labels, sum_labels;
};

std::vector<std::string> split_terms(const std::string& s) {
  std::vector<std::string> terms(1);
  for (char c : s) {
    if (c == ',') terms.emplace_back();
    else terms.back() += c;
  }
  return terms;
}

// Replaces "..." by '.' and checks the characters of one term.
std::string normalize_term(const Node& node, std::string t) {
  std::string r;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t.compare(i, 3, "...") == 0) {
      TERRACE_CHECK(r.find('.') == std::string::npos, InvalidModel, node.describe(),
                    ": more than one ellipsis in an Einsum term");
      r += '.';
      i += 2;
    } else {
      TERRACE_CHECK(std::isalpha(static_cast<unsigned char>(t[i])), InvalidModel, node.describe(),
                    ": bad character '", t[i], "' in Einsum equation");
      r += t[i];
    }
  }
  return r;
}

// The output term of an equation without "->": the ellipsis, then the letters used once.
std::string implicit_output(const std::map<char, int>& count, int64_t ell_rank) {
  std::string out = ell_rank > 0 ? "." : "";
  for (auto& [c, n] : count)  // std::map orders letters: uppercase before lowercase, as numpy
    if (n == 1) out += c;
  return out;
}

// The output term's labels into p.out_labels, every other label into p.sum_labels.
void plan_output(const Node& node, const std::string& out, const std::map<char, int>& id, int64_t ell_rank,
                 EinsumPlan& p) {
  std::vector<bool> in_out(p.size.size(), false);
  for (char c : out) {
    if (c == '.') {
      for (int e = 0; e < ell_rank; ++e) p.out_labels.push_back(e), in_out[size_t(e)] = true;
      continue;
    }
    TERRACE_CHECK(id.count(c) && !in_out[size_t(id.at(c))], InvalidModel, node.describe(),
                  ": output label '", c, "' is unknown or repeated");
    p.out_labels.push_back(id.at(c));
    in_out[size_t(id.at(c))] = true;
  }
  for (size_t l = 0; l < p.size.size(); ++l)
    if (!in_out[l]) p.sum_labels.push_back(int(l));
}

EinsumPlan plan_einsum(const Node& node, const std::vector<const Tensor*>& in) {
  std::string eq;
  for (char c : node.attr_string("equation", ""))
    if (!std::isspace(static_cast<unsigned char>(c))) eq += c;
  const size_t arrow = eq.find("->");
  const bool explicit_out = arrow != std::string::npos;
  std::vector<std::string> terms = split_terms(eq.substr(0, arrow));
  TERRACE_CHECK(terms.size() == in.size(), InvalidModel, node.describe(), ": equation '", eq,
                "' has ", terms.size(), " terms for ", in.size(), " inputs");
  // The ellipsis spans the same number of (broadcast, right-aligned) dims in every term.
  int64_t ell_rank = 0;
  for (size_t t = 0; t < terms.size(); ++t) {
    terms[t] = normalize_term(node, terms[t]);
    const int64_t named = int64_t(terms[t].size()) - (terms[t].find('.') != std::string::npos);
    const bool has_ell = named != int64_t(terms[t].size());
    TERRACE_CHECK(has_ell ? in[t]->rank() >= named : in[t]->rank() == named, InvalidArgument,
                  node.describe(), ": term '", terms[t], "' does not fit input ", t, " of shape ",
                  shape_str(in[t]->shape()));
    if (has_ell) ell_rank = std::max(ell_rank, in[t]->rank() - named);
  }
  std::map<char, int> id;  // letters; ellipsis dims take ids 0..ell_rank-1
  EinsumPlan p;
  p.size.assign(size_t(ell_rank), 1);
  std::map<char, int> count;
  for (auto& term : terms)
    for (char c : term)
      if (c != '.' && !id.count(c)) {
        id[c] = int(p.size.size());
        p.size.push_back(-1);
      }
  p.stride.assign(in.size(), std::vector<int64_t>(p.size.size(), 0));
  for (size_t t = 0; t < terms.size(); ++t) {
    const Shape& shape = in[t]->shape();
    const auto strides = row_major_strides(shape);
    size_t dim = 0;
    for (char c : terms[t]) {
      if (c == '.') {
        const int64_t span = in[t]->rank() - int64_t(terms[t].size()) + 1;
        for (int64_t e = 0; e < span; ++e, ++dim) {
          const int64_t label = ell_rank - span + e;
          int64_t& sz = p.size[size_t(label)];
          TERRACE_CHECK(shape[dim] == sz || shape[dim] == 1 || sz == 1, InvalidArgument,
                        node.describe(), ": ellipsis dims of the inputs do not broadcast");
          if (shape[dim] != 1) {
            sz = shape[dim];
            p.stride[t][size_t(label)] += strides[dim];
          }
        }
        continue;
      }
      ++count[c];
      int64_t& sz = p.size[size_t(id[c])];
      TERRACE_CHECK(sz < 0 || sz == shape[dim], InvalidArgument, node.describe(), ": label '", c,
                    "' has sizes ", sz, " and ", shape[dim]);
      sz = shape[dim];
      p.stride[t][size_t(id[c])] += strides[dim];
      ++dim;
    }
  }
  const std::string out = explicit_out ? normalize_term(node, eq.substr(arrow + 2)) : implicit_output(count, ell_rank);
  plan_output(node, out, id, ell_rank, p);
  return p;
}

// Walks a set of labels as an odometer, keeping one offset per input in step.
struct LabelWalk {
  const EinsumPlan& p;
  const std::vector<int>& labels;
  std::vector<int64_t> idx;
  std::vector<int64_t> off;
  LabelWalk(const EinsumPlan& plan, const std::vector<int>& l, size_t inputs)
      : p(plan), labels(l), idx(l.size(), 0), off(inputs, 0) {}
  void seek(int64_t pos) {
    for (size_t k = labels.size(); k-- > 0;) {
      const int64_t n = p.size[size_t(labels[k])];
      idx[k] = pos % n;
      pos /= n;
    }
    for (size_t t = 0; t < off.size(); ++t) {
      off[t] = 0;
      for (size_t k = 0; k < labels.size(); ++k) off[t] += idx[k] * p.stride[t][size_t(labels[k])];
    }
  }
  void next() {
    for (size_t k = labels.size(); k-- > 0;) {
      const size_t l = size_t(labels[k]);
      for (size_t t = 0; t < off.size(); ++t) off[t] += p.stride[t][l];
      if (++idx[k] < p.size[l]) return;
      for (size_t t = 0; t < off.size(); ++t) off[t] -= p.size[l] * p.stride[t][l];
      idx[k] = 0;
    }
  }
};

void einsum_kernel(KernelContext& ctx) {
  const Node& node = ctx.node;
  std::vector<const Tensor*> in;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) in.push_back(&ctx.input(i));
  TERRACE_CHECK(!in.empty(), InvalidModel, node.describe(), ": Einsum needs at least one input");
  for (auto* t : in)
    TERRACE_CHECK(t->dtype() == in[0]->dtype() && (is_float(t->dtype()) || is_integer(t->dtype())),
                  InvalidArgument, node.describe(), ": Einsum inputs must share one numeric type");
  const EinsumPlan p = plan_einsum(node, in);
  Shape out_shape;
  for (int l : p.out_labels) out_shape.push_back(p.size[size_t(l)]);
  int64_t sum_count = 1;
  for (int l : p.sum_labels) sum_count *= p.size[size_t(l)];
  Tensor out = Tensor::empty(in[0]->dtype(), out_shape);
  const int64_t total = out.numel();
  dispatch_dtype(in[0]->dtype(), [&](auto tag) {
    using T = decltype(tag);
    using Acc = acc_t<T>;
    std::vector<const T*> src;
    for (auto* t : in) src.push_back(t->data<T>());
    T* o = out.data<T>();
    constexpr int64_t kChunk = 256;
    const int64_t chunks = (total + kChunk - 1) / kChunk;
    parallel_for_catching(chunks, total * sum_count > (1 << 14), [&](int64_t c) {
      LabelWalk outer(p, p.out_labels, src.size()), inner(p, p.sum_labels, src.size());
      outer.seek(c * kChunk);
      for (int64_t i = c * kChunk; i < std::min(total, (c + 1) * kChunk); ++i, outer.next()) {
        Acc acc = 0;
        inner.seek(0);
        for (int64_t s = 0; s < sum_count; ++s, inner.next()) {
          Acc prod = 1;
          for (size_t t = 0; t < src.size(); ++t) prod *= to_acc<Acc>(src[t][outer.off[t] + inner.off[t]]);
          acc += prod;
        }
        o[i] = round_to<T>(acc);
      }
    });
  });
  ctx.set_output(0, std::move(out));
}

}  // namespace

void register_einsum_kernel(KernelTable& t) { t.add(Op::Einsum, einsum_kernel); }

}  // namespace terrace::ops
