// Guards: what a compiled version assumed about its inputs, as plain data, and how a check fails.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "interp/tensor.h"

namespace terrace {

struct Guard {
  enum class Kind { Dtype, Rank, Dim, Device };
  Kind kind = Kind::Dtype;
  int input = 0;         // which region input
  int dim = 0;           // Dim guards: which dimension
  int64_t expected = 0;  // DType as an int, the rank, the dim size, or the device index (0 = CPU)

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

  // The first failing guard for these inputs, or nullopt when all pass.
  std::optional<GuardFailure> check(const std::vector<Tensor>& inputs) const;
  const std::vector<Guard>& guards() const { return guards_; }
  std::string describe() const;

 private:
  std::vector<Guard> guards_;
};

// An input signature: dtypes and shapes of a region's inputs, as a printable, hashable key.
std::string signature_of(const std::vector<Tensor>& inputs);

}  // namespace terrace
