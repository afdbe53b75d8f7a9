// MaxPool and AveragePool (and, in chains, GlobalAveragePool and GlobalMaxPool) for oneDNN: the
// interpreter's pooling geometry as oneDNN's pooling primitive takes it, and a pool alone on plain
// NCHW buffers (jit/cpu/dnnl_internal.h).
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "interp/error.h"
#include "interp/interpreter.h"
#include "jit/cpu/dnnl_common.h"
#include "jit/cpu/dnnl_internal.h"
#include "jit/cpu/dnnl_ops.h"

namespace terrace::jit {
namespace dnnl_detail {

using Dims = memory::dims;

namespace {

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

}  // namespace

// The pool's output shape on x: its batch and channels, then each spatial dim's window count.
Shape pool_out_shape(const Node& node, const Shape& x) {
  Shape out{x[0], x[1]};
  for (const PoolDim& d : pool_dims(node, x)) out.push_back(d.out);
  return out;
}

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

}  // namespace dnnl_detail

namespace {

using dnnl::memory;
using Dims = memory::dims;
using namespace dnnl_detail;

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

std::unique_ptr<DnnlPrimitive> dnnl_detail::make_pool(const Node& node, const Shape& x) {
  return std::make_unique<Pool>(node, x);
}

}  // namespace terrace::jit
