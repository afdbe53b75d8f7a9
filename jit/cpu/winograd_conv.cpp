// WinogradConv: F(2x2, 3x3) over blocks of tiles, each thread transforming, multiplying and
// transforming back its own tiles (no barrier between the phases).
#include "jit/cpu/winograd_conv.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "interp/env_flag.h"
#include "interp/error.h"
#include "jit/cpu/dnnl_common.h"

namespace terrace::jit {
namespace {

// Tiles a thread transforms and multiplies at once, at most: a multiple of the product kernel's 6
// rows. The 16 positions' inputs and products of 36 tiles by 256 channels in and out take 1.2 MB
// a thread, held between calls.
constexpr int64_t kBlockTiles = 36, kRows = 6;

struct Layout {
  int64_t cin, cout, h, w, th, tw, tiles;  // tiles: th * tw, per image
};

// V[pos][p][c] = (B^T d B)[pos] for the block's tiles p and every input channel c: d the 4x4
// patch whose top left is (2 ty - 1, 2 tx - 1), zeros outside the image.
__attribute__((target("avx2,fma"))) void transform_inputs(const Layout& l, const float* src, int64_t first,
                                                           int64_t count, float* v) {
  const int64_t plane = l.h * l.w * 8, image = l.cin * l.h * l.w;
  const __m256 zero = _mm256_setzero_ps();
  for (int64_t p = 0; p < count; ++p) {
    const int64_t tile = first + p, img = tile / l.tiles, ty = tile % l.tiles / l.tw, tx = tile % l.tw;
    const int64_t y0 = 2 * ty - 1, x0 = 2 * tx - 1;
    const bool inside = y0 >= 0 && x0 >= 0 && y0 + 4 <= l.h && x0 + 4 <= l.w;
    for (int64_t cb = 0; cb < l.cin / 8; ++cb) {
      const float* base = src + img * image + cb * plane;
      __m256 d[4][4];
      for (int r = 0; r < 4; ++r)
        for (int c = 0; c < 4; ++c) {
          const int64_t y = y0 + r, x = x0 + c;
          d[r][c] = inside || (y >= 0 && y < l.h && x >= 0 && x < l.w) ? _mm256_loadu_ps(base + (y * l.w + x) * 8)
                                                                       : zero;
        }
      __m256 t[4][4];
      for (int c = 0; c < 4; ++c) {
        t[0][c] = _mm256_sub_ps(d[0][c], d[2][c]);
        t[1][c] = _mm256_add_ps(d[1][c], d[2][c]);
        t[2][c] = _mm256_sub_ps(d[2][c], d[1][c]);
        t[3][c] = _mm256_sub_ps(d[1][c], d[3][c]);
      }
      float* out = v + p * l.cin + cb * 8;
      const int64_t pos_stride = count * l.cin;
      for (int r = 0; r < 4; ++r) {
        _mm256_storeu_ps(out + (4 * r + 0) * pos_stride, _mm256_sub_ps(t[r][0], t[r][2]));
        _mm256_storeu_ps(out + (4 * r + 1) * pos_stride, _mm256_add_ps(t[r][1], t[r][2]));
        _mm256_storeu_ps(out + (4 * r + 2) * pos_stride, _mm256_sub_ps(t[r][2], t[r][1]));
        _mm256_storeu_ps(out + (4 * r + 3) * pos_stride, _mm256_sub_ps(t[r][1], t[r][3]));
      }
    }
  }
}

// dst's 2x2 of each tile = A^T m A (+ bias, Relu) from the 16 positions' products m[pos][p][k].
__attribute__((target("avx2,fma"))) void transform_outputs(const Layout& l, const float* m, int64_t first,
                                                            int64_t count, const float* bias, bool relu,
                                                            float* dst) {
  const int64_t plane = l.h * l.w * 8, image = l.cout * l.h * l.w, pos_stride = count * l.cout;
  const __m256 zero = _mm256_setzero_ps();
  for (int64_t p = 0; p < count; ++p) {
    const int64_t tile = first + p, img = tile / l.tiles, ty = tile % l.tiles / l.tw, tx = tile % l.tw;
    for (int64_t kb = 0; kb < l.cout / 8; ++kb) {
      const float* in = m + p * l.cout + kb * 8;
      __m256 s[2][4];
      for (int c = 0; c < 4; ++c) {
        const __m256 m0 = _mm256_loadu_ps(in + (0 + c) * pos_stride), m1 = _mm256_loadu_ps(in + (4 + c) * pos_stride);
        const __m256 m2 = _mm256_loadu_ps(in + (8 + c) * pos_stride), m3 = _mm256_loadu_ps(in + (12 + c) * pos_stride);
        s[0][c] = _mm256_add_ps(_mm256_add_ps(m0, m1), m2);
        s[1][c] = _mm256_sub_ps(_mm256_sub_ps(m1, m2), m3);
      }
      const __m256 b = bias ? _mm256_loadu_ps(bias + kb * 8) : zero;
      float* out = dst + img * image + kb * plane;
      for (int r = 0; r < 2; ++r) {
        const int64_t y = 2 * ty + r;
        if (y >= l.h) break;
        __m256 v0 = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(s[r][0], s[r][1]), s[r][2]), b);
        __m256 v1 = _mm256_add_ps(_mm256_sub_ps(_mm256_sub_ps(s[r][1], s[r][2]), s[r][3]), b);
        if (relu) {  // max(0, x) keeps a NaN x, as the interpreter's Relu
          v0 = _mm256_max_ps(zero, v0);
          v1 = _mm256_max_ps(zero, v1);
        }
        _mm256_storeu_ps(out + (y * l.w + 2 * tx) * 8, v0);
        if (2 * tx + 1 < l.w) _mm256_storeu_ps(out + (y * l.w + 2 * tx + 1) * 8, v1);
      }
    }
  }
}

Layout layout_of(const WinogradConv::Geometry& g) {
  const int64_t th = (g.h + 1) / 2, tw = (g.w + 1) / 2;
  return {g.cin, g.cout, g.h, g.w, th, tw, th * tw};
}

}  // namespace

bool winograd_enabled(int64_t cin, int64_t cout) {
  return packed_gemm_supported() && env_flag("TERRACE_WINOGRAD", true) && cin >= 64 && cout >= 64 && cin % 8 == 0 &&
         cout % 8 == 0;
}

Tensor winograd_rounding_bound(const Tensor& z, const Tensor& w) {
  TERRACE_CHECK(z.dtype() == DType::Float64 && z.shape().size() == 4 && w.dtype() == DType::Float32 &&
                    w.shape().size() == 4 && w.shape()[1] == z.shape()[1] && w.shape()[2] == 3 && w.shape()[3] == 3,
                Internal, "winograd_rounding_bound: magnitudes ", shape_str(z.shape()), ", weights ", shape_str(w.shape()));
  const int64_t n = z.shape()[0], c = z.shape()[1], h = z.shape()[2], wd = z.shape()[3], k = w.shape()[0];
  const int64_t th = (h + 1) / 2, tw = (wd + 1) / 2;
  const double u = std::ldexp(1.0, -24), kw = 2.0 * double(c + 12), gamma = kw * u / (1 - kw * u);
  std::vector<double> wsum(size_t(k * c), 0.0), patch(size_t(c * th * tw));
  for (int64_t i = 0; i < k * c; ++i)
    for (int t = 0; t < 9; ++t) wsum[size_t(i)] += std::abs(double(w.data<float>()[i * 9 + t]));
  Tensor out = Tensor::zeros(DType::Float64, {n, k, h, wd});
  for (int64_t img = 0; img < n; ++img) {
    const double* zi = z.data<double>() + img * c * h * wd;
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t ty = 0; ty < th; ++ty)
        for (int64_t tx = 0; tx < tw; ++tx) {
          double sum = 0;
          for (int64_t y = 2 * ty - 1; y < 2 * ty + 3; ++y)
            for (int64_t x = 2 * tx - 1; x < 2 * tx + 3; ++x)
              if (y >= 0 && y < h && x >= 0 && x < wd) sum += zi[(ch * h + y) * wd + x];
          patch[size_t((ch * th + ty) * tw + tx)] = sum;
        }
    double* o = out.data<double>() + img * k * h * wd;
    for (int64_t kk = 0; kk < k; ++kk)
      for (int64_t ty = 0; ty < th; ++ty)
        for (int64_t tx = 0; tx < tw; ++tx) {
          double s = 0;
          for (int64_t ch = 0; ch < c; ++ch) s += wsum[size_t(kk * c + ch)] * patch[size_t((ch * th + ty) * tw + tx)];
          for (int64_t y = 2 * ty; y < std::min(h, 2 * ty + 2); ++y)
            for (int64_t x = 2 * tx; x < std::min(wd, 2 * tx + 2); ++x) o[(kk * h + y) * wd + x] = gamma * 4.0 * s;
        }
  }
  return out;
}

bool WinogradConv::fits(const Geometry& g, int threads) {
  if (!packed_gemm_supported() || g.n <= 0 || g.cin <= 0 || g.cout <= 0 || g.cin % 8 || g.cout % 8 || g.h < 2 ||
      g.w < 2)
    return false;
  return g.n * layout_of(g).tiles >= 12 * int64_t(std::max(1, threads));
}

WinogradConv::WinogradConv(const Geometry& g, const float* w, bool relu) : g_(g), relu_(relu) {
  TERRACE_CHECK(g.cin > 0 && g.cout > 0 && g.cin % 8 == 0 && g.cout % 8 == 0, Internal,
                "WinogradConv: channels not in blocks of 8");
  // U = G g G^T per output and input channel, G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1], in
  // double and rounded once.
  std::vector<std::vector<float>> u(16, std::vector<float>(size_t(g.cin * g.cout)));
  for (int64_t k = 0; k < g.cout; ++k)
    for (int64_t c = 0; c < g.cin; ++c) {
      const float* f = w + (k * g.cin + c) * 9;
      double gg[4][3];
      for (int j = 0; j < 3; ++j) {
        const double f0 = f[j], f1 = f[3 + j], f2 = f[6 + j];
        gg[0][j] = f0;
        gg[1][j] = 0.5 * (f0 + f1 + f2);
        gg[2][j] = 0.5 * (f0 - f1 + f2);
        gg[3][j] = f2;
      }
      for (int i = 0; i < 4; ++i) {
        const double r[4] = {gg[i][0], 0.5 * (gg[i][0] + gg[i][1] + gg[i][2]), 0.5 * (gg[i][0] - gg[i][1] + gg[i][2]),
                             gg[i][2]};
        for (int j = 0; j < 4; ++j) u[size_t(4 * i + j)][size_t(c * g.cout + k)] = float(r[j]);
      }
    }
  for (int pos = 0; pos < 16; ++pos)
    u_.push_back(std::make_unique<PackedWeights>(u[size_t(pos)].data(), g.cin, g.cout, false));
}

size_t WinogradConv::bytes() const {
  size_t n = 0;
  for (const auto& p : u_) n += p->bytes();
  return n;
}

void WinogradConv::run(const float* src, const float* bias, float* dst, int threads, size_t slot) const {
  const Layout l = layout_of(g_);
  const int64_t total = g_.n * l.tiles;
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const int team = omp_get_num_threads(), id = omp_get_thread_num();
    const int64_t begin = total * id / team, end = total * (id + 1) / team;
    const int64_t blocks = (end - begin + kBlockTiles - 1) / kBlockTiles;
    // Blocks of nearly equal size in whole kernel rows: 98 tiles make 3 blocks of ceil(98 / 3) = 33,
    // rounded up to 36 rows: 36, 36, 26.
    const int64_t even = (end - begin + blocks - 1) / std::max<int64_t>(1, blocks);
    const int64_t per = std::min(kBlockTiles, (even + kRows - 1) / kRows * kRows);
    float* v = thread_buffer(slot, size_t(16 * per * (l.cin + l.cout)) * sizeof(float));
    float* m = v + 16 * per * l.cin;
    for (int64_t first = begin; first < end; first += per) {
      const int64_t count = std::min(per, end - first);
      transform_inputs(l, src, first, count, v);
      for (int pos = 0; pos < 16; ++pos)
        u_[size_t(pos)]->multiply(v + pos * count * l.cin, count, nullptr, m + pos * count * l.cout, 1);
      transform_outputs(l, m, first, count, bias, relu_, dst);
    }
  }
}

}  // namespace terrace::jit
