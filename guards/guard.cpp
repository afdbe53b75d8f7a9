// Guard checks and descriptions.
#include "guards/guard.h"

#include <algorithm>
#include <cstring>

namespace terrace {

std::string Guard::describe() const {
  std::string in = "input " + std::to_string(input);
  switch (kind) {
    case Kind::Dtype: return in + " dtype == " + dtype_name(DType(expected));
    case Kind::Rank: return in + " rank == " + std::to_string(expected);
    case Kind::Dim: return in + " dim " + std::to_string(dim) + " == " + std::to_string(expected);
    case Kind::Device: return in + " device == " + (expected == 0 ? "cpu" : "gpu:" + std::to_string(expected - 1));
    case Kind::Value: return in + " == " + (value ? value->str() : "?");
    case Kind::DimRange:
      return in + " dim " + std::to_string(dim) + " in [" + std::to_string(expected) + ", " + std::to_string(upper) + "]";
    case Kind::DimEqual:
      return in + " dim " + std::to_string(dim) + " == input " + std::to_string(other) + " dim " +
             std::to_string(other_dim);
    case Kind::DimValue:
      return in + " value == input " + std::to_string(other) + " dim " + std::to_string(other_dim);
    case Kind::DimModulo:
      return in + " dim " + std::to_string(dim) + " % " + std::to_string(expected) + (upper ? " != 0" : " == 0");
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
    case Guard::Kind::Value:
      return in + " value: expected " + (guard.value ? guard.value->str() : "?") + ", element " +
             std::to_string(seen) + " differs";
    case Guard::Kind::DimRange:
    case Guard::Kind::DimEqual:
    case Guard::Kind::DimValue:
    case Guard::Kind::DimModulo: return guard.describe() + ": saw " + std::to_string(seen);
  }
  return "?";
}

GuardSet GuardSet::exact(const std::vector<Tensor>& inputs) {
  GuardSet s;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    int in = int(i);
    s.guards_.push_back({Guard::Kind::Device, in, 0, 0, nullptr});
    s.guards_.push_back({Guard::Kind::Dtype, in, 0, int64_t(t.dtype()), nullptr});
    s.guards_.push_back({Guard::Kind::Rank, in, 0, t.rank(), nullptr});
    for (int d = 0; d < int(t.rank()); ++d) s.guards_.push_back({Guard::Kind::Dim, in, d, t.dim(d), nullptr});
  }
  return s;
}

GuardSet GuardSet::exact(const std::vector<Tensor>& inputs, const std::vector<int>& by_value) {
  GuardSet s = exact(inputs);
  for (int i : by_value) {
    Guard g{Guard::Kind::Value, i, 0, 0, nullptr};
    g.value = std::make_shared<const Tensor>(inputs.at(size_t(i)).clone());
    s.guards_.push_back(std::move(g));
  }
  return s;
}

GuardSet GuardSet::symbolic(const std::vector<Tensor>& inputs, const std::vector<std::pair<int, int>>& symbolic,
                            int64_t lo, int64_t hi, const std::vector<int>& values,
                            const std::vector<int>& by_value, int64_t modulus, bool divisible) {
  TERRACE_ASSERT(!symbolic.empty(), "GuardSet::symbolic: no symbolic dim");
  GuardSet exact_set = exact(inputs);
  GuardSet s;
  const auto [first_in, first_dim] = symbolic.front();
  for (const Guard& g : exact_set.guards_) {
    const bool sym = g.kind == Guard::Kind::Dim &&
                     std::find(symbolic.begin(), symbolic.end(), std::make_pair(g.input, g.dim)) != symbolic.end();
    if (!sym) {
      s.guards_.push_back(g);
      continue;
    }
    Guard r = g;
    if (g.input == first_in && g.dim == first_dim) {
      r.kind = Guard::Kind::DimRange;
      r.expected = lo;
      r.upper = hi;
    } else {
      r.kind = Guard::Kind::DimEqual;
      r.other = first_in;
      r.other_dim = first_dim;
    }
    s.guards_.push_back(r);
  }
  if (modulus > 0) s.guards_.push_back({Guard::Kind::DimModulo, first_in, first_dim, modulus, nullptr, divisible ? 0 : 1});
  for (int i : values) s.guards_.push_back({Guard::Kind::DimValue, i, 0, 0, nullptr, 0, first_in, first_dim});
  for (int i : by_value) {
    Guard g{Guard::Kind::Value, i, 0, 0, nullptr};
    g.value = std::make_shared<const Tensor>(inputs.at(size_t(i)).clone());
    s.guards_.push_back(std::move(g));
  }
  return s;
}

// The one integer element of `t` (a host tensor), or nullopt.
static std::optional<int64_t> integer_value(const Tensor& t) {
  if (t.numel() != 1 || t.on_device()) return std::nullopt;
  if (t.dtype() == DType::Int64) return t.data<int64_t>()[0];
  if (t.dtype() == DType::Int32) return t.data<int32_t>()[0];
  return std::nullopt;
}

// The first element (as bytes) where `t` differs from `expected`, or -1 when they are equal.
// The dtype and shape guards before this one have passed.
static int64_t first_difference(const Tensor& device_or_host, const Tensor& expected) {
  if (device_or_host.numel() != expected.numel() || device_or_host.dtype() != expected.dtype()) return 0;
  const Tensor t = device_or_host.to_host();  // tier 2's outputs are read back (small: shape-like)
  const size_t size = dtype_size(t.dtype());
  const auto* a = static_cast<const unsigned char*>(t.raw());
  const auto* b = static_cast<const unsigned char*>(expected.raw());
  if (std::memcmp(a, b, size_t(t.numel()) * size) == 0) return -1;
  for (int64_t i = 0;; ++i)
    if (std::memcmp(a + size_t(i) * size, b + size_t(i) * size, size) != 0) return i;
}

std::optional<GuardFailure> GuardSet::check(const std::vector<Tensor>& inputs) const {
  for (const Guard& g : guards_) {
    if (size_t(g.input) >= inputs.size()) return GuardFailure{g, -1};
    const Tensor& t = inputs[size_t(g.input)];
    int64_t seen = 0;
    switch (g.kind) {
      case Guard::Kind::Device: seen = 0; break;  // every version takes host or device tensors: the tier manager moves them
      case Guard::Kind::Dtype: seen = int64_t(t.dtype()); break;
      case Guard::Kind::Rank: seen = t.rank(); break;
      case Guard::Kind::Dim: seen = g.dim < t.rank() ? t.dim(g.dim) : -1; break;
      case Guard::Kind::Value:
        if (int64_t at = first_difference(t, *g.value); at >= 0) return GuardFailure{g, at};
        continue;
      case Guard::Kind::DimRange:  // the rank guard before it has passed
        seen = t.dim(g.dim);
        if (seen < g.expected || seen > g.upper) return GuardFailure{g, seen};
        continue;
      case Guard::Kind::DimEqual: {
        const Tensor& o = inputs[size_t(g.other)];
        seen = t.dim(g.dim);
        if (o.rank() <= g.other_dim || seen != o.dim(g.other_dim)) return GuardFailure{g, seen};
        continue;
      }
      case Guard::Kind::DimModulo:  // after its input's rank guard
        seen = t.dim(g.dim);
        if ((seen % g.expected == 0) != (g.upper == 0)) return GuardFailure{g, seen};
        continue;
      case Guard::Kind::DimValue: {  // after the DimRange guard on the dim it names
        const Tensor& o = inputs[size_t(g.other)];
        const std::optional<int64_t> v = integer_value(t);
        seen = v.value_or(-1);
        if (!v || o.rank() <= g.other_dim || *v != o.dim(g.other_dim)) return GuardFailure{g, seen};
        continue;
      }
    }
    if (seen != g.expected) return GuardFailure{g, seen};
  }
  return std::nullopt;
}

std::optional<GuardFailure> GuardSet::check_values(const std::vector<Tensor>& inputs) const {
  for (const Guard& g : guards_) {
    if (g.kind != Guard::Kind::Value) continue;
    if (size_t(g.input) >= inputs.size()) return GuardFailure{g, -1};
    if (int64_t at = first_difference(inputs[size_t(g.input)], *g.value); at >= 0) return GuardFailure{g, at};
  }
  return std::nullopt;
}

std::string GuardSet::describe() const {
  std::string s;
  for (const Guard& g : guards_) s += (s.empty() ? "" : ", ") + g.describe();
  return s;
}

Signature::Signature(const std::vector<Tensor>& inputs) {
  inputs_.reserve(inputs.size());
  for (const Tensor& t : inputs) inputs_.push_back({t.dtype(), t.shape()});
}

bool Signature::matches(const std::vector<Tensor>& inputs) const {
  if (inputs.size() != inputs_.size()) return false;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].dtype() != inputs_[i].dtype || inputs[i].shape() != inputs_[i].shape) return false;
  return true;
}

std::string Signature::str() const {
  std::string s;
  for (size_t i = 0; i < inputs_.size(); ++i) {
    if (i) s += ",";
    s += std::string(dtype_name(inputs_[i].dtype)) + shape_str(inputs_[i].shape);
  }
  return s;
}

}  // namespace terrace
