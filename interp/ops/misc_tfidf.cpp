// TfIdfVectorizer (opset 9): counts the pool's n-grams (with skips) in each row of integers or
// strings, weighted as TF, IDF or TFIDF, following ONNX's reference (op_tfidf_vectorizer.py).
#include <map>
#include <set>

#include "interp/ops/misc_kernels.h"

namespace terrace::ops {
namespace {

using Gram = std::vector<std::string>;  // items as text: integers and strings alike

void tfidf_vectorizer(KernelContext& ctx) {
  const Node& node = ctx.node;
  const Tensor& x = ctx.input(0);
  const int64_t min_n = node.attr_int("min_gram_length"), max_n = node.attr_int("max_gram_length");
  const int64_t max_skip = node.attr_int("max_skip_count");
  const std::string mode = node.attr_string("mode", "TF");
  TERRACE_CHECK(mode == "TF" || mode == "IDF" || mode == "TFIDF", InvalidModel, node.describe(), ": unknown mode '",
                mode, "'");
  TERRACE_CHECK(min_n >= 1 && max_n >= min_n && max_skip >= 0, InvalidModel, node.describe(),
                ": needs 1 <= min_gram_length <= max_gram_length and max_skip_count >= 0");
  const std::vector<int64_t> counts = node.attr_ints("ngram_counts"), indexes = node.attr_ints("ngram_indexes");
  std::vector<std::string> pool = node.attr_strings("pool_strings");
  for (int64_t v : node.attr_ints("pool_int64s", {})) pool.push_back(std::to_string(v));
  const std::vector<float> weights = node.attr_floats("weights", {});
  TERRACE_CHECK(!indexes.empty(), InvalidModel, node.describe(), ": ngram_indexes is empty");
  int64_t out_size = 0;
  for (int64_t i : indexes) {
    TERRACE_CHECK(i >= 0 && i < (int64_t(1) << 30), InvalidModel, node.describe(), ": ngram index ", i, " is out of range");
    out_size = std::max(out_size, i + 1);
  }
  // The pool's n-grams of sizes min_n..max_n, each to its output index, and all their prefixes.
  std::map<Gram, int64_t> grams;
  std::set<Gram> prefixes;
  int64_t id = 0;  // 0-based n-gram number, counted over every size as the reference does
  for (size_t s = 0; s < counts.size(); ++s) {
    const int64_t n = int64_t(s) + 1, begin = counts[s];
    const int64_t end = s + 1 < counts.size() ? counts[s + 1] : int64_t(pool.size());
    TERRACE_CHECK(begin >= 0 && begin <= end && end <= int64_t(pool.size()), InvalidModel, node.describe(),
                  ": ngram_counts do not fit the pool");
    for (int64_t at = begin; at + n <= end; at += n, ++id) {
      if (n < min_n || n > max_n) continue;
      TERRACE_CHECK(id < int64_t(indexes.size()), InvalidModel, node.describe(), ": more n-grams than ngram_indexes");
      Gram g(pool.begin() + at, pool.begin() + at + n);
      grams.emplace(g, indexes[size_t(id)]);
      for (size_t k = 1; k <= g.size(); ++k) prefixes.insert(Gram(g.begin(), g.begin() + k));
    }
  }
  TERRACE_CHECK(x.rank() <= 2, InvalidArgument, node.describe(), ": X must be [C] or [B, C]");
  const int64_t rows = x.rank() == 2 ? x.dim(0) : 1, width = x.rank() == 0 ? 1 : x.dim(x.rank() - 1);
  std::vector<std::string> items(static_cast<size_t>(x.numel()));
  for (int64_t i = 0; i < x.numel(); ++i) {
    if (x.dtype() == DType::String) items[size_t(i)] = x.data<std::string>()[i];
    else if (x.dtype() == DType::Int32 || x.dtype() == DType::Int64) items[size_t(i)] = std::to_string(int64_t(x.get_as_double(i)));
    else fail(ErrorCode::InvalidArgument, node.describe(), ": X must be string, int32 or int64, got ", dtype_name(x.dtype()));
  }
  // The output and the counts are tensors, not vectors: a size that cannot be had (ngram_indexes
  // reach 2^30) is then OutOfMemory, as for any tensor, rather than a failing operator new.
  Tensor out = Tensor::empty(DType::Float32, x.rank() == 2 ? Shape{rows, out_size} : Shape{out_size});
  Tensor counted = Tensor::zeros(DType::Int64, {rows * out_size});
  int64_t* freq = counted.data<int64_t>();
  for (int64_t r = 0; r < rows; ++r) {
    const std::string* row = items.data() + r * width;
    int64_t first_n = min_n;  // unigrams count at skip distance 1 only
    for (int64_t d = 1; d <= max_skip + 1; ++d) {
      for (int64_t start = 0; start + d * (first_n - 1) < width; ++start) {
        Gram g;
        for (int64_t n = 1, at = start; n <= max_n && at < width; ++n, at += d) {
          g.push_back(row[at]);
          if (!prefixes.count(g)) break;
          auto hit = grams.find(g);
          if (n >= first_n && hit != grams.end()) ++freq[size_t(r * out_size + hit->second)];
        }
      }
      if (first_n == 1 && ++first_n > max_n) break;
    }
  }
  TERRACE_CHECK(weights.empty() || int64_t(weights.size()) >= out_size, InvalidModel, node.describe(),
                ": weights has ", weights.size(), " values for ", out_size, " outputs");
  float* y = out.data<float>();
  for (int64_t p = 0; p < out.numel(); ++p) {
    const float w = weights.empty() ? 1.0f : weights.at(size_t(p % out_size));
    y[p] = mode == "TF" ? float(freq[p]) : mode == "IDF" ? (freq[p] > 0 ? w : 0.0f) : w * float(freq[p]);
  }
  ctx.set_output(0, std::move(out));
}

}  // namespace

void register_misc_tfidf_kernel(KernelTable& t) { t.add(Op::TfIdfVectorizer, tfidf_vectorizer); }

}  // namespace terrace::ops
