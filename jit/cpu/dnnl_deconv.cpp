// ConvTranspose as a oneDNN deconvolution on plain float32 NCHW buffers (jit/cpu/dnnl_deconv.h).
//
// ONNX's ConvTranspose, as the interpreter computes it (interp/ops/conv_transpose.cpp): input
// point i of channel ci adds x[ci, i] * w[ci, co, k] to output point o = i * stride + k * dilation
// - pad_begin, per spatial dim, for every kernel tap k; the output has
// full - pad_begin - pad_end points, full = stride * (in - 1) + output_padding + (kernel - 1) *
// dilation + 1; then the bias. oneDNN's deconvolution computes the same sums for pads >= 0 and no
// output_padding (the taps reach natural = full - output_padding points). Here oneDNN computes
// the window [lo, hi) of those natural points that the output shows (lo = max(pad_begin, 0),
// hi = min(pad_begin + out, natural)), with pads lo and natural - hi, and writes it at offset
// lo - pad_begin of the output; the points outside it (output_padding, a negative pad from
// output_shape or SAME padding) are reached by no tap and get the bias, then the activation.
#include "jit/cpu/dnnl_deconv.h"

#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "interp/error.h"
#include "interp/interpreter.h"
#include "interp/omp_threads.h"
#include "interp/ops/conv.h"
#include "jit/cpu/dnnl_activation.h"
#include "jit/cpu/dnnl_common.h"

namespace terrace::jit {
namespace {

using dnnl::memory;
using Dims = memory::dims;

std::string dims_str(const Dims& d) { return shape_str(Shape(d.begin(), d.end())); }

bool has_zero_dim(const Shape& s) { return std::find(s.begin(), s.end(), 0) != s.end(); }

// The interpreter's activation (NaN stays); oneDNN's fused ones agree on finite values only.
float activate(const DnnlActivation& a, float x) { return dnnl_activation_apply(a, x); }

class Deconvolution : public DnnlPrimitive {
 public:
  Deconvolution(const Node& node, const std::vector<Shape>& shapes, const std::vector<const Tensor*>& constants,
                const DnnlActivation& activation)
      : node_(node), shapes_(shapes), activation_(activation) {
    TERRACE_CHECK(shapes.size() == 2 || shapes.size() == 3, InvalidArgument, node.describe(),
                  ": ConvTranspose takes 2 or 3 inputs");
    const ops::ConvGeometry g = ops::conv_transpose_geometry(node, shapes[0], shapes[1]);
    TERRACE_CHECK(g.in.size() <= 3, NotImplemented, node.describe(), ": tier 1 runs ConvTranspose with 1 to 3 spatial dimensions");
    if (shapes.size() == 3)
      TERRACE_CHECK(shapes[2] == Shape{g.cout}, InvalidArgument, node.describe(), ": bias ", shape_str(shapes[2]),
                    ", expected [", g.cout, "]");
    out_ = g.out_shape();
    cout_ = g.cout;
    plane_ = g.out_size();
    description_ = "oneDNN deconvolution (" + node.describe() + "): src " + shape_str(shapes[0]) + ", weights " +
                   shape_str(shapes[1]) + (shapes.size() == 3 ? ", bias" : "") + " -> dst " + shape_str(out_);
    const std::string post =
        activation.kind == DnnlActivation::Kind::None ? "" : "; post-op " + dnnl_activation_name(activation);
    if (has_zero_dim(shapes[0]) || has_zero_dim(shapes[1]) || has_zero_dim(out_)) {
      reference_only_ = true;
      description_ += "; a zero-sized tensor, run by the interpreter's kernel, no library call";
      return;
    }
    const std::optional<Window> w = window(g);
    if (!w) {  // no tap reaches the output: bias (or zero) everywhere
      bias_only_ = true;
      description_ += "; no kernel tap reaches the output: it holds the bias, no library call" + post;
      return;
    }
    inner_ = Shape(w->inner.begin(), w->inner.end());
    user_w_ = user_weights(g);
    src_ = plain(Dims(shapes[0].begin(), shapes[0].end()));
    dst_ = plain(w->inner);
    if (shapes.size() == 3) bias_ = plain({g.cout});
    threads_ = threads_for(double(shape_numel(shapes[0])) * double(g.cout_g()) * double(g.kernel_size()));
    for (size_t i = 0; i < constants.size() && i < shapes.size(); ++i)
      if (constants[i] && activation.kind != DnnlActivation::Kind::None &&
          !all_finite(constants[i]->data<float>(), size_t(constants[i]->numel()), 1))
        reference_only_ = true;  // non-finite constants: the fused activation would differ
    const std::string impl = build_primitive(node, *w, activation);
    const Tensor* constant_w = constants.size() > 1 ? constants[1] : nullptr;
    lay_out_weights(node, constant_w);
    description_ += std::string("; ") + impl + ", strides " + dims_str(w->strides) + ", dilations (gaps) " +
                    dims_str(w->dil) + ", pads " + dims_str(w->pad_l) + " " + dims_str(w->pad_r) + ", groups " +
                    std::to_string(g.group) +
                    (direct_ ? "" : "; computes " + shape_str(inner_) + " of the output, the rest holds the bias") +
                    (constant_w ? "; constant weights reordered once" : w_reorder_ ? "; weights reordered each call" : "") +
                    post + (post.empty() ? "" : " (fused on inputs that are all finite)") + "; " +
                    std::to_string(threads_) + " OpenMP threads";
  }

  const Shape& output_shape() const override { return out_; }

  void run(const std::vector<const float*>& in, float* out) const override {
    TERRACE_CHECK(in.size() == shapes_.size(), Internal, node_.describe(), ": a deconvolution got ", in.size(),
                  " inputs, not ", shapes_.size());
    bool finite = true;
    if (activation_.kind != DnnlActivation::Kind::None && !reference_only_)
      for (size_t i = 0; i < in.size() && finite; ++i)
        finite = all_finite(in[i], size_t(shape_numel(shapes_[i])), threads_to_run(threads_));
    if (reference_only_ || !finite) return run_reference(in, out);
    const float* bias = shapes_.size() == 3 ? in[2] : nullptr;
    if (bias_only_) return fill(bias, out);
    memory w = weights_;
    if (!w) {
      w = wrap(user_w_, in[1]);
      if (w_reorder_) {
        memory packed(w_desc_, cpu_engine(), thread_buffer(1, w_desc_.get_size()));
        execute(*w_reorder_, reorder_scratch_, {{DNNL_ARG_FROM, w}, {DNNL_ARG_TO, packed}}, threads_);
        w = packed;
      }
    }
    float* dst = direct_ ? out : thread_buffer(2, dst_.get_size());
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, wrap(src_, in[0])}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, wrap(dst_, dst)}};
    if (bias) args.emplace(DNNL_ARG_BIAS, wrap(bias_, bias));
    execute(prim_, scratch_, args, threads_);
    if (direct_) return;
    // The computed window into the output, whose other points hold the bias.
    fill(bias, out);
    const size_t rank = inner_.size() - 2;
    const int64_t rows = shape_numel(inner_) / inner_.back();
    std::vector<int64_t> index(inner_.size() - 1, 0);  // over inner_ without its last dim
    for (int64_t r = 0; r < rows; ++r) {
      int64_t at = index[0] * out_[1] + index[1];
      for (size_t d = 0; d + 1 < rank; ++d) at = at * out_[d + 2] + index[d + 2] + offset_[d];
      at = at * out_.back() + offset_.back();
      std::memcpy(out + at, dst + r * inner_.back(), size_t(inner_.back()) * sizeof(float));
      for (size_t d = index.size(); d-- > 0;) {
        if (++index[d] < inner_[d]) break;
        index[d] = 0;
      }
    }
  }

 private:
  // What oneDNN computes: the window of natural points the output shows, per spatial dim, as
  // oneDNN's strides, dilation gaps and pads, and dst dims `inner`.
  struct Window {
    Dims strides, dil, pad_l, pad_r, inner;
  };

  // The window, with offset_ and direct_; none where no tap reaches the output.
  std::optional<Window> window(const ops::ConvGeometry& g) {
    Window w;
    w.inner = {g.batch, g.cout};
    direct_ = true;
    for (size_t d = 0; d < g.in.size(); ++d) {
      const int64_t natural = g.strides[d] * (g.in[d] - 1) + (g.kernel[d] - 1) * g.dilations[d] + 1;
      const int64_t lo = std::max<int64_t>(g.pads_begin[d], 0);
      const int64_t hi = std::min<int64_t>(g.pads_begin[d] + g.out[d], natural);
      if (hi <= lo) return std::nullopt;
      w.strides.push_back(g.strides[d]);
      w.dil.push_back(g.dilations[d] - 1);  // oneDNN counts the gaps
      w.pad_l.push_back(lo);
      w.pad_r.push_back(natural - hi);
      w.inner.push_back(hi - lo);
      offset_.push_back(lo - g.pads_begin[d]);
      direct_ = direct_ && hi - lo == g.out[d];
    }
    return w;
  }

  // Weights [C, M/G, k...] as oneDNN's [M, C, k...] or [G, M/G, C/G, k...], read through strides.
  static memory::desc user_weights(const ops::ConvGeometry& g) {
    const int64_t K = g.kernel_size(), cin_g = g.cin_g(), cout_g = g.cout_g();
    Dims wdims, wstrides;
    if (g.group > 1) {
      wdims = {g.group, cout_g, cin_g};
      wstrides = {cin_g * cout_g * K, K, cout_g * K};
    } else {
      wdims = {g.cout, g.cin};
      wstrides = {K, g.cout * K};
    }
    int64_t kstride = K;
    for (int64_t k : g.kernel) {
      kstride /= k;
      wdims.push_back(k);
      wstrides.push_back(kstride);
    }
    return memory::desc(wdims, memory::data_type::f32, wstrides);
  }

  // prim_, its scratchpad and weights layout; returns oneDNN's name for its implementation.
  std::string build_primitive(const Node& node, const Window& w, const DnnlActivation& activation) {
    auto pd = building(node, threads_, "deconvolution", [&] {
      const memory::desc weights(user_w_.dims(), memory::data_type::f32, memory::format_tag::any);
      dnnl::deconvolution_forward::desc d =
          shapes_.size() == 3
              ? dnnl::deconvolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                  dnnl::algorithm::deconvolution_direct, src_, weights, bias_, dst_,
                                                  w.strides, w.dil, w.pad_l, w.pad_r)
              : dnnl::deconvolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                  dnnl::algorithm::deconvolution_direct, src_, weights, dst_,
                                                  w.strides, w.dil, w.pad_l, w.pad_r);
      dnnl::post_ops ops;
      dnnl_append_activation(ops, activation);
      dnnl::primitive_attr attr = user_scratchpad();
      attr.set_post_ops(ops);
      return dnnl::deconvolution_forward::primitive_desc(d, attr, cpu_engine());
    });
    prim_ = dnnl::deconvolution_forward(pd);
    scratch_ = pd.scratchpad_desc();
    w_desc_ = pd.weights_desc();
    return pd.impl_info_str();
  }

  // The reorder into the primitive's weights layout where it differs from the given one; constant
  // weights in that layout once, into weights_.
  void lay_out_weights(const Node& node, const Tensor* constant_w) {
    if (w_desc_ != user_w_) {
      // Constant weights are reordered once, here on a compile thread: built for the thread count
      // that runs there (interp/omp_threads.h); weights given at run time on the callers' count.
      w_reorder_ = building(node, constant_w ? threads_to_run(threads_) : threads_, "deconvolution", [&] {
        dnnl::reorder::primitive_desc r(cpu_engine(), user_w_, cpu_engine(), w_desc_, user_scratchpad());
        reorder_scratch_ = r.scratchpad_desc();
        return dnnl::primitive(dnnl::reorder(r));
      });
    }
    if (!constant_w) return;
    weights_ = memory(w_desc_, cpu_engine());
    if (w_reorder_)
      execute(*w_reorder_, reorder_scratch_, {{DNNL_ARG_FROM, wrap(user_w_, constant_w->data<float>())}, {DNNL_ARG_TO, weights_}},
              threads_to_run(threads_));
    else
      std::memcpy(weights_.get_data_handle(), constant_w->data<float>(), w_desc_.get_size());
  }
  // Every output point as the bias (or zero) through the activation: the points no tap reaches.
  void fill(const float* bias, float* out) const {
    for (int64_t nc = 0; nc < out_[0] * cout_; ++nc) {
      const float v = activate(activation_, bias ? bias[nc % cout_] : 0.0f);
      std::fill(out + nc * plane_, out + (nc + 1) * plane_, v);
    }
  }

  // The interpreter's kernel, then its activation.
  void run_reference(const std::vector<const float*>& in, float* out) const {
    std::vector<RValue> args;
    args.reserve(in.size());
    std::vector<const RValue*> ptrs;
    for (size_t i = 0; i < in.size(); ++i) {
      Tensor t = Tensor::empty(DType::Float32, shapes_[i]);
      if (t.numel() > 0) std::memcpy(t.data<float>(), in[i], t.nbytes());
      args.emplace_back(std::move(t));
      ptrs.push_back(&args.back());
    }
    Tensor y = interpret_node(node_, ptrs).at(0).tensor;
    float* p = y.data<float>();
    for (int64_t i = 0; i < y.numel(); ++i) p[i] = activate(activation_, p[i]);
    if (y.numel() > 0) std::memcpy(out, p, y.nbytes());
  }

  Node node_;
  std::vector<Shape> shapes_;
  DnnlActivation activation_;
  Shape out_, inner_;
  int64_t cout_ = 0, plane_ = 0;
  std::vector<int64_t> offset_;  // per spatial dim: where the computed window starts in the output
  bool reference_only_ = false, bias_only_ = false, direct_ = true;
  int threads_ = 1;
  memory::desc src_, dst_, bias_, user_w_, w_desc_, scratch_, reorder_scratch_;
  dnnl::primitive prim_;
  std::optional<dnnl::primitive> w_reorder_;
  memory weights_;  // constant weights in the primitive's layout
};

}  // namespace

std::unique_ptr<DnnlPrimitive> make_dnnl_deconvolution(const Node& node, const std::vector<Shape>& shapes,
                                                       const std::vector<const Tensor*>& constants,
                                                       DnnlActivation activation) {
  TERRACE_CHECK(node.op == Op::ConvTranspose, Internal, node.describe(), ": not a ConvTranspose");
  return std::make_unique<Deconvolution>(node, shapes, constants, activation);
}

std::string dnnl_deconv_can_compile(const Node& node, const std::vector<DType>& dtypes,
                                    const std::vector<std::optional<size_t>>& ranks) {
  if (node.op != Op::ConvTranspose) return std::string("tier 1 has no deconvolution kernel for ") + op_name(node.op);
  for (DType t : dtypes)
    if (t != DType::Float32) return std::string("tier 1 runs ConvTranspose in float32 only, not ") + dtype_name(t);
  if (!ranks.empty() && ranks[0] && (*ranks[0] < 3 || *ranks[0] > 5))
    return "tier 1 runs ConvTranspose with 1 to 3 spatial dimensions";
  return "";
}

}  // namespace terrace::jit
