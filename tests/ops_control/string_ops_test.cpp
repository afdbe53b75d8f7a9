// String ops: StringConcat, RegexFullMatch, StringSplit (opset 20), StringNormalizer, TfIdfVectorizer
// and Equal on strings (opset 19).
#include <gtest/gtest.h>

#include "tests/support/node_runner.h"

namespace terrace::testing {
namespace {

Tensor strings(Shape shape, std::vector<std::string> v) {
  Tensor t = Tensor::empty(DType::String, shape);
  for (size_t i = 0; i < v.size(); ++i) t.data<std::string>()[i] = v[i];
  return t;
}

std::vector<std::string> text(const Tensor& t) {
  return std::vector<std::string>(t.data<std::string>(), t.data<std::string>() + t.numel());
}

TEST(StringOps, concat_broadcasts_and_equal_compares_strings) {
  Tensor y = run1(Op::StringConcat, {strings({2}, {"a", "b"}), strings({}, {"!"})});
  EXPECT_EQ(text(y), (std::vector<std::string>{"a!", "b!"}));
  Tensor eq = run1(Op::Equal, {strings({2}, {"a!", "x"}), y});
  EXPECT_EQ(values_of<bool>(eq), (std::vector<bool>{true, false}));
}

TEST(StringOps, regex_full_match_needs_the_whole_string) {
  Tensor x = strings({3}, {"www.example.com", "www.example.com.au", "example.com"});
  Tensor y = run1(Op::RegexFullMatch, {x}, {{"pattern", R"(www\.[\w.-]+\.com)"}});
  EXPECT_EQ(values_of<bool>(y), (std::vector<bool>{true, false, false}));
  Error e = error_of([&] { run1(Op::RegexFullMatch, {x}, {{"pattern", "(unclosed"}}); });
  EXPECT_EQ(e.code(), ErrorCode::InvalidModel);
  EXPECT_NE(e.message().find("node_under_test"), std::string::npos);
}

TEST(StringOps, split_follows_python_and_pads_with_empty_strings) {
  std::vector<Tensor> out = run_op(Op::StringSplit, {strings({2}, {"a--b", "c"})}, {{"delimiter", "-"}}, 2);
  EXPECT_EQ(out[0].shape(), Shape({2, 3}));
  EXPECT_EQ(text(out[0]), (std::vector<std::string>{"a", "", "b", "c", "", ""}));
  EXPECT_EQ(values_of<int64_t>(out[1]), (std::vector<int64_t>{3, 1}));
  // No delimiter: whitespace runs separate; maxsplit keeps the rest whole.
  std::vector<Tensor> ws = run_op(Op::StringSplit, {strings({1}, {"  x  y z "})}, {{"maxsplit", 1}}, 2);
  EXPECT_EQ(text(ws[0]), (std::vector<std::string>{"x", "y z"}));
}

TEST(StringOps, normalizer_drops_stopwords_then_changes_case) {
  Tensor x = strings({1, 3}, {"Monday", "tuesday", "monday"});
  Attribute stops;
  stops.kind = Attribute::Kind::Strings;
  stops.strings = {"monday"};
  Tensor blind = run1(Op::StringNormalizer, {x}, {{"stopwords", stops}, {"case_change_action", "UPPER"}});
  EXPECT_EQ(blind.shape(), Shape({1, 1}));
  EXPECT_EQ(text(blind), (std::vector<std::string>{"TUESDAY"}));
  Tensor exact = run1(Op::StringNormalizer, {x}, {{"stopwords", stops}, {"is_case_sensitive", 1}});
  EXPECT_EQ(text(exact), (std::vector<std::string>{"Monday", "tuesday"}));
  Tensor none = run1(Op::StringNormalizer, {strings({1}, {"monday"})}, {{"stopwords", stops}});
  EXPECT_EQ(text(none), (std::vector<std::string>{""})) << "nothing left: one empty string";
}

// Pool: unigrams {2, 3}, bigram {2, 3}. Row [2, 3, 3, 2, 3]: unigram 2 twice, 3 three times;
// bigram (2, 3) at skip distance 1 twice, and at distance 2 (2 .. 3 at positions 0, 2) once more.
TEST(TfIdfVectorizer, counts_pool_ngrams_with_skips) {
  auto ints = [](std::vector<int64_t> v) {
    Attribute a;
    a.kind = Attribute::Kind::Ints;
    a.ints = std::move(v);
    return a;
  };
  Tensor x = Tensor::from_vector<int64_t>({5}, {2, 3, 3, 2, 3});
  std::map<std::string, Attr> attrs = {{"min_gram_length", 1}, {"max_gram_length", 2}, {"max_skip_count", 0},
                                       {"mode", "TF"}, {"ngram_counts", ints({0, 2})},
                                       {"ngram_indexes", ints({0, 1, 2})}, {"pool_int64s", ints({2, 3, 2, 3})}};
  EXPECT_EQ(values_of<float>(run1(Op::TfIdfVectorizer, {x}, attrs)), (std::vector<float>{2, 3, 2}));
  attrs.insert_or_assign("max_skip_count", Attr(1));
  EXPECT_EQ(values_of<float>(run1(Op::TfIdfVectorizer, {x}, attrs)), (std::vector<float>{2, 3, 3}))
      << "unigrams count once; the bigram also at distance 2";
  attrs.insert_or_assign("mode", Attr("IDF"));
  EXPECT_EQ(values_of<float>(run1(Op::TfIdfVectorizer, {x}, attrs)), (std::vector<float>{1, 1, 1}));
}

}  // namespace
}  // namespace terrace::testing
