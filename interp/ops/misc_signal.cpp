// Signal processing: Hann/Hamming/Blackman windows, DFT, STFT and MelWeightMatrix. Transforms are
// direct O(n^2) sums in double with exact twiddle indices: a specification, not an FFT.
#include <cmath>
#include <complex>
#include <numbers>

#include "interp/ops/misc_kernels.h"

namespace terrace::ops {
namespace {

using cplx = std::complex<double>;

int64_t int_input(KernelContext& ctx, size_t i, const char* what) {
  const Tensor& t = ctx.input(i);
  TERRACE_CHECK(t.numel() == 1 && is_integer(t.dtype()), InvalidArgument, ctx.node.describe(),
                ": ", what, " must be a one-element integer tensor");
  return t.get_as_int64(0);
}

double float_input(KernelContext& ctx, size_t i, const char* what) {
  const Tensor& t = ctx.input(i);
  TERRACE_CHECK(t.numel() == 1 && (is_float(t.dtype()) || is_integer(t.dtype())),
                InvalidArgument, ctx.node.describe(), ": ", what,
                " must be a one-element numeric tensor");
  return t.get_as_double(0);
}

// A cosine-sum window sum_k (-1)^k a_k cos(2 pi k n / N), N = size (periodic) or size - 1.
void cosine_window(KernelContext& ctx, std::initializer_list<double> a) {
  const int64_t size = int_input(ctx, 0, "size");
  TERRACE_CHECK(size >= 0, InvalidArgument, ctx.node.describe(), ": size ", size,
                " is negative");
  const bool periodic = ctx.node.attr_int("periodic", 1) != 0;
  const double denom = double(periodic ? size : std::max<int64_t>(size - 1, 1));
  std::vector<double> w(size_t(size), 0.0);
  for (int64_t n = 0; n < size; ++n) {
    int k = 0;
    for (double ak : a) {
      w[size_t(n)] += (k % 2 ? -ak : ak) * std::cos(2 * std::numbers::pi * k * double(n) / denom);
      ++k;
    }
  }
  ctx.set_output(0, Tensor::from_vector<double>({size}, w).cast(dtype_attr(ctx.node, "output_datatype", 1)));
}

void hann_window(KernelContext& ctx) { cosine_window(ctx, {0.5, 0.5}); }
void hamming_window(KernelContext& ctx) { cosine_window(ctx, {25.0 / 46, 21.0 / 46}); }
void blackman_window(KernelContext& ctx) { cosine_window(ctx, {0.42, 0.5, 0.08}); }

// exp(-+2 pi i t / n) for t in [0, n): twiddles indexed by (j * k) mod n, so large products keep
// full precision.
std::vector<cplx> twiddles(int64_t n, bool inverse) {
  std::vector<cplx> w(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) {
    double ang = 2 * std::numbers::pi * double(t) / double(n) * (inverse ? 1 : -1);
    w[size_t(t)] = {std::cos(ang), std::sin(ang)};
  }
  return w;
}

// Bins [0, bins) of the length-n DFT of the m samples x(j) (zero-padded or truncated to n),
// handed to put(k, value); inverse scales by 1/n. No allocation: it runs inside OpenMP loops.
template <typename Get, typename Put>
void dft_line(Get x, int64_t m, const std::vector<cplx>& w, int64_t bins, bool inverse, Put put) {
  const int64_t n = int64_t(w.size());
  m = std::min(m, n);
  for (int64_t k = 0; k < bins; ++k) {
    cplx acc = 0;
    for (int64_t j = 0; j < m; ++j) acc += x(j) * w[size_t((j * k) % n)];
    put(k, inverse ? acc / double(n) : acc);
  }
}

// Reads element `idx` of a [..., 1 | 2] real-or-complex tensor as complex.
template <typename T>
cplx read_complex(const T* p, int64_t idx, bool complex_in) {
  return complex_in ? cplx(double(p[2 * idx]), double(p[2 * idx + 1])) : cplx(double(p[idx]), 0);
}

// Writes a complex result as the trailing [.., 2] pair of an output of the input's float type.
template <typename T>
void write_complex(T* p, int64_t idx, cplx v) {
  p[2 * idx] = from_double<T>(v.real());
  p[2 * idx + 1] = from_double<T>(v.imag());
}

void check_signal(KernelContext& ctx, const Tensor& x) {
  TERRACE_CHECK(is_float(x.dtype()), InvalidArgument, ctx.node.describe(),
                ": signal must be a float tensor, got ", dtype_name(x.dtype()));
  TERRACE_CHECK(x.rank() >= 2 && (x.dim(-1) == 1 || x.dim(-1) == 2), InvalidArgument,
                ctx.node.describe(), ": signal ", shape_str(x.shape()),
                " must end in a dim of 1 (real) or 2 (complex)");
}

void dft_kernel(KernelContext& ctx) {
  const Node& node = ctx.node;
  const Tensor& x = ctx.input(0);
  check_signal(ctx, x);
  // Opset 20 moves axis to an input (2), -2 by default: the last dim holds real and imaginary parts.
  const int64_t axis_value = ctx.opset() >= 20 ? (ctx.has_input(2) ? int_input(ctx, 2, "axis") : -2)
                                               : node.attr_int("axis", 1);
  const int64_t axis = normalize_axis(node, axis_value, x.rank());
  TERRACE_CHECK(axis < x.rank() - 1, InvalidArgument, node.describe(), ": axis ", axis,
                " is the real/complex dim");
  const int64_t n = ctx.has_input(1) ? int_input(ctx, 1, "dft_length") : x.dim(axis);
  TERRACE_CHECK(n >= 1, InvalidArgument, node.describe(), ": dft_length ", n, " must be >= 1");
  const bool inverse = node.attr_int("inverse", 0) != 0;
  const bool onesided = node.attr_int("onesided", 0) != 0;
  const int64_t bins = onesided ? n / 2 + 1 : n;
  const bool complex_in = x.dim(-1) == 2;

  Shape out_shape = x.shape();
  out_shape[size_t(axis)] = bins;
  out_shape.back() = 2;
  Tensor y = Tensor::empty(x.dtype(), out_shape);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.dim(d);
  for (int64_t d = axis + 1; d < x.rank() - 1; ++d) inner *= x.dim(d);
  const int64_t len = x.dim(axis);
  const std::vector<cplx> w = twiddles(n, inverse);
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (is_float_storage<T>) {
      const T* src = x.data<T>();
      T* dst = y.data<T>();
      // One line (o, i) per iteration: independent outputs, so any thread count agrees.
#pragma omp parallel for schedule(static)
      for (int64_t line = 0; line < outer * inner; ++line) {
        const int64_t o = line / inner, i = line % inner;
        // Explicit captures: clang loses the outer lambda's captures inside an OpenMP region.
        dft_line([&, complex_in](int64_t j) {
                   return read_complex(src, (o * len + j) * inner + i, complex_in);
                 },
                 len, w, bins, inverse,
                 [&](int64_t k, cplx v) { write_complex(dst, (o * bins + k) * inner + i, v); });
      }
    }
  });
  ctx.set_output(0, std::move(y));
}

void stft_kernel(KernelContext& ctx) {
  const Node& node = ctx.node;
  const Tensor& x = ctx.input(0);
  check_signal(ctx, x);
  TERRACE_CHECK(x.rank() == 3, InvalidArgument, node.describe(), ": signal ",
                shape_str(x.shape()), " must be [batch, length, 1 | 2]");
  const int64_t step = int_input(ctx, 1, "frame_step");
  const Tensor* window = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  TERRACE_CHECK(!window || window->rank() == 1, InvalidArgument, node.describe(),
                ": window must be 1-D");
  TERRACE_CHECK(window || ctx.has_input(3), InvalidArgument, node.describe(),
                ": needs a window or a frame_length");
  const int64_t flen = ctx.has_input(3) ? int_input(ctx, 3, "frame_length") : window->dim(0);
  TERRACE_CHECK(!window || window->dim(0) == flen, InvalidArgument, node.describe(),
                ": window length ", window ? window->dim(0) : 0, " differs from frame_length ",
                flen);
  const int64_t batch = x.dim(0), len = x.dim(1);
  TERRACE_CHECK(step >= 1 && flen >= 1 && flen <= len, InvalidArgument, node.describe(),
                ": frame_step ", step, " and frame_length ", flen, " do not fit a signal of ",
                len);
  const int64_t frames = 1 + (len - flen) / step;
  const bool onesided = node.attr_int("onesided", 1) != 0;
  const int64_t bins = onesided ? flen / 2 + 1 : flen;
  const bool complex_in = x.dim(2) == 2;
  std::vector<double> win(size_t(flen), 1.0);
  for (int64_t j = 0; window && j < flen; ++j) win[size_t(j)] = window->get_as_double(j);

  Tensor y = Tensor::empty(x.dtype(), {batch, frames, bins, 2});
  const std::vector<cplx> w = twiddles(flen, false);
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (is_float_storage<T>) {
      const T* src = x.data<T>();
      T* dst = y.data<T>();
#pragma omp parallel for schedule(static)
      for (int64_t bf = 0; bf < batch * frames; ++bf) {
        const int64_t b = bf / frames, f = bf % frames;
        auto sample = [&, len, step, complex_in, wv = win.data()](int64_t j) {  // see dft_kernel
          return read_complex(src, b * len + f * step + j, complex_in) * wv[j];
        };
        dft_line(sample, flen, w, bins, false,
                 [&](int64_t k, cplx v) { write_complex(dst, bf * bins + k, v); });
      }
    }
  });
  ctx.set_output(0, std::move(y));
}

// Triangular mel filters over the bins of a one-sided spectrum, as ONNX's reference builds them:
// num_mel_bins + 2 edges equally spaced in mel, mapped to spectrogram bin indices by flooring.
void mel_weight_matrix(KernelContext& ctx) {
  const Node& node = ctx.node;
  const int64_t mels = int_input(ctx, 0, "num_mel_bins");
  const int64_t dft_len = int_input(ctx, 1, "dft_length");
  const int64_t rate = int_input(ctx, 2, "sample_rate");
  const double lo_hz = float_input(ctx, 3, "lower_edge_hertz");
  const double hi_hz = float_input(ctx, 4, "upper_edge_hertz");
  TERRACE_CHECK(mels >= 1 && dft_len >= 1 && rate >= 1 && lo_hz >= 0 && hi_hz > lo_hz,
                InvalidArgument, node.describe(), ": invalid mel parameters");
  const int64_t rows = dft_len / 2 + 1;
  auto to_mel = [](double hz) { return float(2595 * std::log10(1 + hz / 700)); };
  const double lo_mel = to_mel(lo_hz), step = (to_mel(hi_hz) - lo_mel) / double(mels + 2);
  std::vector<int64_t> edge(size_t(mels + 2));
  for (int64_t i = 0; i < mels + 2; ++i) {
    double hz = 700 * (std::pow(10.0, (double(i) * step + lo_mel) / 2595) - 1);
    const double bin = std::floor(double(dft_len + 1) * hz / double(rate));
    // Every used edge must be a spectrum row (set() checks); one past int64's range is no row.
    TERRACE_CHECK(std::isfinite(bin) && std::fabs(bin) < 9.0e18, InvalidArgument, node.describe(),
                  ": upper_edge_hertz lies beyond the spectrum (mel edge ", i, " at bin ", bin, ")");
    edge[size_t(i)] = int64_t(bin);
  }
  checked_numel(node, {rows, mels}, "dft_length x num_mel_bins");
  std::vector<double> m(size_t(rows * mels), 0.0);
  auto set = [&](int64_t r, int64_t c, double v) {
    TERRACE_CHECK(r >= 0 && r < rows, InvalidArgument, node.describe(),
                  ": upper_edge_hertz lies beyond the spectrum");
    m[size_t(r * mels + c)] = v;
  };
  for (int64_t i = 0; i < mels; ++i) {
    const int64_t left = edge[size_t(i)], center = edge[size_t(i + 1)], right = edge[size_t(i + 2)];
    if (center == left) set(center, i, 1.0);
    for (int64_t j = left; center > left && j <= center; ++j)
      set(j, i, double(j - left) / double(center - left));
    for (int64_t j = center; j < right; ++j) set(j, i, double(right - j) / double(right - center));
  }
  ctx.set_output(0, Tensor::from_vector<double>({rows, mels}, m).cast(dtype_attr(node, "output_datatype", 1)));
}

}  // namespace

void register_misc_signal_kernels(KernelTable& t) {
  t.add(Op::HannWindow, hann_window);
  t.add(Op::HammingWindow, hamming_window);
  t.add(Op::BlackmanWindow, blackman_window);
  t.add(Op::DFT, dft_kernel);
  t.add(Op::STFT, stft_kernel);
  t.add(Op::MelWeightMatrix, mel_weight_matrix);
}

}  // namespace terrace::ops
