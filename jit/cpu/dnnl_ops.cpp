// MatMul, Gemm and Conv as oneDNN primitives on plain float32 buffers. The geometry of a
// convolution (pads, auto_pad, output size) is the interpreter's conv_geometry, so the attributes
// mean one thing everywhere; the arithmetic is oneDNN's, validated against the interpreter.
#include "jit/cpu/dnnl_ops.h"

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
#include "jit/cpu/dnnl_activation.h"
#include "jit/cpu/dnnl_common.h"
#include "jit/cpu/dnnl_internal.h"
#include "jit/cpu/packed_gemm.h"
#include "jit/cpu/winograd_conv.h"
#include "jit/tuning.h"

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

bool dnnl_detail::is_blocked(const dnnl::memory::desc& d) {
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

namespace dnnl_detail {


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

float activate(const DnnlActivation& a, float x) {
  switch (a.kind) {
    case DnnlActivation::Kind::Relu: return x < 0.0f ? 0.0f : x;
    case DnnlActivation::Kind::Clip: {
      const float r = x < a.lo ? a.lo : x;
      return r > a.hi ? a.hi : r;
    }
    default: return dnnl_activation_apply(a, x);  // Sigmoid, Tanh, ... (jit/cpu/dnnl_activation.h)
  }
}

void apply_activation(const DnnlActivation& a, float* p, size_t n) {
  if (a.kind != DnnlActivation::Kind::None)
    for (size_t i = 0; i < n; ++i) p[i] = activate(a, p[i]);
}

std::string dims_str(const memory::dims& d) { return shape_str(Shape(d.begin(), d.end())); }
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

size_t floats_of(const memory::desc& d) { return d.get_size() / sizeof(float); }

bool has_zero_dim(const Shape& s) { return std::find(s.begin(), s.end(), 0) != s.end(); }

}  // namespace dnnl_detail

namespace {

using dnnl::memory;
using Dims = memory::dims;
using namespace dnnl_detail;

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

// How one MatMul runs: plan_matmul chooses it from the product's facts and one config, and the
// MatMul constructor builds what it says.
struct MatmulPlan {
  enum class Product {
    Terrace,  // Terrace's packed weights (jit/cpu/packed_gemm.h)
    Blocked,  // oneDNN, constant weights copied once into its own blocked layout
    Plain,    // oneDNN reading plain weights: the input, or constant weights copied in the other order
  };
  // Plain's constant weights: read as given, copied in the other plain order, or whichever of the
  // two, timed on this machine when the product is built, is faster.
  enum class Order { Given, Other, Timed };
  Product product = Product::Plain;
  Order order = Order::Given;
};

// What plan_matmul reads of one product.
struct MatmulFacts {
  bool constant_weights = false;  // float32 weights known when the product is built
  bool blocked = false;           // oneDNN lays such weights out in a blocked layout of its own
  bool terrace_shape = false;     // 2-D, A by rows, B plain in either order, no C, alpha 1
  int64_t rows = 0;               // A's rows, with terrace_shape
  double weight_bytes = 0;
  double flops = 0;               // multiply-adds
};

// The settings every MatMul's plan reads: the CPU's and the environment's, read for each product
// (tests set them between compiles).
struct MatmulConfig {
  bool packed_gemm = false;      // packed_gemm_supported(): AVX2 and FMA
  double packed_gemm_bytes = 0;  // TERRACE_PACKED_GEMM_BYTES
  std::string weight_order;      // TERRACE_GEMM_WEIGHT_ORDER
};

MatmulConfig matmul_config() { return {packed_gemm_supported(), packed_gemm_bytes(), weight_order()}; }

MatmulPlan plan_matmul(const MatmulFacts& f, const MatmulConfig& config) {
  using Product = MatmulPlan::Product;
  using Order = MatmulPlan::Order;
  // No blocked layout of oneDNN's own (its gemm:jit, below AVX-512, which packs the weights again
  // on every call): a plain 2-D product of at least kPackedGemmRows rows, A by rows, without
  // Gemm's C or alpha, runs on Terrace's packed weights (jit/cpu/packed_gemm.h) if the CPU has AVX2
  // and FMA: faster than gemm:jit on every product measured. A product of one row (a batch-1
  // Linear layer) takes the packed weights' GEMV, Relu in its stores, also where oneDNN has a
  // blocked layout of its own (AVX-512): faster than oneDNN's there too (bench/RESULTS.md).
  const bool one_row = f.rows == 1;
  if (f.constant_weights && (!f.blocked || one_row) && config.packed_gemm && f.terrace_shape &&
      (f.rows >= kPackedGemmRows || one_row) && f.weight_bytes >= config.packed_gemm_bytes)
    return {Product::Terrace, Order::Given};
  if (!f.constant_weights) return {Product::Plain, Order::Given};
  if (f.blocked) return {Product::Blocked, Order::Given};
  // No blocked layout of its own: oneDNN's gemm-based product (below AVX-512, or forced there
  // by DNNL_MAX_CPU_ISA), which reads the weights in whichever plain order it is given. The
  // order can halve a product's time (BERT's up projection: bench/RESULTS.md), but a copy
  // costs the weights' size again, so the weights are read as given unless the other order,
  // measured on this machine, takes at most 3/4 of the time.
  if (config.weight_order == "other") return {Product::Plain, Order::Other};
  if (config.weight_order.empty() && f.flops >= kTimedLayoutFlops) return {Product::Plain, Order::Timed};
  return {Product::Plain, Order::Given};
}

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
        bias_(std::move(bias)), alpha_(alpha), beta_(beta) {
    check_constants_once(constants, activation);
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
    const Tensor* w = constants.size() > 1 && constants[1] && constants[1]->dtype() == DType::Float32 &&
                              size_t(constants[1]->numel()) == floats_of(b_)
                          ? constants[1]
                          : nullptr;
    memory::desc weights = w ? memory::desc(b_.dims(), memory::data_type::f32, memory::format_tag::any) : b_;
    // Built first with `any`: the layout oneDNN picks for them is one of the plan's facts.
    prims_.fused = build(node, weights, activation, prims_.fused_scratch, prims_.threads);
    const MatmulPlan plan = plan_matmul(facts(w != nullptr, weights, flops), matmul_config());
    if (plan.product == MatmulPlan::Product::Terrace) {
      build_terrace_product(node, *w, activation);
      return;
    }
    bool relaid = false;  // copied in the other plain order
    if (plan.product == MatmulPlan::Product::Plain && w) relaid = order_weights(node, *w, weights, plan.order);
    if (prims_.has_activation()) prims_.plain = build(node, weights, {}, prims_.plain_scratch, prims_.threads);
    if (plan.product == MatmulPlan::Product::Blocked) packed_ = laid_out(node, *w, weights);
    if (packed_) w->drop_resident_pages();  // read from the copy from now on (Tensor::file_backed)
    describe_onednn(node, activation, relaid);
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
  // An input known at compile time is read for non-finite values once, here, instead of per call.
  void check_constants_once(const std::vector<const Tensor*>& constants, const DnnlActivation& activation) {
    for (size_t i = 0; i < constants.size() && i < check_.size(); ++i) {
      if (!constants[i] || activation.kind == DnnlActivation::Kind::None) continue;
      check_[i] = false;
      const Tensor& t = *constants[i];
      if (t.dtype() != DType::Float32 || !all_finite(t.data<float>(), size_t(t.numel()), 1)) never_fused_ = true;
    }
  }

  MatmulFacts facts(bool constant_weights, const memory::desc& weights, double flops) const {
    const Dims& ad = a_.dims();
    const Dims& bd = b_.dims();
    MatmulFacts f;
    f.constant_weights = constant_weights;
    f.blocked = is_blocked(weights);
    f.terrace_shape = ad.size() == 2 && a_ == plain(ad) && bd.size() == 2 && dst_.dims().size() == 2 && !c_ &&
                      alpha_ == 1.0f && (b_ == plain(bd) || b_ == transposed_last_two(bd));
    f.rows = ad.size() == 2 ? ad[0] : 0;
    f.weight_bytes = double(floats_of(b_)) * sizeof(float);
    f.flops = flops;
    return f;
  }

  // oneDNN's product with `weights` (format any: oneDNN's choice, written back into `weights`).
  dnnl::primitive build(const Node& node, memory::desc& weights, const DnnlActivation& act,
                        memory::desc& scratch, int threads) const {
    return building(node, threads, "primitive", [&] {
      dnnl::primitive_attr attr = user_scratchpad();
      if (alpha_ != 1.0f) attr.set_output_scales(0, {alpha_});
      dnnl::post_ops ops;
      if (c_) ops.append_sum(beta_);  // dst = alpha * a . b + beta * dst, dst holding C
      append_activation(ops, act);
      attr.set_post_ops(ops);
      dnnl::matmul::primitive_desc pd(bias_ ? dnnl::matmul::desc(a_, weights, *bias_, dst_)
                                            : dnnl::matmul::desc(a_, weights, dst_),
                                      attr, cpu_engine());
      scratch = pd.scratchpad_desc();
      weights = pd.weights_desc();  // the plain-activation twin takes the same layout
      return dnnl::primitive(dnnl::matmul(pd));
    });
  }

  // Constant weights copied once, on the compile thread, into `to` (threads_to_run: a oneDNN
  // primitive runs with the thread count it was built with).
  memory laid_out(const Node& node, const Tensor& w, const memory::desc& to) const {
    memory m(to, cpu_engine());
    const int t = threads_to_run(prims_.threads);
    building(node, t, "primitive", [&] {
      dnnl::reorder::primitive_desc pd(cpu_engine(), b_, cpu_engine(), to, user_scratchpad());
      execute(dnnl::reorder(pd), pd.scratchpad_desc(), {{DNNL_ARG_FROM, wrap(b_, w.data<float>())}, {DNNL_ARG_TO, m}},
              t);
    });
    return m;
  }

  // MatmulPlan::Product::Terrace: the weights packed into own_, Relu in its stores.
  void build_terrace_product(const Node& node, const Tensor& w, const DnnlActivation& activation) {
    const Dims& bd = b_.dims();
    const bool b_columns = b_ != plain(bd);  // terrace_shape: B by rows or by columns
    own_ = std::make_unique<PackedWeights>(w.data<float>(), bd[0], bd[1], b_columns);
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
    w.drop_resident_pages();  // read from the packed copy from now on
    description_ = "Terrace's packed-weight product (" + node.describe() + "): src " + dims_str(a_) +
                   " x weights " + dims_str(b_) + " -> dst " + dims_str(dst_) +
                   (bias_ ? "; bias " + dims_str(*bias_) : "") + activation_text(activation) +
                   "; constant weights packed once in 16-column panels (AVX2, FMA); " +
                   std::to_string(prims_.threads) + " OpenMP threads";
  }

  // MatmulPlan::Product::Plain with constant weights: read in the plan's order, `weights` and
  // prims_.fused left as that order's. Returns whether they were copied in the other order.
  bool order_weights(const Node& node, const Tensor& w, memory::desc& weights, MatmulPlan::Order order) {
    if (weights != b_) {
      weights = b_;
      prims_.fused = build(node, weights, prims_.activation, prims_.fused_scratch, prims_.threads);
    }
    if (order == MatmulPlan::Order::Given) return false;
    const memory::desc other = b_ == transposed_last_two(b_.dims()) ? plain(b_.dims()) : transposed_last_two(b_.dims());
    const dnnl::primitive given = prims_.fused;
    const memory::desc given_scratch = prims_.fused_scratch;
    weights = other;
    prims_.fused = build(node, weights, prims_.activation, prims_.fused_scratch, prims_.threads);
    memory copy = laid_out(node, w, weights);
    if (order == MatmulPlan::Order::Other || other_order_faster(node, w, given, given_scratch, copy, other)) {
      packed_ = copy;
      return true;
    }
    weights = b_;
    prims_.fused = given;
    prims_.fused_scratch = given_scratch;
    return false;
  }

  // Whether the weights copied in the other plain order (`copy`, read by prims_.fused) take at most
  // 3/4 of the time of those as given (`given`), both run here on zeroed inputs.
  bool other_order_faster(const Node& node, const Tensor& w, dnnl::primitive given, memory::desc given_scratch,
                          const memory& copy, const memory::desc& other) const {
    TuningTimer timer;  // compile time spent choosing, for the region's report
    std::vector<float> src(floats_of(a_)), dst(floats_of(dst_)), bias(bias_ ? floats_of(*bias_) : 0);
    // Timed with the threads this thread may run (threads_to_run: one on the compile thread).
    // A oneDNN primitive starts a team of the count it was built with whatever the caller's
    // setting, and a team started on a background thread throttles the callers' spin-wait
    // for the rest of the process (interp/omp_threads.h): so a background compile times
    // twins built for its one thread.
    const int timed_threads = threads_to_run(prims_.threads);
    auto run_ms = [&](const dnnl::primitive& p, const memory::desc& scratch, const memory& weights) {
      std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, wrap(a_, src.data())}, {DNNL_ARG_WEIGHTS, weights},
                                              {DNNL_ARG_DST, wrap(dst_, dst.data())}};
      if (bias_) args.emplace(DNNL_ARG_BIAS, wrap(*bias_, bias.data()));
      const auto t0 = std::chrono::steady_clock::now();
      execute(p, scratch, args, timed_threads);
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    };
    dnnl::primitive timed_other = prims_.fused;
    memory::desc timed_other_scratch = prims_.fused_scratch;
    if (timed_threads != prims_.threads) {
      memory::desc weights = b_;
      given = build(node, weights, prims_.activation, given_scratch, timed_threads);
      weights = other;
      timed_other = build(node, weights, prims_.activation, timed_other_scratch, timed_threads);
    }
    // Alternately, so that a burst of other work on the machine slows both alike; the first
    // run of each warms the caches; the best of the other three counts.
    double t_given = 1e300, t_other = 1e300;
    for (int i = 0; i < 4; ++i) {
      const double g = run_ms(given, given_scratch, wrap(b_, w.data<float>()));
      const double o = run_ms(timed_other, timed_other_scratch, copy);
      if (i) t_given = std::min(t_given, g), t_other = std::min(t_other, o);
    }
    return t_other <= 0.75 * t_given;
  }

  void describe_onednn(const Node& node, const DnnlActivation& activation, bool relaid) {
    description_ = "oneDNN matmul (" + node.describe() + "): src " + dims_str(a_) + " x weights " + dims_str(b_) +
                   " -> dst " + dims_str(dst_) + "; alpha " + std::to_string(alpha_) +
                   (c_ ? "; sum post-op (C " + shape_str(*c_) + ", beta " + std::to_string(beta_) + ")" : "") +
                   (bias_ ? "; bias " + dims_str(*bias_) : "") +
                   activation_text(activation) + (packed_ ? "; constant weights packed once" : "") +
                   (relaid ? "; constant weights copied in the other plain order (measured faster)" : "") + "; " +
                   std::to_string(prims_.threads) + " OpenMP threads";
  }
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
  float alpha_, beta_;  // Gemm's: dst = alpha * a . b + beta * C
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
      return make_dnnl_conv_chain(chain, shapes, constants, std::vector<int>{});
    }
    case Op::MaxPool:
    case Op::AveragePool:
      TERRACE_CHECK(shapes.size() == 1, InvalidArgument, node.describe(), ": ", op_name(node.op), " takes 1 input");
      TERRACE_CHECK(activation.kind == DnnlActivation::Kind::None, Internal, node.describe(), ": a pool takes no activation");
      return dnnl_detail::make_pool(node, shapes[0]);
    default: fail(ErrorCode::NotImplemented, node.describe(), ": no oneDNN kernel for ", op_name(node.op));
  }
}

}  // namespace terrace::jit
