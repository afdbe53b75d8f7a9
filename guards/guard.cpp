// Guard checks and descriptions.
#include "guards/guard.h"

namespace terrace {

std::string Guard::describe() const {
  std::string in = "input " + std::to_string(input);
  switch (kind) {
    case Kind::Dtype: return in + " dtype == " + dtype_name(DType(expected));
    case Kind::Rank: return in + " rank == " + std::to_string(expected);
    case Kind::Dim: return in + " dim " + std::to_string(dim) + " == " + std::to_string(expected);
    case Kind::Device: return in + " device == " + (expected == 0 ? "cpu" : "gpu:" + std::to_string(expected - 1));
  }
  return "?";
}

std::string GuardFailure::describe() const {
  std::string in = "input " + std::to_string(guard.input);
  switch (guard.kind) {
    case Guard::Kind::Dtype:
      return in + " dtype: expected " + dtype_name(DType(guard.expected)) + ", saw " + dtype_name(DType(seen));
    case Guard::Kind::Rank:
      return in + " rank: expected " + std::to_string(guard.expected) + ", saw " + std::to_string(seen);
    case Guard::Kind::Dim:
      return in + " dim " + std::to_string(guard.dim) + ": expected " + std::to_string(guard.expected) +
             ", saw " + std::to_string(seen);
    case Guard::Kind::Device:
      return in + " device: expected " + std::to_string(guard.expected) + ", saw " + std::to_string(seen);
  }
  return "?";
}

GuardSet GuardSet::exact(const std::vector<Tensor>& inputs) {
  GuardSet s;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    int in = int(i);
    s.guards_.push_back({Guard::Kind::Device, in, 0, 0});
    s.guards_.push_back({Guard::Kind::Dtype, in, 0, int64_t(t.dtype())});
    s.guards_.push_back({Guard::Kind::Rank, in, 0, t.rank()});
    for (int d = 0; d < int(t.rank()); ++d) s.guards_.push_back({Guard::Kind::Dim, in, d, t.dim(d)});
  }
  return s;
}

std::optional<GuardFailure> GuardSet::check(const std::vector<Tensor>& inputs) const {
  for (const Guard& g : guards_) {
    if (size_t(g.input) >= inputs.size()) return GuardFailure{g, -1};
    const Tensor& t = inputs[size_t(g.input)];
    int64_t seen = 0;
    switch (g.kind) {
      case Guard::Kind::Device: seen = 0; break;  // tensors live on the host today
      case Guard::Kind::Dtype: seen = int64_t(t.dtype()); break;
      case Guard::Kind::Rank: seen = t.rank(); break;
      case Guard::Kind::Dim: seen = g.dim < t.rank() ? t.dim(g.dim) : -1; break;
    }
    if (seen != g.expected) return GuardFailure{g, seen};
  }
  return std::nullopt;
}

std::string GuardSet::describe() const {
  std::string s;
  for (const Guard& g : guards_) s += (s.empty() ? "" : ", ") + g.describe();
  return s;
}

std::string signature_of(const std::vector<Tensor>& inputs) {
  std::string s;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (i) s += ",";
    s += std::string(dtype_name(inputs[i].dtype())) + shape_str(inputs[i].shape());
  }
  return s;
}

}  // namespace terrace
