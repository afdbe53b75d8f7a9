// Symbolic dims for generated-code regions (issue 36): one lowering whose kernels read a dim from a
// run-time parameter instead of having it folded into their constants. The lowering itself stays
// static (tiers/region_lowering.h): the region is lowered at many sizes of the dim, and only a
// region whose lowerings are the same program up to integer constants, each a polynomial of the
// dim of degree <= 2 that reproduces every sample exactly, gets a symbolic version; those constants
// become expressions of the parameter. Anything else (a float constant or a schedule that changes
// with the size, a value input, a lowering that fails at some size) refuses, with the reason.
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "guards/guard.h"
#include "tiers/region_lowering.h"

namespace terrace {

// The region inputs' dims one symbol stands for, and the sizes the symbolic code was proven for.
struct SymbolicDim {
  std::vector<std::pair<int, int>> positions;  // (input, dim), sorted; all equal at run time
  int64_t lo = 1, hi = 1;
  // 0, or the sizes taken are those whose remainder by `modulus` is zero (`divisible`) or not:
  // a tiled schedule lowers the two classes to two programs. Set before lower_symbolic: that
  // class only (the other class's version is published).
  int64_t modulus = 0;
  bool divisible = false;
  std::vector<int64_t> observed;  // the sizes seen (sampled besides the fixed ones)
  // Inputs of one integer element that held the size in every call seen (a shape value computed
  // in another region): lowered with the size as their value, guarded to hold it (DimValue).
  std::vector<int> values;
  // "input 0 dim 1, input 1 dim 1"
  std::string describe() const;
};

// a2*d^2 + a1*d + a0; with a modulus T (a tiled schedule's remainder), also
// qq*q^2 + qr*q*r + rr*r^2 + q1*q + r1*r where q = d / T and r = d % T.
struct Poly {
  int64_t a2 = 0, a1 = 0, a0 = 0;
  int64_t modulus = 0, qq = 0, qr = 0, rr = 0, q1 = 0, r1 = 0;
  int64_t at(int64_t d) const {
    int64_t v = (a2 * d + a1) * d + a0;
    if (modulus) {
      const int64_t q = d / modulus, r = d % modulus;
      v += qq * q * q + qr * q * r + rr * r * r + q1 * q + r1 * r;
    }
    return v;
  }
  bool constant() const { return a2 == 0 && a1 == 0 && qq == 0 && qr == 0 && rr == 0 && q1 == 0 && r1 == 0; }
};

// Finds the one dim that varies among `sigs` (distinct signatures of one region's calls): every
// position whose sizes vary must vary alike (one symbol), dtypes and ranks and every other dim be
// equal. nullopt, with `why`, otherwise.
// `values[k][i]`: input i's integer value in signature k's call, where it has one element.
using ScalarValues = std::vector<std::optional<int64_t>>;
std::optional<SymbolicDim> find_symbolic_dim(const std::vector<Signature>& sigs, const std::vector<ScalarValues>& values,
                                             std::string& why);
inline std::optional<SymbolicDim> find_symbolic_dim(const std::vector<Signature>& sigs, std::string& why) {
  return find_symbolic_dim(sigs, {}, why);
}
// The integer values of `in`'s one-element inputs (ScalarValues).
ScalarValues scalar_values(const std::vector<Tensor>& in);

struct SymbolicLowering {
  // The region lowered at sym.hi, its kernels reading the dim from slot dims_slot (int64[1]), which
  // the runner fills each call; every kernel takes that slot as its last buffer.
  LoweredRegion lowered;
  int dims_slot = -1;
  std::vector<std::vector<Poly>> slot_dims;  // per slot, per dim: its size as a function of the symbol
  // Per step: a kernel's parallel extent and work per iteration as functions of it (copies: unused).
  std::vector<Poly> extents, work;
  // Integer constants computed at compile time whose elements depend on the size (a shape vector
  // [1, d, 768]): their index in lowered.constants and each element's polynomial.
  std::vector<std::pair<int, std::vector<Poly>>> constants;
  int samples = 0;  // sizes lowered and checked
};

// Lowers `region` for every size of `sym` in [sym.lo, sym.hi] (the other dims as in `example`), or
// nullopt and why not. `example`: one call's inputs (dtypes, shapes).
std::optional<SymbolicLowering> lower_symbolic(const Graph& g, const Region& region, const std::vector<Tensor>& example,
                                               SymbolicDim& sym, std::string& why);

// True when `sym`'s version takes size d's residue class (always without a modulus).
bool in_class(const SymbolicDim& sym, int64_t d);

// The inputs' shapes with the symbol's positions set to `d`.
std::vector<Tensor> inputs_at(const std::vector<Tensor>& example, const SymbolicDim& sym, int64_t d);

}  // namespace terrace
