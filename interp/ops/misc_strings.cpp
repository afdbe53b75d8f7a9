// String ops: StringConcat, RegexFullMatch, StringSplit (opset 20) and StringNormalizer (opset
// 10), with Python's str semantics where ONNX's reference uses them (split, upper/lower in ASCII).
#include <cctype>
#include <regex>
#include <set>

#include "interp/ops/misc_kernels.h"

namespace terrace::ops {
namespace {

const std::string* strings_of(const KernelContext& ctx, size_t i, const char* what) {
  const Tensor& t = ctx.input(i);
  TERRACE_CHECK(t.dtype() == DType::String, InvalidArgument, ctx.node.describe(), ": ", what,
                " must be a string tensor, got ", dtype_name(t.dtype()));
  return t.data<std::string>();
}

// Numpy broadcasting of two shapes; InvalidArgument naming the node when they do not broadcast.
Shape broadcast_two(const Node& node, const Shape& a, const Shape& b) {
  Shape out(std::max(a.size(), b.size()));
  for (size_t k = 0; k < out.size(); ++k) {
    int64_t x = k < out.size() - a.size() ? 1 : a[k - (out.size() - a.size())];
    int64_t y = k < out.size() - b.size() ? 1 : b[k - (out.size() - b.size())];
    TERRACE_CHECK(x == y || x == 1 || y == 1, InvalidArgument, node.describe(), ": shapes ", shape_str(a), " and ",
                  shape_str(b), " do not broadcast");
    out[k] = x == 1 ? y : x;
  }
  return out;
}

// The element of a tensor of `shape` that flat index `i` of the broadcast `out` reads.
int64_t broadcast_index(int64_t i, const Shape& out, const Shape& shape) {
  int64_t off = 0, stride = 1;
  for (int64_t d = int64_t(out.size()) - 1, k = int64_t(shape.size()) - 1; d >= 0; --d, --k) {
    int64_t idx = i % out[size_t(d)];
    i /= out[size_t(d)];
    if (k < 0) continue;
    if (shape[size_t(k)] != 1) off += idx * stride;
    stride *= shape[size_t(k)];
  }
  return off;
}

void string_concat(KernelContext& ctx) {
  const std::string* a = strings_of(ctx, 0, "X");
  const std::string* b = strings_of(ctx, 1, "Y");
  const Shape &sa = ctx.input(0).shape(), &sb = ctx.input(1).shape();
  const Shape out = broadcast_two(ctx.node, sa, sb);
  Tensor y = Tensor::empty(DType::String, out);
  std::string* dst = y.data<std::string>();
  for (int64_t i = 0; i < y.numel(); ++i) dst[i] = a[broadcast_index(i, out, sa)] + b[broadcast_index(i, out, sb)];
  ctx.set_output(0, std::move(y));
}

// The whole string must match `pattern`. ONNX names RE2's syntax; std::regex's ECMAScript grammar
// agrees on the classes, groups, anchors and repetitions of ordinary patterns.
void regex_full_match(KernelContext& ctx) {
  const Node& node = ctx.node;
  const std::string* x = strings_of(ctx, 0, "X");
  const std::string pattern = node.attr_string("pattern", "");
  std::regex re;
  try {
    re = std::regex(pattern, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    fail(ErrorCode::InvalidModel, node.describe(), ": pattern '", pattern, "' is not a regular expression: ", e.what());
  }
  Tensor y = Tensor::empty(DType::Bool, ctx.input(0).shape());
  bool* dst = y.data<bool>();
  for (int64_t i = 0; i < y.numel(); ++i) dst[i] = std::regex_match(x[i], re);
  ctx.set_output(0, std::move(y));
}

bool is_space(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }

// Python's str.split(sep, maxsplit): without sep, runs of whitespace separate and edges are
// trimmed; with sep, every occurrence separates (empty pieces kept). maxsplit < 0: no limit.
std::vector<std::string> py_split(const std::string& s, const std::string& sep, int64_t maxsplit) {
  std::vector<std::string> parts;
  if (sep.empty()) {
    size_t i = 0;
    while (true) {
      while (i < s.size() && is_space(s[i])) ++i;
      if (i == s.size()) break;
      if (maxsplit >= 0 && int64_t(parts.size()) == maxsplit) {  // the rest, trailing space trimmed
        size_t end = s.size();
        while (end > i && is_space(s[end - 1])) --end;
        parts.push_back(s.substr(i, end - i));
        break;
      }
      size_t j = i;
      while (j < s.size() && !is_space(s[j])) ++j;
      parts.push_back(s.substr(i, j - i));
      i = j;
    }
    return parts;
  }
  size_t start = 0;
  while (true) {
    size_t at = s.find(sep, start);
    if (at == std::string::npos || (maxsplit >= 0 && int64_t(parts.size()) == maxsplit)) {
      parts.push_back(s.substr(start));
      return parts;
    }
    parts.push_back(s.substr(start, at - start));
    start = at + sep.size();
  }
}

// Y: X's shape plus one dim, the most pieces any element has, padded with ""; Z: piece counts.
void string_split(KernelContext& ctx) {
  const Node& node = ctx.node;
  const std::string* x = strings_of(ctx, 0, "X");
  const Tensor& xt = ctx.input(0);
  const std::string sep = node.attr_string("delimiter", "");
  const int64_t maxsplit = node.attr_int("maxsplit", -1);
  std::vector<std::vector<std::string>> pieces(static_cast<size_t>(xt.numel()));
  int64_t width = 0;
  Tensor counts = Tensor::empty(DType::Int64, xt.shape());
  for (int64_t i = 0; i < xt.numel(); ++i) {
    pieces[size_t(i)] = py_split(x[i], sep, maxsplit);
    counts.data<int64_t>()[i] = int64_t(pieces[size_t(i)].size());
    width = std::max(width, int64_t(pieces[size_t(i)].size()));
  }
  Shape out = xt.shape();
  out.push_back(width);
  Tensor y = Tensor::empty(DType::String, out);
  std::string* dst = y.data<std::string>();
  for (int64_t i = 0; i < xt.numel(); ++i)
    for (size_t k = 0; k < pieces[size_t(i)].size(); ++k) dst[i * width + int64_t(k)] = pieces[size_t(i)][k];
  ctx.set_output(0, std::move(y));
  if (ctx.wants_output(1)) ctx.set_output(1, std::move(counts));
}

std::string ascii_case(std::string s, bool upper) {
  for (char& c : s) c = char(upper ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Drops stopwords (compared case-blind unless is_case_sensitive), then changes case (ASCII);
// [C] or [1, C] in, the survivors out, or one "" when none survives.
void string_normalizer(KernelContext& ctx) {
  const Node& node = ctx.node;
  const std::string* x = strings_of(ctx, 0, "X");
  const Shape& shape = ctx.input(0).shape();
  TERRACE_CHECK(shape.size() == 1 || (shape.size() == 2 && shape[0] == 1), InvalidArgument, node.describe(),
                ": X must be [C] or [1, C], got ", shape_str(shape));
  const std::string action = node.attr_string("case_change_action", "NONE");
  TERRACE_CHECK(action == "NONE" || action == "LOWER" || action == "UPPER", InvalidModel, node.describe(),
                ": unknown case_change_action '", action, "'");
  const bool sensitive = node.attr_int("is_case_sensitive", 0) != 0;
  std::set<std::string> stops;
  for (const std::string& w : node.attr_strings("stopwords")) stops.insert(sensitive ? w : ascii_case(w, false));
  std::vector<std::string> kept;
  for (int64_t i = 0; i < ctx.input(0).numel(); ++i) {
    if (stops.count(sensitive ? x[i] : ascii_case(x[i], false))) continue;
    kept.push_back(action == "NONE" ? x[i] : ascii_case(x[i], action == "UPPER"));
  }
  if (kept.empty()) kept.push_back("");
  Shape out = shape.size() == 1 ? Shape{int64_t(kept.size())} : Shape{1, int64_t(kept.size())};
  Tensor y = Tensor::empty(DType::String, out);
  for (size_t i = 0; i < kept.size(); ++i) y.data<std::string>()[i] = kept[i];
  ctx.set_output(0, std::move(y));
}

}  // namespace

void register_misc_string_kernels(KernelTable& t) {
  t.add(Op::StringConcat, string_concat);
  t.add(Op::RegexFullMatch, regex_full_match);
  t.add(Op::StringSplit, string_split);
  t.add(Op::StringNormalizer, string_normalizer);
}

}  // namespace terrace::ops
