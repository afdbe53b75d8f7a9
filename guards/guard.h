// Guards: what a compiled version assumed about its inputs, as plain data, and how a check fails.
#pragma once
#include <compare>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "interp/tensor.h"

namespace terrace {

struct Guard {
  // Value: the input's elements equal `value`'s, bit for bit (a small shape-like tensor whose
  // contents the version was compiled for, e.g. a Reshape's target shape computed in another region).
  // DimRange: a symbolic dim (a kernel parameter) lies in [expected, upper]: the sizes its code was
  // proven for. DimEqual: the dim equals input `other`'s dim `other_dim` (the code indexes both by
  // one parameter).
  // DimValue: the input's one integer element equals input `other`'s dim `other_dim` (a shape
  // value computed in another region, which the code folded as the symbol).
  // DimModulo: the dim's remainder by `expected` is zero (upper 0) or not (upper 1): the residue
  // class a tiled schedule's code was proven for.
  enum class Kind { Dtype, Rank, Dim, Device, Value, DimRange, DimEqual, DimValue, DimModulo };
  Kind kind = Kind::Dtype;
  int input = 0;         // which region input
  int dim = 0;           // Dim guards: which dimension
  int64_t expected = 0;  // DType as an int, the rank, the dim size, or the device index (0 = CPU)
  std::shared_ptr<const Tensor> value;  // Value guards: the contents assumed
  int64_t upper = 0;                    // DimRange: the largest size allowed
  int other = 0, other_dim = 0;         // DimEqual, DimValue: the dim it must equal

  std::string describe() const;  // "input 1 dim 0 == 16"
};

struct GuardFailure {
  Guard guard;
  int64_t seen = 0;
  std::string describe() const;  // "input 1 dim 0: expected 16, saw 32"
};

// The guards of one compiled version, specialised to one input signature.
class GuardSet {
 public:
  GuardSet() = default;
  // Guards that pin every input's dtype, rank and dims (and the CPU device).
  static GuardSet exact(const std::vector<Tensor>& inputs);
  // Also pins the contents of the inputs listed in `by_value` (indices into `inputs`).
  static GuardSet exact(const std::vector<Tensor>& inputs, const std::vector<int>& by_value);
  // Like exact, but the dims at `symbolic` (input, dim) pairs, which one kernel parameter stands
  // for, are guarded only to lie in [lo, hi] and to equal the first of them.
  // `values`: inputs of one integer element that hold the symbol's size (DimValue guards).
  static GuardSet symbolic(const std::vector<Tensor>& inputs, const std::vector<std::pair<int, int>>& symbolic,
                           int64_t lo, int64_t hi, const std::vector<int>& values = {},
                           const std::vector<int>& by_value = {}, int64_t modulus = 0, bool divisible = false);

  // The first failing guard for these inputs, or nullopt when all pass.
  std::optional<GuardFailure> check(const std::vector<Tensor>& inputs) const;
  // The first failing value guard, for inputs whose signature is known to match (dispatch asks
  // Signature::matches first, so the dtype, rank and dim guards would only repeat it).
  std::optional<GuardFailure> check_values(const std::vector<Tensor>& inputs) const;
  const std::vector<Guard>& guards() const { return guards_; }
  std::string describe() const;

 private:
  std::vector<Guard> guards_;
};

// A region call's input signature: each input's dtype and shape. The tier manager counts calls,
// compiles versions and dispatches by it; a version's guards pin it (GuardSet::exact).
class Signature {
 public:
  Signature() = default;
  explicit Signature(const std::vector<Tensor>& inputs);
  std::string str() const;  // "float32[2,3],int64[4]"
  // True when `inputs` have this signature (no allocation: dispatch asks it per region per call).
  bool matches(const std::vector<Tensor>& inputs) const;
  bool operator==(const Signature&) const = default;
  auto operator<=>(const Signature&) const = default;
  size_t size() const { return inputs_.size(); }
  DType dtype(size_t i) const { return inputs_[i].dtype; }
  const Shape& shape(size_t i) const { return inputs_[i].shape; }

 private:
  struct Input {
    DType dtype;
    Shape shape;
    bool operator==(const Input&) const = default;
    auto operator<=>(const Input&) const = default;
  };
  std::vector<Input> inputs_;
};

}  // namespace terrace
