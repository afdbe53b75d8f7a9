// MatMul, Gemm and Conv as oneDNN primitives on plain float32 buffers. The geometry of a
// convolution (pads, auto_pad, output size) is the interpreter's conv_geometry, so the attributes
// mean one thing everywhere; the arithmetic is oneDNN's, validated against the interpreter.
#include "jit/dnnl_ops.h"

#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <numeric>
#include <unordered_map>
#include <vector>

#include "interp/error.h"
#include "interp/exit_order.h"
#include "interp/interpreter.h"
#include "interp/omp_threads.h"
#include "interp/ops/conv.h"
#include "jit/dnnl_activation.h"
#include "jit/dnnl_common.h"
#include "jit/packed_gemm.h"
#include "jit/winograd_conv.h"

namespace terrace::jit {

// Never destroyed, and made with a first small primitive: oneDNN builds its own statics (the
// primitive cache, CPU detection) then, after which the handler that stops compiles at exit is
// registered again, to run before they are destroyed (interp/exit_order.h).
dnnl::engine& cpu_engine() {
  static dnnl::engine* engine = [] {
    auto* e = new dnnl::engine(dnnl::engine::kind::cpu, 0);
    try {
      const dnnl::memory::desc m = plain({1, 1});
      dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(m, m, m), *e));
    } catch (const dnnl::error&) {
      // a product oneDNN cannot build here fails again, with its reason, where it is needed
    }
    at_exit_refresh();
    return e;
  }();
  return *engine;
}

dnnl::memory::desc plain(const dnnl::memory::dims& dims) {
  dnnl::memory::dims strides(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) strides[i - 1] = strides[i] * dims[i];
  return dnnl::memory::desc(dims, dnnl::memory::data_type::f32, strides);
}

// True for a layout with blocks (oneDNN's packed weights, nChw16c), false for plain strides.
static bool is_blocked(const dnnl::memory::desc& d) {
  return d.data.format_kind != dnnl_blocked || d.data.format_desc.blocking.inner_nblks > 0;
}

// float32 `dims` with the last two dimensions' strides swapped: each [.., K, N] matrix stored as
// its transpose ([N, K] row-major), the batch dimensions outside as in plain().
static dnnl::memory::desc transposed_last_two(const dnnl::memory::dims& dims) {
  dnnl::memory::dims strides(dims.size(), 1);
  const size_t r = dims.size();
  if (r >= 2) {
    strides[r - 2] = 1;
    strides[r - 1] = dims[r - 2];
    dnnl::memory::dim inner = dims[r - 2] * dims[r - 1];
    for (size_t i = r - 2; i-- > 0;) {
      strides[i] = inner;
      inner *= dims[i];
    }
  }
  return dnnl::memory::desc(dims, dnnl::memory::data_type::f32, strides);
}

dnnl::memory wrap(const dnnl::memory::desc& d, const float* data) {
  return dnnl::memory(d, cpu_engine(), const_cast<float*>(data));
}

// A gemm-based product with constant weights at least this large (multiply-adds) times both
// plain orders of its weights when it is built (MatMul below); smaller ones read them as given.
constexpr double kTimedLayoutFlops = 1e7;

// Products of at least this many rows, with weights of at least TERRACE_PACKED_GEMM_BYTES bytes
// (unset: any), run on Terrace's packed weights where oneDNN has no packed layout (MatMul below).
constexpr int64_t kPackedGemmRows = 16;
static double packed_gemm_bytes() {
  const char* v = std::getenv("TERRACE_PACKED_GEMM_BYTES");
  return v && *v ? std::atof(v) : 0.0;
}

// TERRACE_GEMM_WEIGHT_ORDER: "given" (never copy), "other" (always copy: tests), or unset (timed).
static std::string weight_order() {
  const char* v = std::getenv("TERRACE_GEMM_WEIGHT_ORDER");
  return v && (std::string(v) == "given" || std::string(v) == "other") ? std::string(v) : std::string();
}

// One thread, or every thread of the caller's OpenMP setting: never a team of another size. In
// libgomp a parallel region whose team size differs from the previous one's re-docks the pool's
// workers, which on 16 cores cost far more than sizing teams by work saved (bench/RESULTS.md).
// Work under kSerialWork multiply-adds runs on the calling thread alone (no fork, no join, the
// workers left as they are).
int threads_for(double flops) {
  return flops < kSerialWork ? 1 : omp_get_max_threads();
}

dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

namespace {

using dnnl::memory;
using Dims = memory::dims;


// A stream and a scratchpad buffer per calling thread (calls may come from several threads at
// once), kept across calls: a batch-1 Linear layer takes tens of microseconds, and creating both
// each time was a visible part of it.
dnnl::stream& thread_stream() {
  thread_local dnnl::stream stream(cpu_engine());
  return stream;
}
void* thread_scratch(size_t bytes) {
  thread_local std::vector<unsigned char> buffer;
  if (buffer.size() < bytes) buffer.resize(bytes);
  return buffer.data();
}

void append_activation(dnnl::post_ops& ops, const DnnlActivation& a) { dnnl_append_activation(ops, a); }

// The interpreter's Relu and Clip: NaN stays.
float activate(const DnnlActivation& a, float x) {
  switch (a.kind) {
    case DnnlActivation::Kind::Relu: return x < 0.0f ? 0.0f : x;
    case DnnlActivation::Kind::Clip: {
      const float r = x < a.lo ? a.lo : x;
      return r > a.hi ? a.hi : r;
    }
    default: return dnnl_activation_apply(a, x);  // Sigmoid, Tanh, ... (jit/dnnl_activation.h)
  }
}

void apply_activation(const DnnlActivation& a, float* p, size_t n) {
  if (a.kind != DnnlActivation::Kind::None)
    for (size_t i = 0; i < n; ++i) p[i] = activate(a, p[i]);
}

std::string dims_str(const Dims& d) { return shape_str(Shape(d.begin(), d.end())); }
std::string dims_str(const memory::desc& d) { return dims_str(d.dims()); }
std::string activation_name(const DnnlActivation& a) {
  switch (a.kind) {
    case DnnlActivation::Kind::Relu: return "relu";
    case DnnlActivation::Kind::Clip: return "clip(" + std::to_string(a.lo) + ", " + std::to_string(a.hi) + ")";
    default: return dnnl_activation_name(a);
  }
}
std::string activation_text(const DnnlActivation& a) {
  return a.kind == DnnlActivation::Kind::None ? ""
                                              : "; post-op " + activation_name(a) + " (fused on inputs that are all finite)";
}

// The number of floats a plain memory descriptor spans.
size_t floats_of(const memory::desc& d) { return d.get_size() / sizeof(float); }

// A product or convolution as run: built with its activation as a post-op (`fused`) and, when it
// has one, also without (`plain`, the activation then applied after it with the interpreter's
// semantics), for calls whose inputs are not all finite.
struct Activated {
  DnnlActivation activation;
  int threads = 1;
  dnnl::primitive fused, plain;
  memory::desc fused_scratch, plain_scratch;

  bool has_activation() const { return activation.kind != DnnlActivation::Kind::None; }
  // `inputs_finite` is asked only when there is an activation (it reads every input).
  template <typename Finite>
  void run(BoundArgs& args, Finite&& inputs_finite, float* out, size_t n) const {
    const bool use_fused = !has_activation() || inputs_finite();
    args.execute(use_fused ? fused : plain, use_fused ? fused_scratch : plain_scratch, threads);
    if (!use_fused) apply_activation(activation, out, n);
  }
};

// ---- Degenerate products: a zero-sized operand or result ----
//
// oneDNN 2.6 must never see a zero-sized dimension: on AVX-512 machines creating a matmul or
// inner-product primitive descriptor with M = 0 or K = 0 divides by zero (SIGFPE, the process
// dies), and executing a Gemm with N = 0 throws "could not execute a primitive". On AVX2 the same
// shapes happen to work, so a green run there proves nothing. ONNX defines every such case without
// arithmetic: an empty result is nothing to write; a non-empty result whose sums are empty (K = 0,
// no input channels, an empty input read only through padding) is alpha * 0 plus beta * C for
// Gemm, zero for MatMul, the bias (or zero) for Conv, each then through the activation. This
// object computes exactly that and calls no library.
class EmptySum : public DnnlPrimitive {
 public:
  // `addend`: how the term added to the empty sum is read: the input that holds it (Gemm's C,
  // Conv's bias) and its strides into the output; scale: what multiplies it (Gemm's beta).
  struct Addend {
    int input = -1;
    std::vector<int64_t> strides;  // per output dimension, 0 where broadcast
    double scale = 1.0;
  };
  EmptySum(Shape out, double sum_scale, Addend addend, DnnlActivation activation)
      : out_(std::move(out)), sum_(0.0 * sum_scale), addend_(std::move(addend)), activation_(activation) {
    description_ = "no library call (a zero-sized operand or result): dst " + shape_str(out_) + " = " +
                   (addend_.input >= 0 ? "scale * input " + std::to_string(addend_.input) + " broadcast" : "0") +
                   (activation_.kind != DnnlActivation::Kind::None ? ", then " + activation_name(activation_) : "");
  }
  const Shape& output_shape() const override { return out_; }
  void run(const std::vector<const float*>& in, float* out) const override {
    const int64_t n = shape_numel(out_);
    const float* add = addend_.input >= 0 ? in.at(size_t(addend_.input)) : nullptr;
    std::vector<int64_t> index(out_.size(), 0);
    for (int64_t i = 0; i < n; ++i) {
      double v = sum_;
      if (add) {
        int64_t offset = 0;
        for (size_t d = 0; d < index.size(); ++d) offset += index[d] * addend_.strides[d];
        v += addend_.scale * double(add[offset]);
      }
      out[i] = activate(activation_, float(v));
      for (size_t d = index.size(); d-- > 0;) {  // next row-major index
        if (++index[d] < out_[d]) break;
        index[d] = 0;
      }
    }
  }

 private:
  Shape out_;
  double sum_;  // alpha * (an empty sum): 0, or NaN for an infinite or NaN alpha
  Addend addend_;
  DnnlActivation activation_;
};

bool has_zero_dim(const Shape& s) { return std::find(s.begin(), s.end(), 0) != s.end(); }

// Strides reading a tensor of shape `in` broadcast (numpy rules, right-aligned) to `out`.
std::vector<int64_t> broadcast_read_strides(const Shape& in, const Shape& out) {
  std::vector<int64_t> strides(out.size(), 0);
  int64_t stride = 1;
  for (size_t k = 0; k < in.size(); ++k) {
    const size_t di = in.size() - 1 - k, d = out.size() - 1 - k;
    if (in[di] != 1) strides[d] = stride;
    stride *= in[di];
  }
  return strides;
}

// ---- MatMul and Gemm: dst = alpha * a . b, plus beta * c when Gemm has a C ----

class MatMul : public DnnlPrimitive {
 public:
  // `out`: the ONNX output shape, the dense dst with promoted unit dimensions dropped.
  // `constants`: per input (a, b, c), its value when known at compile time: an input with an
  // activation to fuse is then checked for finite values once, here, instead of on every call
  // (reading a batch-1 layer's weights each call took 70% of the MLP's time).
  // `bias`: a MatMul's fused bias Add, one value per output column ([1, ..., 1, N]), read as input
  // 2 (MatMul has no C).
  MatMul(const Node& node, memory::desc a, memory::desc b, const Dims& dst, Shape out, float alpha,
         float beta, std::optional<Shape> c, const DnnlActivation& activation,
         const std::vector<const Tensor*>& constants, std::optional<memory::desc> bias = std::nullopt)
      : out_(std::move(out)), a_(std::move(a)), b_(std::move(b)), dst_(plain(dst)), c_(std::move(c)),
        bias_(std::move(bias)) {
    for (size_t i = 0; i < constants.size() && i < check_.size(); ++i) {
      if (!constants[i] || activation.kind == DnnlActivation::Kind::None) continue;
      check_[i] = false;
      const Tensor& t = *constants[i];
      if (t.dtype() != DType::Float32 || !all_finite(t.data<float>(), size_t(t.numel()), 1)) never_fused_ = true;
    }
    double flops = double(a_.dims().back());  // K
    for (memory::dim d : dst) flops *= double(d);
    // A product with one row (a batch-1 Linear layer, a GEMV) gets threads by the same rule: with
    // the callers' OpenMP workers kept spinning between primitives (interp/omp_threads.h), the
    // MLP's [1,784] x [784,512] on 2 threads takes the MLP from 0.032 to 0.023 ms a call on 2
    // cores (it was given one thread while a sleeping worker's wake-up cost more than the split).
    prims_.threads = threads_for(flops);
    prims_.activation = activation;
    // Constant weights are laid out once, here, in the layout oneDNN prefers for this product
    // (blocked for its brgemm kernels), instead of being packed from plain rows on every call.
    const bool pack = constants.size() > 1 && constants[1] && constants[1]->dtype() == DType::Float32 &&
                      size_t(constants[1]->numel()) == floats_of(b_);
    memory::desc weights = pack ? memory::desc(b_.dims(), memory::data_type::f32, memory::format_tag::any) : b_;
    auto build = [&](const DnnlActivation& act, memory::desc& scratch, int threads) {
      return building(node, threads, "primitive", [&] {
        dnnl::primitive_attr attr = user_scratchpad();
        if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
        dnnl::post_ops ops;
        if (c_) ops.append_sum(beta);  // dst = alpha * a . b + beta * dst, dst holding C
        append_activation(ops, act);
        attr.set_post_ops(ops);
        dnnl::matmul::primitive_desc pd(bias_ ? dnnl::matmul::desc(a_, weights, *bias_, dst_)
                                              : dnnl::matmul::desc(a_, weights, dst_),
                                        attr, cpu_engine());
        scratch = pd.scratchpad_desc();
        weights = pd.weights_desc();  // the plain-activation twin takes the same layout
        return dnnl::primitive(dnnl::matmul(pd));
      });
    };
    prims_.fused = build(activation, prims_.fused_scratch, prims_.threads);
    // Constant weights copied once, on the compile thread, into `to` (threads_to_run: a oneDNN
    // primitive runs with the thread count it was built with).
    auto laid_out = [&](const memory::desc& to) {
      memory m(to, cpu_engine());
      const int t = threads_to_run(prims_.threads);
      building(node, t, "primitive", [&] {
        dnnl::reorder::primitive_desc pd(cpu_engine(), b_, cpu_engine(), to, user_scratchpad());
        execute(dnnl::reorder(pd), pd.scratchpad_desc(),
                {{DNNL_ARG_FROM, wrap(b_, constants[1]->data<float>())}, {DNNL_ARG_TO, m}}, t);
      });
      return m;
    };
    bool relaid = false;  // copied in the other plain order
    // No blocked layout of oneDNN's own (its gemm:jit, below AVX-512, which packs the weights again
    // on every call): a plain 2-D product of at least kPackedGemmRows rows, A by rows, without
    // Gemm's C or alpha, runs on Terrace's packed weights (jit/packed_gemm.h) if the CPU has AVX2
    // and FMA: faster than gemm:jit on every product measured. A product of one row (a batch-1
    // Linear layer) takes the packed weights' GEMV, Relu in its stores, also where oneDNN has a
    // blocked layout of its own (AVX-512): faster than oneDNN's there too (bench/RESULTS.md).
    const Dims& ad = a_.dims();
    const Dims& bd = b_.dims();
    const bool b_rows = b_ == plain(bd), b_columns = !b_rows && b_ == transposed_last_two(bd);
    const bool one_row = ad.size() == 2 && ad[0] == 1;
    if (pack && (!is_blocked(weights) || one_row) && packed_gemm_supported() && ad.size() == 2 && a_ == plain(ad) &&
        bd.size() == 2 && dst.size() == 2 && !c_ && alpha == 1.0f && (ad[0] >= kPackedGemmRows || one_row) &&
        double(floats_of(b_)) * sizeof(float) >= packed_gemm_bytes() && (b_rows || b_columns)) {
      own_ = std::make_unique<PackedWeights>(constants[1]->data<float>(), bd[0], bd[1], b_columns);
      own_relu_ = activation.kind == DnnlActivation::Kind::Relu;  // in the product's own stores
      if (prims_.has_activation() && !own_relu_) {
        // The activation in place over the result, as the fused post-op computes it.
        dnnl::post_ops ops;
        append_activation(ops, activation);
        float scale = 1.0f, act_alpha = 0.0f, act_beta = 0.0f;
        dnnl::algorithm alg = dnnl::algorithm::undef;
        ops.get_params_eltwise(0, scale, alg, act_alpha, act_beta);
        own_activation_ = building(node, prims_.threads, "primitive", [&] {
          dnnl::eltwise_forward::primitive_desc pd(
              dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference, alg, dst_, act_alpha, act_beta),
              user_scratchpad(), cpu_engine());
          own_activation_scratch_ = pd.scratchpad_desc();
          return dnnl::primitive(dnnl::eltwise_forward(pd));
        });
      }
      constants[1]->drop_resident_pages();  // read from the packed copy from now on
      description_ = "Terrace's packed-weight product (" + node.describe() + "): src " + dims_str(a_) +
                     " x weights " + dims_str(b_) + " -> dst " + dims_str(dst_) +
                     (bias_ ? "; bias " + dims_str(*bias_) : "") + activation_text(activation) +
                     "; constant weights packed once in 16-column panels (AVX2, FMA); " +
                     std::to_string(prims_.threads) + " OpenMP threads";
      return;
    }
    if (pack && !is_blocked(weights)) {
      // No blocked layout of its own: oneDNN's gemm-based product (below AVX-512, or forced there
      // by DNNL_MAX_CPU_ISA), which reads the weights in whichever plain order it is given. The
      // order can halve a product's time (BERT's up projection: bench/RESULTS.md), but a copy
      // costs the weights' size again, so the weights are read as given unless the other order,
      // measured here on this machine, takes at most 3/4 of the time.
      if (weights != b_) {
        weights = b_;
        prims_.fused = build(activation, prims_.fused_scratch, prims_.threads);
      }
      const memory::desc other = b_ == transposed_last_two(b_.dims()) ? plain(b_.dims()) : transposed_last_two(b_.dims());
      const std::string order = weight_order();
      if (order == "other" || (order.empty() && flops >= kTimedLayoutFlops)) {
        const dnnl::primitive given = prims_.fused;
        const memory::desc given_scratch = prims_.fused_scratch;
        weights = other;
        prims_.fused = build(activation, prims_.fused_scratch, prims_.threads);
        memory copy = laid_out(weights);
        std::vector<float> src(floats_of(a_)), dst(floats_of(dst_)), bias(bias_ ? floats_of(*bias_) : 0);
        // Timed with the threads this thread may run (threads_to_run: one on the compile thread).
        // A oneDNN primitive starts a team of the count it was built with whatever the caller's
        // setting, and a team started on a background thread throttles the callers' spin-wait
        // for the rest of the process (interp/omp_threads.h): so a background compile times
        // twins built for its one thread.
        const int timed_threads = threads_to_run(prims_.threads);
        auto run_ms = [&](const dnnl::primitive& p, const memory::desc& scratch, const memory& w) {
          std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, wrap(a_, src.data())}, {DNNL_ARG_WEIGHTS, w},
                                                  {DNNL_ARG_DST, wrap(dst_, dst.data())}};
          if (bias_) args.emplace(DNNL_ARG_BIAS, wrap(*bias_, bias.data()));
          const auto t0 = std::chrono::steady_clock::now();
          execute(p, scratch, args, timed_threads);
          return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        };
        const bool forced = order == "other";
        double t_given = 1e300, t_other = 1e300;
        if (!forced) {
          dnnl::primitive timed_given = given, timed_other = prims_.fused;
          memory::desc timed_given_scratch = given_scratch, timed_other_scratch = prims_.fused_scratch;
          if (timed_threads != prims_.threads) {
            weights = b_;
            timed_given = build(activation, timed_given_scratch, timed_threads);
            weights = other;
            timed_other = build(activation, timed_other_scratch, timed_threads);
          }
          // Alternately, so that a burst of other work on the machine slows both alike; the first
          // run of each warms the caches; the best of the other three counts.
          for (int i = 0; i < 4; ++i) {
            const double g = run_ms(timed_given, timed_given_scratch, wrap(b_, constants[1]->data<float>()));
            const double o = run_ms(timed_other, timed_other_scratch, copy);
            if (i) t_given = std::min(t_given, g), t_other = std::min(t_other, o);
          }
        }
        relaid = forced || t_other <= 0.75 * t_given;
        if (relaid) {
          packed_ = copy;
        } else {
          weights = b_;
          prims_.fused = given;
          prims_.fused_scratch = given_scratch;
        }
      }
    }
    if (prims_.has_activation()) prims_.plain = build({}, prims_.plain_scratch, prims_.threads);
    if (pack && weights != b_ && !relaid) packed_ = laid_out(weights);  // oneDNN's blocked layout
    if (packed_) constants[1]->drop_resident_pages();  // read from the copy from now on (Tensor::file_backed)
    description_ = "oneDNN matmul (" + node.describe() + "): src " + dims_str(a_) + " x weights " + dims_str(b_) +
                   " -> dst " + dims_str(dst_) + "; alpha " + std::to_string(alpha) +
                   (c_ ? "; sum post-op (C " + shape_str(*c_) + ", beta " + std::to_string(beta) + ")" : "") +
                   (bias_ ? "; bias " + dims_str(*bias_) : "") +
                   activation_text(activation) + (packed_ ? "; constant weights packed once" : "") +
                   (relaid ? "; constant weights copied in the other plain order (measured faster)" : "") + "; " +
                   std::to_string(prims_.threads) + " OpenMP threads";
  }
  const Shape& output_shape() const override { return out_; }
  void run(const std::vector<const float*>& in, float* out) const override {
    const int t = prims_.threads;
    if (own_) {
      // threads_to_run: one thread where this is a background thread (a validation), as execute().
      const int team = threads_to_run(t);
      const int64_t m = a_.dims()[0];
      const size_t rows = own_->rows_floats(m);
      own_->multiply(in[0], m, bias_ ? in.at(2) : nullptr, out, team,
                     rows ? thread_buffer(0, rows * sizeof(float)) : nullptr, own_relu_);
      if (!prims_.has_activation() || own_relu_) return;
      // As Activated::run: oneDNN's activation only where every input is finite.
      if (inputs_finite(in))
        execute(own_activation_, own_activation_scratch_, {{DNNL_ARG_SRC, wrap(dst_, out)}, {DNNL_ARG_DST, wrap(dst_, out)}}, t);
      else
        apply_activation(prims_.activation, out, floats_of(dst_));
      return;
    }
    auto finite = [&] { return inputs_finite(in); };
    if (c_) broadcast_c(in.at(2), out);
    // This object's bound arguments, or a set of this call's own when another call holds them.
    std::unique_lock<std::mutex> lock(bound_mu_, std::try_to_lock);
    BoundArgs own;
    BoundArgs& args = lock.owns_lock() ? bound_ : own;
    args.bind(DNNL_ARG_SRC, a_, in[0]);
    if (packed_) args.bind(DNNL_ARG_WEIGHTS, packed_);
    else args.bind(DNNL_ARG_WEIGHTS, b_, in[1]);
    args.bind(DNNL_ARG_DST, dst_, out);
    if (bias_) args.bind(DNNL_ARG_BIAS, *bias_, in.at(2));
    prims_.run(args, finite, out, size_t(shape_numel(out_)));
  }

 private:
  // Whether the inputs read on each call (check_) are all finite, so that oneDNN's fused activation
  // may run (Activated); read with the threads this thread may run (threads_to_run: one on a
  // background thread, a validation's, which must start no OpenMP team: interp/omp_threads.h).
  bool inputs_finite(const std::vector<const float*>& in) const {
    const int t = threads_to_run(prims_.threads);
    return !never_fused_ && (!check_[0] || all_finite(in[0], floats_of(a_), t)) &&
           (!check_[1] || all_finite(in[1], floats_of(b_), t)) &&
           (!c_ || !check_[2] || all_finite(in.at(2), size_t(shape_numel(*c_)), t)) &&
           (!bias_ || !check_[2] || all_finite(in.at(2), floats_of(*bias_), t));
  }

  // Gemm's C, of any shape that broadcasts to [M, N], written into the [M, N] output.
  void broadcast_c(const float* c, float* out) const {
    const int64_t M = out_[0], N = out_[1];
    Shape cs = *c_;
    while (cs.size() < 2) cs.insert(cs.begin(), 1);
    const int64_t row_stride = cs[0] == 1 ? 0 : cs[1], col_stride = cs[1] == 1 ? 0 : 1;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) out[i * N + j] = c[i * row_stride + j * col_stride];
  }

  Shape out_;
  memory::desc a_, b_, dst_;
  std::optional<Shape> c_;
  std::optional<memory::desc> bias_;
  Activated prims_;
  mutable std::mutex bound_mu_;
  mutable BoundArgs bound_;  // the arguments' memory objects, kept between calls (BoundArgs)
  memory packed_;  // constant weights in the primitive's own layout (empty: read from the input)
  std::unique_ptr<PackedWeights> own_;  // or in Terrace's panels, multiplied by jit/packed_gemm
  bool own_relu_ = false;               // with own_: a Relu, applied by own_->multiply
  dnnl::primitive own_activation_;      // with own_: another activation, in place over the result
  memory::desc own_activation_scratch_;
  std::array<bool, 3> check_{true, true, true};  // per input: read for non-finite values on each call
  bool never_fused_ = false;  // a constant input holds a non-finite value: the activation runs after
};

std::unique_ptr<DnnlPrimitive> make_matmul(const Node& node, const std::vector<Shape>& shapes,
                                           const std::vector<const Tensor*>& constants,
                                           const DnnlActivation& activation) {
  // A third shape: the bias of an Add tier 1 fused after the MatMul (cpu_library's matmul_bias).
  TERRACE_CHECK(shapes.size() == 2 || shapes.size() == 3, InvalidArgument, node.describe(),
                ": MatMul takes 2 inputs (and a fused bias)");
  Shape a = shapes[0], b = shapes[1];
  TERRACE_CHECK(!a.empty() && !b.empty(), InvalidArgument, node.describe(), ": MatMul of a scalar");
  const bool a_vec = a.size() == 1, b_vec = b.size() == 1;
  if (a_vec) a.insert(a.begin(), 1);  // [K] -> [1, K]
  if (b_vec) b.push_back(1);          // [K] -> [K, 1]
  const size_t rank = std::max(a.size(), b.size());
  TERRACE_CHECK(rank <= 12, NotImplemented, node.describe(), ": rank ", rank, " (oneDNN takes 12)");
  a.insert(a.begin(), rank - a.size(), 1);
  b.insert(b.begin(), rank - b.size(), 1);
  TERRACE_CHECK(a[rank - 1] == b[rank - 2], InvalidArgument, node.describe(), ": inner dimensions ",
                shape_str(shapes[0]), " and ", shape_str(shapes[1]), " differ");
  Dims dst(rank);
  for (size_t i = 0; i + 2 < rank; ++i) {
    TERRACE_CHECK(a[i] == b[i] || a[i] == 1 || b[i] == 1, InvalidArgument, node.describe(),
                  ": batch dimensions of ", shape_str(shapes[0]), " and ", shape_str(shapes[1]),
                  " do not broadcast");
    dst[i] = a[i] == 1 ? b[i] : a[i];  // numpy broadcasting: 1 stretches, 0 does not
  }
  dst[rank - 2] = a[rank - 2];
  dst[rank - 1] = b[rank - 1];
  Shape out(dst.begin(), dst.end());
  if (b_vec) out.pop_back();
  if (a_vec) out.erase(out.end() - (b_vec ? 1 : 2));
  std::optional<memory::desc> bias;
  EmptySum::Addend addend;
  if (shapes.size() == 3) {
    const Shape& c = shapes[2];
    const int64_t n = dst[rank - 1];
    bool row = !a_vec && !b_vec && !c.empty() && c.size() <= rank && c.back() == n;
    for (size_t d = 0; row && d + 1 < c.size(); ++d) row = c[d] == 1;
    TERRACE_CHECK(row, InvalidArgument, node.describe(), ": a fused bias of shape ", shape_str(c),
                  " is not one value per column of the ", shape_str(out), " product");
    Dims bd(rank, 1);
    bd[rank - 1] = n;
    bias = plain(bd);
    addend = {2, broadcast_read_strides(c, out), 1.0};
  }
  if (has_zero_dim(a) || has_zero_dim(b) || has_zero_dim(out))
    return std::make_unique<EmptySum>(std::move(out), 1.0, addend, activation);
  // One matrix B shared by every batch of A (a Linear layer over [batch, tokens, features]): the
  // batches fold into A's rows, a plain [M, K] x [K, N] product (the same bytes), which oneDNN's
  // brgemm runs faster than the batched form, and whose bias is a plain row.
  if (rank > 2 && std::all_of(b.begin(), b.end() - 2, [](int64_t d) { return d == 1; })) {
    const int64_t rows = std::accumulate(dst.begin(), dst.end() - 1, int64_t(1), std::multiplies<int64_t>());
    const int64_t k = a[rank - 1], n = dst[rank - 1];
    return std::make_unique<MatMul>(node, plain({rows, k}), plain({k, n}), Dims{rows, n}, std::move(out), 1.0f,
                                    0.0f, std::nullopt, activation, constants,
                                    bias ? std::optional(plain({1, n})) : std::nullopt);
  }
  return std::make_unique<MatMul>(node, plain(Dims(a.begin(), a.end())), plain(Dims(b.begin(), b.end())),
                                  dst, std::move(out), 1.0f, 0.0f, std::nullopt, activation, constants, bias);
}

// Gemm: A [M, K] or [K, M] (transA) and B [K, N] or [N, K] (transB), read through strides.
std::unique_ptr<DnnlPrimitive> make_gemm(const Node& node, const std::vector<Shape>& shapes,
                                         const std::vector<const Tensor*>& constants,
                                         const DnnlActivation& activation) {
  TERRACE_CHECK(shapes.size() == 2 || shapes.size() == 3, InvalidArgument, node.describe(),
                ": Gemm takes 2 or 3 inputs");
  const Shape &a = shapes[0], &b = shapes[1];
  TERRACE_CHECK(a.size() == 2 && b.size() == 2, InvalidArgument, node.describe(),
                ": A and B must be matrices, got ", shape_str(a), " and ", shape_str(b));
  const bool ta = node.attr_int("transA", 0) != 0, tb = node.attr_int("transB", 0) != 0;
  const int64_t M = ta ? a[1] : a[0], K = ta ? a[0] : a[1];
  const int64_t Kb = tb ? b[1] : b[0], N = tb ? b[0] : b[1];
  TERRACE_CHECK(K == Kb, InvalidArgument, node.describe(), ": inner dimensions ", K, " and ", Kb, " differ");
  memory::desc ad({M, K}, memory::data_type::f32, ta ? Dims{1, M} : Dims{K, 1});
  memory::desc bd({K, N}, memory::data_type::f32, tb ? Dims{1, K} : Dims{N, 1});
  const float alpha = node.attr_float("alpha", 1.0f), beta = node.attr_float("beta", 1.0f);
  std::optional<Shape> c;
  if (shapes.size() == 3) {
    Shape c2 = shapes[2];
    TERRACE_CHECK(c2.size() <= 2, InvalidArgument, node.describe(), ": C of rank ", c2.size());
    while (c2.size() < 2) c2.insert(c2.begin(), 1);
    TERRACE_CHECK((c2[0] == M || c2[0] == 1) && (c2[1] == N || c2[1] == 1), InvalidArgument,
                  node.describe(), ": C ", shape_str(shapes[2]), " does not broadcast to [", M, ",", N, "]");
    if (beta != 0.0f) c = shapes[2];
  }
  if (M == 0 || N == 0 || K == 0) {
    EmptySum::Addend addend;
    if (shapes.size() == 3) addend = {2, broadcast_read_strides(shapes[2], {M, N}), beta};
    return std::make_unique<EmptySum>(Shape{M, N}, alpha, std::move(addend), activation);
  }
  // C one value per column (a Linear layer's bias, [N] or [1, N]) added as is: oneDNN's bias,
  // added in the product's stores, instead of C copied into every row of the output before a sum
  // post-op (a scalar loop over the output on every call).
  if (c && alpha == 1.0f && beta == 1.0f && (c->size() < 2 || (*c)[0] == 1) && (c->empty() ? 1 : c->back()) == N)
    return std::make_unique<MatMul>(node, ad, bd, Dims{M, N}, Shape{M, N}, 1.0f, 0.0f, std::nullopt, activation,
                                    constants, plain({1, N}));
  return std::make_unique<MatMul>(node, ad, bd, Dims{M, N}, Shape{M, N}, alpha, beta, std::move(c), activation,
                                  constants);
}

// ---- MaxPool, AveragePool and (in chains) GlobalAveragePool, GlobalMaxPool ----

// The window of one spatial dim, as the interpreter resolves it (auto_pad, pads, ceil_mode).
struct PoolDim {
  int64_t in = 0, kernel = 1, stride = 1, dilation = 1, pad_begin = 0, pad_end = 0, out = 0;
};

// The ONNX pooling geometry of `node` on input x (the interpreter's rules, interp/ops/nn_pool.cpp).
std::vector<PoolDim> pool_dims(const Node& node, const Shape& x) {
  TERRACE_CHECK(x.size() >= 3 && x.size() <= 5, NotImplemented, node.describe(), ": tier 1 pools 1 to 3 spatial dims");
  const size_t n = x.size() - 2;
  if (node.op == Op::GlobalAveragePool || node.op == Op::GlobalMaxPool) {  // one window: the whole of each dim
    std::vector<PoolDim> dims(n);
    for (size_t i = 0; i < n; ++i) {  // an empty dim: a window of 0 (a chain with it runs the reference path)
      dims[i].in = dims[i].kernel = x[i + 2];
      dims[i].out = 1;
    }
    return dims;
  }
  TERRACE_CHECK(node.has_attr("kernel_shape"), InvalidModel, node.describe(), ": attribute 'kernel_shape' is required");
  auto ints = [&](const char* name, size_t count, int64_t def, int64_t min) {
    std::vector<int64_t> v = node.attr_ints(name, std::vector<int64_t>(count, def));
    TERRACE_CHECK(v.size() == count, InvalidModel, node.describe(), ": attribute '", name, "' has ", v.size(),
                  " values, expected ", count);
    for (int64_t e : v)
      TERRACE_CHECK(e >= min, InvalidModel, node.describe(), ": attribute '", name, "' values must be >= ", min);
    return v;
  };
  const std::vector<int64_t> kernel = ints("kernel_shape", n, 1, 1), strides = ints("strides", n, 1, 1),
                             dilations = ints("dilations", n, 1, 1), pads = ints("pads", 2 * n, 0, 0);
  const std::string auto_pad = node.attr_string("auto_pad", "NOTSET");
  const bool ceil_mode = node.attr_int("ceil_mode", 0) != 0;
  std::vector<PoolDim> dims(n);
  for (size_t i = 0; i < n; ++i) {
    PoolDim& d = dims[i];
    d.in = x[i + 2];
    d.kernel = kernel[i];
    d.stride = strides[i];
    d.dilation = dilations[i];
    const int64_t extent = (d.kernel - 1) * d.dilation + 1;
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      d.out = (d.in + d.stride - 1) / d.stride;
      const int64_t total = std::max<int64_t>(0, (d.out - 1) * d.stride + extent - d.in);
      d.pad_begin = auto_pad == "SAME_LOWER" ? (total + 1) / 2 : total / 2;
      d.pad_end = total - d.pad_begin;
      continue;
    }
    TERRACE_CHECK(auto_pad == "NOTSET" || auto_pad == "VALID", InvalidModel, node.describe(), ": unknown auto_pad '",
                  auto_pad, "'");
    if (auto_pad == "NOTSET") {
      d.pad_begin = pads[i];
      d.pad_end = pads[i + n];
    }
    const int64_t span = d.in + d.pad_begin + d.pad_end - extent;
    TERRACE_CHECK(span >= 0, InvalidArgument, node.describe(), ": the pooling window (extent ", extent,
                  ") is larger than the padded input (", d.in + d.pad_begin + d.pad_end, ")");
    d.out = (ceil_mode ? (span + d.stride - 1) / d.stride : span / d.stride) + 1;
    if (ceil_mode && (d.out - 1) * d.stride >= d.in + d.pad_begin) --d.out;
  }
  return dims;
}

// The pool's output shape on x: its batch and channels, then each spatial dim's window count.
Shape pool_out_shape(const Node& node, const Shape& x) {
  Shape out{x[0], x[1]};
  for (const PoolDim& d : pool_dims(node, x)) out.push_back(d.out);
  return out;
}

// What oneDNN's pooling primitive takes for `node` on x: the window per spatial dim, with the end
// padding that gives the interpreter's output size by floor division (see Pool below), refusing
// the forms oneDNN cannot match.
struct PoolSpec {
  Dims strides, kernel, dilation, pad_l, pad_r;
  double taps = 1;
  dnnl::algorithm alg = dnnl::algorithm::pooling_max;
  bool include_pad = false;
};
PoolSpec pool_spec(const Node& node, const Shape& x) {
  const std::vector<PoolDim> dims = pool_dims(node, x);
  PoolSpec p;
  const bool max = node.op == Op::MaxPool || node.op == Op::GlobalMaxPool;
  p.include_pad = !max && node.attr_int("count_include_pad", 0) != 0;
  p.alg = max ? dnnl::algorithm::pooling_max
              : p.include_pad ? dnnl::algorithm::pooling_avg_include_padding : dnnl::algorithm::pooling_avg_exclude_padding;
  for (const PoolDim& d : dims) {
    TERRACE_CHECK(d.kernel >= 1, NotImplemented, node.describe(), ": tier 1 does not pool an empty window");
    const int64_t extent = (d.kernel - 1) * d.dilation + 1;
    // The end padding oneDNN needs for d.out windows by floor division.
    const int64_t end = (d.out - 1) * d.stride + extent - d.in - d.pad_begin;
    TERRACE_CHECK(!p.include_pad || end == d.pad_end, NotImplemented, node.describe(),
                  ": tier 1 does not run an AveragePool counting padding whose last window (ceil_mode) passes the pads");
    for (int64_t o = 0; o < d.out; ++o) {  // each window has a tap inside the input
      bool inside = false;
      for (int64_t k = 0; k < d.kernel && !inside; ++k) {
        const int64_t at = o * d.stride - d.pad_begin + k * d.dilation;
        inside = at >= 0 && at < d.in;
      }
      TERRACE_CHECK(inside, NotImplemented, node.describe(), ": tier 1 does not run a pool with a window in the padding only");
    }
    TERRACE_CHECK(end >= 0, NotImplemented, node.describe(), ": tier 1 does not run a pool whose pads pass its windows");
    p.strides.push_back(d.stride);
    p.kernel.push_back(d.kernel);
    p.dilation.push_back(d.dilation - 1);  // oneDNN counts the gaps
    p.pad_l.push_back(d.pad_begin);
    p.pad_r.push_back(end);
    p.taps *= double(d.kernel);
  }
  return p;
}

// ---- Conv ----


// Runs a reorder from one memory to another with `threads` OpenMP threads.
struct Reorder {
  dnnl::primitive prim;
  memory::desc scratch;
  void operator()(const memory& from, const memory& to, int threads) const {
    execute(prim, scratch, {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}}, threads);
  }
};
Reorder make_reorder(const Node& node, const memory::desc& from, const memory::desc& to, int threads) {
  return building(node, threads, "primitive", [&] {
    dnnl::reorder::primitive_desc pd(cpu_engine(), from, cpu_engine(), to, user_scratchpad());
    return Reorder{dnnl::reorder(pd), pd.scratchpad_desc()};
  });
}

class ConvChain : public DnnlPrimitive {
 public:
  ConvChain(const std::vector<DnnlChainOp>& ops, const std::vector<Shape>& shapes,
            const std::vector<const Tensor*>& constants, std::vector<int> outputs)
      : input_shapes_(shapes), constant_(shapes.size(), false) {
    TERRACE_CHECK(!ops.empty() && (ops[0].kind == DnnlChainOp::Kind::Conv || ops[0].kind == DnnlChainOp::Kind::Pool),
                  Internal, "tier 1: a convolution chain starts with a Conv or a pool");
    for (size_t i = 0; i < constants.size() && i < shapes.size(); ++i) constant_[i] = constants[i] != nullptr;
    parse(ops, shapes);
    if (outputs.empty()) outputs.push_back(int(ops.size()) - 1);
    for (int k : outputs) {
      const int s = step_of_result(ops, k);
      outputs_.push_back(s);
      out_shapes_.push_back(steps_[size_t(s)].out_shape);
    }
    bool empty = false;
    for (const Step& s : steps_)
      empty = empty || has_zero_dim(s.x_shape) || has_zero_dim(s.w_shape) || has_zero_dim(s.out_shape);
    description_ = "oneDNN convolution chain of " + std::to_string(steps_.size()) + ":";
    if (empty) {  // nothing for oneDNN (it divides by zero on such shapes): the reference path
      reference_only_ = true;
      description_ += " a zero-sized tensor, run with the interpreter's semantics, no library call";
      return;
    }
    for (size_t i = 0; i < constants.size() && i < shapes.size(); ++i)
      if (constants[i] && checks_finite() && !all_finite(constants[i]->data<float>(), size_t(constants[i]->numel()), 1))
        reference_only_ = true;  // non-finite weights: the fused activations or a max would differ
    // A lone 1x1 convolution of stride 1 keeps plain layouts: measured with one thread on
    // AVX-512, reorders at its edges cost as much as the blocked kernel saves (e.g. 144->24
    // channels at 56x56: 0.134 ms plain, 0.275 ms reordered; others the other way round), while a
    // depthwise 3x3 is 4-7x faster reordered (0.29 ms against 1.38 at 32 channels, 112x112) and a
    // dense 3x3 1.4x. With stride 2 (ResNet's downsampling) plain layouts get oneDNN's
    // im2col+GEMM: 4.2 ms for 256->512 channels at 56x56 on 2 threads, so those reorder too.
    bool plain_edges = false;
    if (steps_.size() == 1 && !steps_[0].pool) {
      const ops::ConvGeometry g0 = ops::conv_geometry(steps_[0].node, steps_[0].x_shape, steps_[0].w_shape);
      bool unit = g0.kernel_size() == 1;
      for (size_t d = 0; d < g0.strides.size(); ++d)
        unit = unit && g0.strides[d] == 1 && g0.pads_begin[d] == 0 && g0.pads_end[d] == 0;
      plain_edges = unit;
    }
    for (size_t k = 0; k < steps_.size(); ++k) build_step(k, plain_edges, constants);
    for (size_t j = 0; j < outputs_.size(); ++j) {
      const Step& s = steps_[size_t(outputs_[j])];
      out_user_.push_back(plain(dims_of(s.out_shape)));
      out_reorder_.push_back(s.dst != out_user_.back() ? std::optional(make_reorder(s.node, s.dst, out_user_.back(), s.threads))
                                                      : std::nullopt);
    }
    assign_buffers();
    for (const Step& s : steps_) description_ += "\n  " + s.text;
    description_ += "\n  layouts: input " + std::string(steps_[0].in_reorder ? "reordered from plain" : "plain") + ", " +
                    std::to_string(outputs_.size()) + " output(s) " +
                    (out_reorder_.back() ? "reordered to plain" : "plain") + "; " + std::to_string(n_slots_) +
                    " intermediate buffers";
  }

  const Shape& output_shape() const override { return out_shapes_.front(); }
  size_t num_outputs() const override { return out_shapes_.size(); }
  std::vector<Shape> output_shapes() const override { return out_shapes_; }
  void run(const std::vector<const float*>& in, float* out) const override { run_outputs(in, {out}); }

  void run_outputs(const std::vector<const float*>& in, const std::vector<float*>& out) const override {
    TERRACE_CHECK(in.size() == input_shapes_.size() && out.size() == outputs_.size(), Internal,
                  "tier 1: a convolution chain got ", in.size(), " inputs and ", out.size(), " outputs, not ",
                  input_shapes_.size(), " and ", outputs_.size());
    if (reference_only_ || (checks_finite() && !inputs_finite(in))) return run_reference(in, out);
    std::vector<memory> result(steps_.size());  // each step's result, in its buffer
    for (size_t k = 0; k < steps_.size(); ++k) {
      const Step& s = steps_[k];
      memory src;
      if (s.in_reorder) {  // a chain input, from plain NCHW
        src = memory(s.src, cpu_engine(), thread_buffer(n_slots_ + 1 + k, s.src.get_size()));
        (*s.in_reorder)(wrap(s.in_user, in[size_t(s.x)]), src, s.threads);
      } else {
        src = s.x >= 0 ? wrap(s.src, in[size_t(s.x)]) : result[size_t(s.x_step)];
      }
      memory dst = s.direct_output >= 0 ? wrap(s.dst, out[size_t(s.direct_output)])
                                        : memory(s.dst, cpu_engine(), thread_buffer(size_t(s.slot), s.dst.get_size()));
      if (s.pool) {
        execute(s.conv, s.scratch, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}}, s.threads);
      } else {
        if (s.sum_input >= 0) s.sum_reorder(wrap(s.sum_user, in[size_t(s.sum_input)]), dst, s.threads);
        if (s.sum_step >= 0 && !s.sum_in_place) s.sum_reorder(result[size_t(s.sum_step)], dst, s.threads);
        if (s.winograd) {  // its blocks in the slot after the chain's own (those above)
          s.winograd->run(static_cast<const float*>(src.get_data_handle()), s.b >= 0 ? in[size_t(s.b)] : nullptr,
                          static_cast<float*>(dst.get_data_handle()), threads_to_run(s.threads),
                          n_slots_ + 1 + steps_.size());
        } else {
          memory w = s.weights;
          if (!w) {
            memory user = wrap(s.user_w, in[size_t(s.w)]);
            if (s.w_reorder) {
              w = memory(s.w_desc, cpu_engine(), thread_buffer(n_slots_, s.w_desc.get_size()));
              (*s.w_reorder)(user, w, s.threads);
            } else {
              w = user;
            }
          }
          std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, dst}};
          if (s.b >= 0) args.emplace(DNNL_ARG_BIAS, wrap(s.bias, in[size_t(s.b)]));
          execute(s.conv, s.scratch, args, s.threads);
        }
      }
      result[k] = dst;
      for (size_t j = 0; j < outputs_.size(); ++j)  // results read outside, to plain NCHW now
        if (outputs_[j] == int(k) && s.direct_output != int(j)) {
          if (out_reorder_[j]) (*out_reorder_[j])(dst, wrap(out_user_[j], out[j]), s.threads);
          else std::memcpy(out[j], dst.get_data_handle(), out_user_[j].get_size());
        }
    }
  }

 private:
  struct Step {
    Node node;                   // the Conv, or the pool
    bool pool = false;           // a MaxPool or AveragePool: `conv` holds its primitive, no weights
    int x = -1, w = -1, b = -1;  // chain inputs (x: -1 when it is an earlier step's result)
    int x_step = -1;             // the step whose result is x
    memory::desc in_user;        // x, a chain input, in plain NCHW
    std::optional<Reorder> in_reorder;  // ... into the primitive's source layout
    Shape x_shape, w_shape, out_shape;
    // In order after the convolution: an activation, or a sum (activation None) of chain input
    // `sum_input` or of step `sum_step`'s result.
    std::vector<DnnlActivation> post;
    int sum_input = -1, sum_step = -1;
    bool sum_in_place = false;  // dst is the summed result's own buffer (its last use)
    int threads = 1;
    dnnl::primitive conv;
    memory::desc scratch, src, dst, user_w, w_desc, bias, sum_user;
    memory weights;                   // constant weights in the primitive's layout
    std::shared_ptr<const WinogradConv> winograd;  // Terrace's own kernel in oneDNN's place (winograd_for)
    std::optional<Reorder> w_reorder;  // weights given at run time, into the primitive's layout
    Reorder sum_reorder;              // the addend into dst's layout
    int slot = -1;                    // the thread buffer holding the result
    int direct_output = -1;           // the output written in place (plain dst), or -1
    std::string text;
  };

  static Dims dims_of(const Shape& s) { return Dims(s.begin(), s.end()); }

  // The step whose result op k's is: op k must be its step's last op.
  int step_of_result(const std::vector<DnnlChainOp>& ops, int k) const {
    TERRACE_CHECK(k >= 0 && size_t(k) < op_step_.size() &&
                      (size_t(k) + 1 == ops.size() || ops[size_t(k) + 1].kind == DnnlChainOp::Kind::Conv ||
                       ops[size_t(k) + 1].kind == DnnlChainOp::Kind::Pool),
                  Internal, "tier 1: a convolution chain reads op ", k, "'s result, which is no step's last");
    return op_step_[size_t(k)];
  }

  // The ops as steps: each Conv and the activations and Add after it; checks the chain's form.
  void parse(const std::vector<DnnlChainOp>& ops, const std::vector<Shape>& shapes) {
    auto input_shape = [&](const DnnlChainOp& op, int i) -> const Shape& {
      TERRACE_CHECK(i >= 0 && size_t(i) < shapes.size(), Internal, op.node.describe(),
                    ": a chain op reads input ", i, " of ", shapes.size());
      return shapes[size_t(i)];
    };
    for (size_t k = 0; k < ops.size(); ++k) {
      const DnnlChainOp& op = ops[k];
      if (op.kind == DnnlChainOp::Kind::Conv) {
        TERRACE_CHECK(op.inputs.size() == 2 || op.inputs.size() == 3, InvalidArgument, op.node.describe(),
                      ": Conv takes 2 or 3 inputs");
        TERRACE_CHECK((k > 0 || op.inputs[0] >= 0) && op.inputs[1] >= 0 && (op.inputs.size() == 2 || op.inputs[2] >= 0),
                      Internal, op.node.describe(), ": a chained Conv reads an earlier result as x only");
        Step s;
        s.node = op.node;
        s.x = op.inputs[0];
        s.w = op.inputs[1];
        s.b = op.inputs.size() == 3 ? op.inputs[2] : -1;
        if (s.x < 0) s.x_step = step_of_result(ops, -1 - s.x);
        s.x_shape = s.x >= 0 ? input_shape(op, s.x) : steps_[size_t(s.x_step)].out_shape;
        s.w_shape = input_shape(op, s.w);
        const ops::ConvGeometry g = ops::conv_geometry(op.node, s.x_shape, s.w_shape);
        s.out_shape = g.out_shape();
        if (s.b >= 0)
          TERRACE_CHECK(input_shape(op, s.b) == Shape{g.cout}, InvalidArgument, op.node.describe(), ": bias ",
                        shape_str(input_shape(op, s.b)), ", expected [", g.cout, "]");
        steps_.push_back(std::move(s));
        op_step_.push_back(int(steps_.size()) - 1);
        continue;
      }
      if (op.kind == DnnlChainOp::Kind::Pool) {
        TERRACE_CHECK(op.inputs.size() == 1 && (k > 0 || op.inputs[0] >= 0), Internal, op.node.describe(),
                      ": a chained pool reads one value");
        Step s;
        s.node = op.node;
        s.pool = true;
        s.x = op.inputs[0];
        if (s.x < 0) s.x_step = step_of_result(ops, -1 - s.x);
        s.x_shape = s.x >= 0 ? input_shape(op, s.x) : steps_[size_t(s.x_step)].out_shape;
        s.out_shape = pool_out_shape(op.node, s.x_shape);
        has_pool_ = true;
        steps_.push_back(std::move(s));
        op_step_.push_back(int(steps_.size()) - 1);
        continue;
      }
      TERRACE_CHECK(k > 0, Internal, op.node.describe(), ": a chain starts with a Conv");
      Step& s = steps_.back();
      TERRACE_CHECK(!s.pool, Internal, op.node.describe(), ": a chained activation or Add follows a Conv, not a pool");
      op_step_.push_back(int(steps_.size()) - 1);
      if (op.kind == DnnlChainOp::Kind::Activation) {
        TERRACE_CHECK(op.activation.kind != DnnlActivation::Kind::None, Internal, op.node.describe(), ": no activation");
        s.post.push_back(op.activation);
        has_activation_ = true;
        continue;
      }
      TERRACE_CHECK(ops[k - 1].kind == DnnlChainOp::Kind::Conv && s.sum_input < 0 && s.sum_step < 0 &&
                        op.inputs.size() == 1,
                    Internal, op.node.describe(), ": a chained Add follows a Conv and reads one other value");
      const int addend = op.inputs[0];
      const Shape& shape = addend >= 0 ? input_shape(op, addend) : steps_[size_t(step_of_result(ops, -1 - addend))].out_shape;
      TERRACE_CHECK(shape == s.out_shape, NotImplemented, op.node.describe(), ": tier 1 fuses an Add of equal shapes only, not ",
                    shape_str(shape), " and ", shape_str(s.out_shape));
      TERRACE_CHECK(addend >= 0 || step_of_result(ops, -1 - addend) < int(steps_.size()) - 1, Internal, op.node.describe(),
                    ": a chained Add reads its own Conv");
      if (addend >= 0) s.sum_input = addend;
      else s.sum_step = step_of_result(ops, -1 - addend);
      s.post.push_back({});  // the sum's place among the post-ops
    }
  }

  // A pool step: reads its source in the layout its producer wrote (a chain input: plain NCHW) and
  // writes what oneDNN picks for it (the same layout).
  void build_pool_step(size_t k) {
    Step& s = steps_[k];
    const PoolSpec spec = pool_spec(s.node, s.x_shape);
    s.threads = threads_for(double(shape_numel(s.out_shape)) * spec.taps / 4);  // the lone Pool's work
    const memory::desc src = s.x < 0 ? steps_[size_t(s.x_step)].dst : plain(dims_of(s.x_shape));
    auto pd = building(s.node, s.threads, "primitive", [&] {
      dnnl::pooling_v2_forward::desc d(dnnl::prop_kind::forward_inference, spec.alg, src,
                                       memory::desc(dims_of(s.out_shape), memory::data_type::f32, memory::format_tag::any),
                                       spec.strides, spec.kernel, spec.dilation, spec.pad_l, spec.pad_r);
      return dnnl::pooling_v2_forward::primitive_desc(d, user_scratchpad(), cpu_engine());
    });
    s.conv = dnnl::pooling_v2_forward(pd);
    s.scratch = pd.scratchpad_desc();
    s.src = pd.src_desc();
    s.dst = pd.dst_desc();
    if (s.x >= 0) s.in_user = plain(dims_of(s.x_shape));
    s.text = "pooling (" + s.node.describe() + ", " + pd.impl_info_str() + "): src " +
             (s.x >= 0 ? "input " + std::to_string(s.x) : "step " + std::to_string(s.x_step)) + " " +
             dims_str(dims_of(s.x_shape)) + " -> dst " + dims_str(dims_of(s.out_shape)) + "; kernel " +
             dims_str(spec.kernel) + ", strides " + dims_str(spec.strides) + ", pads " + dims_str(spec.pad_l) + " " +
             dims_str(spec.pad_r) + "; " + std::to_string(s.threads) + " OpenMP threads";
  }

  void build_step(size_t k, bool plain_edges, const std::vector<const Tensor*>& constants) {
    if (steps_[k].pool) return build_pool_step(k);
    Step& s = steps_[k];
    const ops::ConvGeometry g = ops::conv_geometry(s.node, s.x_shape, s.w_shape);
    Dims w = dims_of(s.w_shape);
    if (g.group > 1) {  // [M, C/G, k...] -> [G, M/G, C/G, k...], the same bytes
      w[0] = g.cout_g();
      w.insert(w.begin(), g.group);
    }
    Dims strides(g.strides.begin(), g.strides.end()), pad_l(g.pads_begin.begin(), g.pads_begin.end()),
        pad_r(g.pads_end.begin(), g.pads_end.end()), dil(g.dilations.size());
    for (size_t i = 0; i < dil.size(); ++i) dil[i] = g.dilations[i] - 1;  // oneDNN counts the gaps
    s.user_w = plain(w);
    s.bias = plain({g.cout});
    s.threads = threads_for(double(shape_numel(s.out_shape)) * double(g.cin_g()) * double(g.kernel_size()));
    auto any = [](const Dims& d) { return memory::desc(d, memory::data_type::f32, memory::format_tag::any); };
    // A step reads its source in the layout its producer wrote.
    const memory::desc src = s.x < 0 ? steps_[size_t(s.x_step)].dst : plain_edges ? plain(dims_of(s.x_shape)) : any(dims_of(s.x_shape));
    const memory::desc dst = plain_edges ? plain(dims_of(s.out_shape)) : any(dims_of(s.out_shape));
    const Tensor* constant_w = size_t(s.w) < constants.size() ? constants[size_t(s.w)] : nullptr;
    auto pd = building(s.node, s.threads, "primitive", [&] {
      const memory::desc weights = any(w);
      dnnl::convolution_forward::desc d =
          s.b >= 0 ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                     dnnl::algorithm::convolution_direct, src, weights, s.bias, dst,
                                                     strides, dil, pad_l, pad_r)
                   : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                     dnnl::algorithm::convolution_direct, src, weights, dst, strides,
                                                     dil, pad_l, pad_r);
      dnnl::post_ops post;
      for (const DnnlActivation& a : s.post) {
        if (a.kind == DnnlActivation::Kind::None) post.append_sum(1.0f);  // dst = conv + dst, dst holding the addend
        else append_activation(post, a);
      }
      dnnl::primitive_attr attr = user_scratchpad();
      attr.set_post_ops(post);
      return dnnl::convolution_forward::primitive_desc(d, attr, cpu_engine());
    });
    s.conv = dnnl::convolution_forward(pd);
    s.scratch = pd.scratchpad_desc();
    s.src = pd.src_desc();
    s.dst = pd.dst_desc();
    s.w_desc = pd.weights_desc();
    TERRACE_CHECK(s.x >= 0 || s.src == steps_[size_t(s.x_step)].dst, Internal, s.node.describe(),
                  ": oneDNN chose another source layout than its producer's");
    if (s.x >= 0) {
      s.in_user = plain(dims_of(s.x_shape));
      if (s.src != s.in_user) s.in_reorder = make_reorder(s.node, s.in_user, s.src, s.threads);
    }
    if (s.sum_input >= 0) {
      s.sum_user = plain(dims_of(s.out_shape));
      s.sum_reorder = make_reorder(s.node, s.sum_user, s.dst, s.threads);
    }
    if (s.sum_step >= 0) s.sum_reorder = make_reorder(s.node, steps_[size_t(s.sum_step)].dst, s.dst, s.threads);
    if (constant_w && (s.winograd = winograd_for(s, g, constant_w))) {
      has_winograd_ = true;
      constant_w->drop_resident_pages();  // the kernel reads its own copy (Tensor::file_backed)
    } else if (constant_w) {
      s.weights = memory(s.w_desc, cpu_engine());
      // Reordered once, where the chain is built (a background thread: threads_to_run).
      make_reorder(s.node, s.user_w, s.w_desc, threads_to_run(s.threads))(wrap(s.user_w, constant_w->data<float>()),
                                                                          s.weights, threads_to_run(s.threads));
      constant_w->drop_resident_pages();  // the chain reads its own copy (Tensor::file_backed)
    } else if (s.w_desc != s.user_w) {
      s.w_reorder = make_reorder(s.node, s.user_w, s.w_desc, s.threads);
    }
    s.text = "convolution_forward (" + s.node.describe() + ", " +
             (s.winograd ? std::string("Terrace's Winograd F(2x2, 3x3), AVX2/FMA") : pd.impl_info_str()) + "): src " +
             (s.x >= 0 ? "input " + std::to_string(s.x) : "step " + std::to_string(s.x_step)) + " " +
             dims_str(dims_of(s.x_shape)) + ", weights " + dims_str(w) +
             (s.winograd ? " (constant, transformed once)" : constant_w ? " (constant, reordered once)" : s.w_reorder ? " (reordered each call)" : "") +
             (s.b >= 0 ? ", bias" : "") + " -> dst " + dims_str(dims_of(s.out_shape)) + "; strides " +
             dims_str(strides) + ", dilations (gaps) " + dims_str(dil) + ", pads " + dims_str(pad_l) + " " +
             dims_str(pad_r) + ", groups " + std::to_string(g.group) + "; post-ops:";
    for (const DnnlActivation& a : s.post)
      s.text += a.kind != DnnlActivation::Kind::None ? " " + activation_name(a)
                : s.sum_input >= 0                    ? " sum(input " + std::to_string(s.sum_input) + ")"
                                                      : " sum(step " + std::to_string(s.sum_step) + ")";
    if (s.post.empty()) s.text += " none";
    s.text += "; " + std::to_string(s.threads) + " OpenMP threads";
  }

  // Terrace's own convolution for step s where it computes what oneDNN would, faster
  // (jit/winograd_conv.h): a 3x3 of stride 1 and pads 1, one group, no dilation, constant weights,
  // a bias or none and at most a Relu after it, on an AVX2/FMA CPU whose chain keeps nChw8c on both
  // sides of the step (what oneDNN picks there below AVX-512), with at least 64 channels in and out
  // (winograd_enabled; TERRACE_WINOGRAD=0 leaves every step to oneDNN) and enough tiles for each
  // thread (WinogradConv::fits). Null otherwise (oneDNN runs the step). Validation allows such a
  // step Winograd's rounding too (winograd_rounding_bound).
  static std::shared_ptr<const WinogradConv> winograd_for(const Step& s, const ops::ConvGeometry& g, const Tensor* w) {
    if (s.x_shape.size() != 4 || g.group != 1 || s.sum_input >= 0 || s.sum_step >= 0 || s.w_shape[2] != 3 ||
        s.w_shape[3] != 3 || !winograd_enabled(s.x_shape[1], s.out_shape[1]))
      return nullptr;
    for (size_t d = 0; d < 2; ++d)
      if (g.dilations[d] != 1 || g.strides[d] != 1 || g.pads_begin[d] != 1 || g.pads_end[d] != 1) return nullptr;
    for (const DnnlActivation& a : s.post)
      if (a.kind != DnnlActivation::Kind::Relu) return nullptr;
    const memory::desc blocked_x(dims_of(s.x_shape), memory::data_type::f32, memory::format_tag::aBcd8b);
    const memory::desc blocked_y(dims_of(s.out_shape), memory::data_type::f32, memory::format_tag::aBcd8b);
    if (s.src != blocked_x || s.dst != blocked_y) return nullptr;
    const WinogradConv::Geometry wg{s.x_shape[0], s.x_shape[1], s.out_shape[1], s.x_shape[2], s.x_shape[3]};
    if (!WinogradConv::fits(wg, s.threads)) return nullptr;
    return std::make_shared<const WinogradConv>(wg, w->data<float>(), !s.post.empty());
  }

  // Which thread buffer holds each step's result: a buffer is free again after its value's last
  // reader; a sum whose addend is another step's result at its last use writes into that
  // result's buffer (in place, no copy); the last step writes a plain output directly.
  void assign_buffers() {
    const size_t n = steps_.size();
    std::vector<int> last_use(n, -1);
    for (size_t k = 0; k < n; ++k) {
      if (steps_[k].x_step >= 0) last_use[size_t(steps_[k].x_step)] = std::max(last_use[size_t(steps_[k].x_step)], int(k));
      if (steps_[k].sum_step >= 0) last_use[size_t(steps_[k].sum_step)] = std::max(last_use[size_t(steps_[k].sum_step)], int(k));
    }
    std::vector<int> holder;  // per slot: the step whose result it holds, or -1
    for (size_t k = 0; k < n; ++k) {
      Step& s = steps_[k];
      for (int& h : holder)  // values whose last reader came before k are dead
        if (h >= 0 && last_use[size_t(h)] < int(k)) h = -1;
      if (k + 1 == n && outputs_.size() == 1 && outputs_[0] == int(k) && !out_reorder_[0] && s.sum_step < 0) {
        s.direct_output = 0;
        continue;
      }
      if (s.sum_step >= 0 && s.sum_step != s.x_step && last_use[size_t(s.sum_step)] == int(k) &&
          steps_[size_t(s.sum_step)].dst == s.dst && steps_[size_t(s.sum_step)].slot >= 0) {  // not the source itself
        s.sum_in_place = true;
        s.slot = steps_[size_t(s.sum_step)].slot;
        holder[size_t(s.slot)] = int(k);
        continue;
      }
      int slot = -1;  // a free buffer (one this step reads is not free: it holds a live value)
      for (size_t i = 0; i < holder.size() && slot < 0; ++i)
        if (holder[i] < 0) slot = int(i);
      if (slot < 0) {
        slot = int(holder.size());
        holder.push_back(-1);
      }
      s.slot = slot;
      holder[size_t(slot)] = int(k);
    }
    n_slots_ = holder.size();
  }

  // Whether a call's inputs must be finite for the library's answer to be the interpreter's: fused
  // activations treat infinities and NaN otherwise (see all_finite), oneDNN's max need not
  // treat a NaN as the interpreter's does, and Winograd's transforms subtract inputs (inf - inf
  // is NaN where the direct sum gives an infinity).
  bool checks_finite() const { return has_activation_ || has_pool_ || has_winograd_; }

  // Every input that is not a constant (constants were checked once) holds finite values only.
  bool inputs_finite(const std::vector<const float*>& in) const {
    for (size_t i = 0; i < in.size(); ++i)
      if (!constant_[i] && in[i] && !all_finite(in[i], size_t(shape_numel(input_shapes_[i])), steps_[0].threads))
        return false;
    return true;
  }

  // The chain with the interpreter's semantics: its Conv kernel (double accumulation), then the
  // post-ops one by one as the interpreter's Relu, Clip and Add compute them. For zero-sized
  // tensors (nothing reaches oneDNN) and inputs that are not all finite (oneDNN's fused
  // activations treat infinities and NaN unlike the interpreter, see all_finite).
  void run_reference(const std::vector<const float*>& in, const std::vector<float*>& out) const {
    auto tensor_of = [&](int i) {
      Tensor t = Tensor::empty(DType::Float32, input_shapes_[size_t(i)]);
      if (t.numel() > 0) std::memcpy(t.data<float>(), in[size_t(i)], t.nbytes());
      return RValue(std::move(t));
    };
    std::vector<Tensor> result(steps_.size());
    for (size_t k = 0; k < steps_.size(); ++k) {
      const Step& s = steps_[k];
      if (s.pool) {
        RValue x = s.x >= 0 ? tensor_of(s.x) : RValue(result[size_t(s.x_step)]);
        result[k] = interpret_node(s.node, {&x}).at(0).tensor;
        continue;
      }
      RValue x = s.x >= 0 ? tensor_of(s.x) : RValue(result[size_t(s.x_step)]), w = tensor_of(s.w), b;
      std::vector<const RValue*> args{&x, &w};
      if (s.b >= 0) {
        b = tensor_of(s.b);
        args.push_back(&b);
      }
      Tensor y = interpret_node(s.node, args).at(0).tensor;
      float* p = y.data<float>();
      const size_t n = size_t(y.numel());
      for (const DnnlActivation& a : s.post) {
        if (a.kind != DnnlActivation::Kind::None) {
          apply_activation(a, p, n);
          continue;
        }
        const float* r = s.sum_input >= 0 ? in[size_t(s.sum_input)] : result[size_t(s.sum_step)].data<float>();
        for (size_t i = 0; i < n; ++i) p[i] = p[i] + r[i];
      }
      result[k] = std::move(y);
    }
    for (size_t j = 0; j < outputs_.size(); ++j) {
      const Tensor& y = result[size_t(outputs_[j])];
      if (y.numel() > 0) std::memcpy(out[j], y.data<float>(), y.nbytes());
    }
  }

  std::vector<Shape> input_shapes_;
  std::vector<bool> constant_;
  std::vector<Step> steps_;
  std::vector<int> op_step_;     // per op: its step
  std::vector<int> outputs_;     // per output: the step whose result it is
  std::vector<Shape> out_shapes_;
  bool reference_only_ = false, has_activation_ = false, has_pool_ = false, has_winograd_ = false;
  size_t n_slots_ = 0;
  std::vector<memory::desc> out_user_;
  std::vector<std::optional<Reorder>> out_reorder_;
};

// A Conv whose input, weights or output hold no element, as an EmptySum; nullptr otherwise.
std::unique_ptr<DnnlPrimitive> make_empty_conv(const Node& node, const std::vector<Shape>& shapes,
                                               const DnnlActivation& activation) {
  const ops::ConvGeometry g = ops::conv_geometry(node, shapes[0], shapes[1]);
  Shape out = g.out_shape();
  if (!has_zero_dim(shapes[0]) && !has_zero_dim(shapes[1]) && !has_zero_dim(out)) return nullptr;
  EmptySum::Addend addend;
  if (shapes.size() == 3) {
    TERRACE_CHECK(shapes[2] == Shape{g.cout}, InvalidArgument, node.describe(), ": bias ",
                  shape_str(shapes[2]), ", expected [", g.cout, "]");
    addend.input = 2;
    addend.strides.assign(out.size(), 0);
    addend.strides[1] = 1;  // bias[output channel]
  }
  return std::make_unique<EmptySum>(std::move(out), 1.0, std::move(addend), activation);
}

// A pool on plain NCHW buffers. oneDNN's windows must all touch the input (a window in the padding
// only has no value in oneDNN and -inf or 0 in the interpreter), and its output size comes from
// its pads by floor division, so ceil_mode's last window gets extra end padding: for a max or an
// average that excludes padding this changes nothing, for an average that counts padding it would
// change the divisor, and such nodes are refused. Non-finite inputs (NaN: the interpreter's max
// passes over it as ONNX's reference does, oneDNN's need not) and zero-sized tensors run the interpreter's kernel.
class Pool : public DnnlPrimitive {
 public:
  Pool(const Node& node, const Shape& x) : node_(node), x_(x), out_(pool_out_shape(node, x)) {
    const bool max = node.op == Op::MaxPool;
    const bool include_pad = !max && node.attr_int("count_include_pad", 0) != 0;
    description_ = std::string("oneDNN pooling (") + node.describe() + "): " + (max ? "max" : include_pad ? "average, padding counted" : "average") +
                   ", src " + shape_str(x) + " -> dst " + shape_str(out_);
    if (has_zero_dim(x) || has_zero_dim(out_)) {
      reference_only_ = true;
      description_ += "; a zero-sized tensor, run by the interpreter's kernel, no library call";
      return;
    }
    const PoolSpec spec = pool_spec(node, x);
    const Dims &strides = spec.strides, &kernel = spec.kernel, &dilation = spec.dilation, &pad_l = spec.pad_l,
               &pad_r = spec.pad_r;
    const double taps = spec.taps;
    src_ = plain(Dims(x.begin(), x.end()));
    dst_ = plain(Dims(out_.begin(), out_.end()));
    threads_ = threads_for(double(shape_numel(out_)) * taps / 4);  // compares and adds are cheaper than multiply-adds
    const dnnl::algorithm alg = spec.alg;
    auto pd = building(node, threads_, "primitive", [&] {
      dnnl::pooling_v2_forward::desc d(dnnl::prop_kind::forward_inference, alg, src_, dst_, strides, kernel, dilation,
                                       pad_l, pad_r);
      return dnnl::pooling_v2_forward::primitive_desc(d, user_scratchpad(), cpu_engine());
    });
    prim_ = dnnl::pooling_v2_forward(pd);
    scratch_ = pd.scratchpad_desc();
    description_ += "; kernel " + dims_str(kernel) + ", strides " + dims_str(strides) + ", dilations (gaps) " +
                    dims_str(dilation) + ", pads " + dims_str(pad_l) + " " + dims_str(pad_r) + " (" +
                    pd.impl_info_str() + "); " + std::to_string(threads_) + " OpenMP threads";
  }
  const Shape& output_shape() const override { return out_; }
  void run(const std::vector<const float*>& in, float* out) const override {
    if (reference_only_ || !all_finite(in.at(0), size_t(shape_numel(x_)), threads_)) {
      Tensor x = Tensor::empty(DType::Float32, x_);
      if (x.numel() > 0) std::memcpy(x.data<float>(), in[0], x.nbytes());
      RValue rx(std::move(x));
      Tensor y = interpret_node(node_, {&rx}).at(0).tensor;
      if (y.numel() > 0) std::memcpy(out, y.data<float>(), y.nbytes());
      return;
    }
    execute(prim_, scratch_, {{DNNL_ARG_SRC, wrap(src_, in[0])}, {DNNL_ARG_DST, wrap(dst_, out)}}, threads_);
  }

 private:
  Node node_;
  Shape x_, out_;
  bool reference_only_ = false;
  int threads_ = 1;
  memory::desc src_, dst_, scratch_;
  dnnl::primitive prim_;
};

}  // namespace

// ---- dnnl_common.h's shared helpers ----

void BoundArgs::bind(int arg, const memory::desc& d, const void* data) {
  for (size_t i = 0; i < ids_.size(); ++i)
    if (ids_[i] == arg) {
      mems_[i].set_data_handle(const_cast<void*>(data));
      return;
    }
  ids_.push_back(arg);
  mems_.emplace_back(d, cpu_engine(), const_cast<void*>(data));
}

void BoundArgs::bind(int arg, const memory& m) {
  for (size_t i = 0; i < ids_.size(); ++i)
    if (ids_[i] == arg) return;
  ids_.push_back(arg);
  mems_.push_back(m);
}

void BoundArgs::execute(const dnnl::primitive& p, const memory::desc& scratch, int threads) {
  ScopedOmpThreads scope(threads_to_run(threads));
  raw_.clear();
  for (size_t i = 0; i < ids_.size(); ++i) raw_.push_back({ids_[i], mems_[i].get()});
  if (const size_t bytes = scratch.get_size(); bytes > 0) {
    if (bytes != scratch_bytes_) scratch_ = memory(scratch, cpu_engine(), nullptr);
    scratch_bytes_ = bytes;
    scratch_.set_data_handle(thread_scratch(bytes));
    raw_.push_back({DNNL_ARG_SCRATCHPAD, scratch_.get()});
  }
  try {
    dnnl::error::wrap_c_api(dnnl_primitive_execute(p.get(), thread_stream().get(), int(raw_.size()), raw_.data()),
                            "could not execute a primitive");
    dnnl::error::wrap_c_api(dnnl_stream_wait(thread_stream().get()), "could not wait on a stream");
  } catch (const dnnl::error& e) {
    fail(ErrorCode::RuntimeError, "oneDNN could not run a primitive: ", e.what());
  }
}

void execute(const dnnl::primitive& p, const memory::desc& scratch, const std::unordered_map<int, memory>& args,
             int threads) {
  BoundArgs bound;
  for (const auto& [arg, m] : args) bound.bind(arg, m);
  bound.execute(p, scratch, threads);
}

bool all_finite(const float* p, size_t n, int threads) {
  const uint32_t* bits = reinterpret_cast<const uint32_t*>(p);  // floats read as their bits
  uint32_t top = 0;  // the largest exponent field: all ones only for an infinity or a NaN
  const int64_t count = int64_t(n);
  if (threads <= 1 || count <= (int64_t(1) << 16)) {
    // No parallel region at all: libgomp starts (and allocates) a team of one even for an `if`
    // clause that is false, which cost a batch-1 layer more than reading its input.
#pragma omp simd reduction(max : top)
    for (int64_t i = 0; i < count; ++i) top = std::max(top, bits[i] & 0x7f800000u);
    return top != 0x7f800000u;
  }
#pragma omp parallel for simd reduction(max : top) num_threads(threads) schedule(static)
  for (int64_t i = 0; i < count; ++i) top = std::max(top, bits[i] & 0x7f800000u);
  return top != 0x7f800000u;
}


float* thread_buffer(size_t slot, size_t bytes) {
  struct Buffer {
    std::unique_ptr<float, decltype(&std::free)> data{nullptr, &std::free};
    size_t bytes = 0;
  };
  thread_local std::vector<Buffer> pool;
  if (pool.size() <= slot) pool.resize(slot + 1);
  Buffer& b = pool[slot];
  if (b.bytes < bytes) {
    const size_t rounded = (bytes + 63) / 64 * 64;
    b.data.reset(static_cast<float*>(std::aligned_alloc(64, rounded)));
    TERRACE_CHECK(b.data, OutOfMemory, "tier 1: no memory for a ", rounded, "-byte oneDNN buffer");
    b.bytes = rounded;
  }
  return b.data.get();
}

std::unique_ptr<DnnlPrimitive> make_dnnl_conv_chain(const std::vector<DnnlChainOp>& ops,
                                                    const std::vector<Shape>& input_shapes,
                                                    const std::vector<const Tensor*>& constants,
                                                    const std::vector<int>& outputs) {
  return std::make_unique<ConvChain>(ops, input_shapes, constants, outputs);
}

std::string dnnl_can_compile(const Node& node, const std::vector<DType>& dtypes,
                             const std::vector<std::optional<size_t>>& ranks) {
  // Global pools run as steps of a convolution chain only (cpu_library's chains_pool).
  const bool pool = node.op == Op::MaxPool || node.op == Op::AveragePool || node.op == Op::GlobalAveragePool ||
                    node.op == Op::GlobalMaxPool;
  if (node.op != Op::MatMul && node.op != Op::Gemm && node.op != Op::Conv && !pool)
    return std::string("tier 1 has no library kernel for ") + op_name(node.op);
  if (node.op == Op::MaxPool && node.outputs.size() > 1 && node.outputs[1] >= 0)
    return "tier 1 runs MaxPool without its Indices output";
  for (DType t : dtypes)
    if (t != DType::Float32)
      return std::string("tier 1 runs ") + op_name(node.op) + " in float32 only, not " + dtype_name(t);
  if ((node.op == Op::Conv || pool) && !ranks.empty() && ranks[0] && (*ranks[0] < 3 || *ranks[0] > 5))
    return std::string("tier 1 runs ") + op_name(node.op) + " with 1 to 3 spatial dimensions";
  return "";
}

std::unique_ptr<DnnlPrimitive> make_dnnl_primitive(const Node& node, const std::vector<Shape>& shapes,
                                                   const std::vector<const Tensor*>& constants,
                                                   DnnlActivation activation) {
  switch (node.op) {
    case Op::MatMul: return make_matmul(node, shapes, constants, activation);
    case Op::Gemm: return make_gemm(node, shapes, constants, activation);
    case Op::Conv: {
      TERRACE_CHECK(shapes.size() == 2 || shapes.size() == 3, InvalidArgument, node.describe(),
                    ": Conv takes 2 or 3 inputs");
      if (auto empty = make_empty_conv(node, shapes, activation)) return empty;
      std::vector<DnnlChainOp> chain{{DnnlChainOp::Kind::Conv, node, shapes.size() == 3 ? std::vector<int>{0, 1, 2} : std::vector<int>{0, 1}, {}}};
      if (activation.kind != DnnlActivation::Kind::None)
        chain.push_back({DnnlChainOp::Kind::Activation, node, {}, activation});
      return std::make_unique<ConvChain>(chain, shapes, constants, std::vector<int>{});
    }
    case Op::MaxPool:
    case Op::AveragePool:
      TERRACE_CHECK(shapes.size() == 1, InvalidArgument, node.describe(), ": ", op_name(node.op), " takes 1 input");
      TERRACE_CHECK(activation.kind == DnnlActivation::Kind::None, Internal, node.describe(), ": a pool takes no activation");
      return std::make_unique<Pool>(node, shapes[0]);
    default: fail(ErrorCode::NotImplemented, node.describe(), ": no oneDNN kernel for ", op_name(node.op));
  }
}

}  // namespace terrace::jit
