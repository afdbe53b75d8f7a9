// Tier 1's float32 product with constant weights packed once, for CPUs where oneDNN has no packed
// weight layout of its own: below AVX-512, oneDNN 2.6 runs MatMul through its gemm:jit, which
// reads the weights in a plain order and packs them again on every call (the weights of a
// transformer's layer come from memory each time). Here the weights are copied once into panels
// of 16 columns by 768-deep blocks, the order in which an AVX2/FMA micro-kernel of 6 rows by 16
// columns reads them, as ONNX Runtime's MLAS does with its pre-packed weights.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

namespace terrace::jit {

// True where this CPU has AVX2 and FMA and TERRACE_PACKED_GEMM is not "0" (tests set it to take
// oneDNN's path on such a machine).
bool packed_gemm_supported();

class PackedWeights {
 public:
  // The blocking: a panel's depth (rows of the weights) and the most rows of A a pass keeps in cache.
  static constexpr int64_t kDepthBlock = 768, kRowBlock = 132;

  // `b`: the weights as [k, n] row-major, or as [n, k] row-major when `transposed` (Gemm's transB,
  // a copy stored by columns). The values are copied; `b` may go once this returns.
  PackedWeights(const float* b, int64_t k, int64_t n, bool transposed);
  int64_t k() const { return k_; }
  int64_t n() const { return n_; }
  size_t bytes() const { return size_; }

  // c[m, n] = a[m, k] . B (+ bias[n] on every row when `bias` is set); a and c row-major and
  // dense. `threads`: 1, or the size of the calling thread's OpenMP team (tier 1 never starts a
  // team of another size: dnnl_ops.cpp, threads_for); the columns are split between them.
  // `rows`: null, or scratch of m k floats (rows_floats) into which the team first copies A in the
  // order the micro-kernel reads it (packed_gemm.cpp). `relu`: then c = max(0, c) (NaN kept), as
  // ONNX's Relu after the product. Needs packed_gemm_supported().
  void multiply(const float* a, int64_t m, const float* bias, float* c, int threads, float* rows = nullptr,
                bool relu = false) const;

  // The scratch `multiply` can use for m rows of A, or 0 where reading A in place is as fast (few
  // rows, or too few columns to pay for the copy).
  size_t rows_floats(int64_t m) const;

 private:
  struct Free {
    void operator()(float* p) const;
  };
  int64_t k_ = 0, n_ = 0, panels_ = 0;
  size_t size_ = 0;
  std::unique_ptr<float[], Free> data_;
};

}  // namespace terrace::jit
