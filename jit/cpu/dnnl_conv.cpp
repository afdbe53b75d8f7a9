// Conv chains as oneDNN primitives (jit/cpu/dnnl_ops.h): a whole CNN stage's convolutions, with
// their activations, residual Adds, pools and channel Concats and Splits, in oneDNN's blocked
// layouts (a pool alone: dnnl_pool.cpp). The geometry is the interpreter's (conv_geometry, the
// pools' rules), so the attributes mean one thing everywhere; the arithmetic is oneDNN's,
// validated against the interpreter.
#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>
#include <vector>

#include "interp/error.h"
#include "interp/interpreter.h"
#include "interp/omp_threads.h"
#include "interp/ops/conv.h"
#include "jit/cpu/channel_loops.h"
#include "jit/cpu/dnnl_common.h"
#include "jit/cpu/dnnl_internal.h"
#include "jit/cpu/dnnl_ops.h"
#include "jit/cpu/packed_gemm.h"
#include "jit/cpu/winograd_conv.h"

namespace terrace::jit {
namespace {

using dnnl::memory;
using Dims = memory::dims;
using namespace dnnl_detail;

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
      if (constants[i] && constants[i]->dtype() == DType::Float32 && checks_finite() &&  // not a Split's sizes
          !all_finite(constants[i]->data<float>(), size_t(constants[i]->numel()), 1))
        reference_only_ = true;  // non-finite weights: the fused activations or a max would differ
    // A lone 1x1 convolution of stride 1 keeps plain layouts: the reorders at its edges cost about
    // what the blocked kernel saves. Depthwise, dense 3x3 and strided ones gain from blocking.
    bool plain_edges = false;
    if (steps_.size() == 1 && steps_[0].kind == StepKind::Conv) {
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
      memory dst = s.direct_output >= 0 ? wrap(s.dst, out[size_t(s.direct_output)])
                                        : memory(s.dst, cpu_engine(), thread_buffer(size_t(s.slot), s.dst.get_size()));
      if (s.kind == StepKind::Concat) run_concat(s, k, in, result, dst);
      else run_step(s, k, source(s, k, in, result), dst, in, result);
      result[k] = dst;
      for (size_t j = 0; j < outputs_.size(); ++j)  // results read outside, to plain NCHW now
        if (outputs_[j] == int(k) && s.direct_output != int(j)) {
          if (out_reorder_[j]) (*out_reorder_[j])(dst, wrap(out_user_[j], out[j]), s.threads);
          else std::memcpy(out[j], dst.get_data_handle(), out_user_[j].get_size());
        }
    }
  }

 private:
  struct Step;

  // Step k's x for this call, in the layout its primitive reads.
  memory source(const Step& s, size_t k, const std::vector<const float*>& in, const std::vector<memory>& result) const {
    if (s.in_reorder) {  // a chain input, from plain NCHW
      memory src(s.src, cpu_engine(), thread_buffer(n_slots_ + 1 + k, s.src.get_size()));
      (*s.in_reorder)(wrap(s.in_user, in[size_t(s.x)]), src, s.threads);
      return src;
    }
    if (s.step_reorder) {  // an earlier step's result, in another layout
      memory src(s.src, cpu_engine(), thread_buffer(n_slots_ + 1 + k, s.src.get_size()));
      (*s.step_reorder)(result[size_t(s.x_step)], src, s.threads);
      return src;
    }
    return s.x >= 0 ? wrap(s.src, in[size_t(s.x)]) : result[size_t(s.x_step)];
  }

  // Step k (all kinds but Concat) from src into dst.
  void run_step(const Step& s, size_t k, const memory& src, const memory& dst, const std::vector<const float*>& in,
                const std::vector<memory>& result) const {
    if (s.kind == StepKind::Slice) {  // a run of channels from each run of x (build_slice_step)
      const int64_t kept = (s.end - s.begin) * s.unit;
      copy_runs(static_cast<float*>(dst.get_data_handle()), kept,
                static_cast<const float*>(src.get_data_handle()) + s.begin * s.unit, s.x_shape[1] * s.unit, s.copy_rows,
                kept, threads_to_run(s.threads));
    } else if (s.kind == StepKind::Pool) {
      execute(s.conv, s.scratch, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}}, s.threads);
    } else if (s.kind == StepKind::Scale && s.own_scale) {
      s.own_scale->run(static_cast<const float*>(src.get_data_handle()),
                       static_cast<const float*>(scale_source(s, k, in, result).get_data_handle()),
                       static_cast<float*>(dst.get_data_handle()), threads_to_run(s.threads));
    } else if (s.kind == StepKind::Scale) {
      execute(s.conv, s.scratch, {{DNNL_ARG_SRC_0, src}, {DNNL_ARG_SRC_1, scale_source(s, k, in, result)}, {DNNL_ARG_DST, dst}},
              s.threads);
    } else {
      run_conv(s, k, src, dst, in, result);
    }
  }

  void run_conv(const Step& s, size_t k, const memory& src, const memory& dst, const std::vector<const float*>& in,
                const std::vector<memory>& result) const {
    if (s.add_after) {  // the addend in dst's layout, in src's buffer once the primitive read it
      run_primitive(s, src, dst, in);
      memory addend(s.dst, cpu_engine(), thread_buffer(n_slots_ + 1 + k, s.dst.get_size()));
      if (s.sum_input >= 0) s.sum_reorder(wrap(s.sum_user, in[size_t(s.sum_input)]), addend, s.threads);
      else s.sum_reorder(result[size_t(s.sum_step)], addend, s.threads);
      add_into(static_cast<float*>(dst.get_data_handle()), static_cast<const float*>(addend.get_data_handle()),
               int64_t(s.dst.get_size() / sizeof(float)), threads_to_run(s.threads));
      return;
    }
    if (s.sum_input >= 0) s.sum_reorder(wrap(s.sum_user, in[size_t(s.sum_input)]), dst, s.threads);
    if (s.sum_step >= 0 && !s.sum_in_place) s.sum_reorder(result[size_t(s.sum_step)], dst, s.threads);
    run_primitive(s, src, dst, in);
  }

  // Step s's convolution (oneDNN's, or Terrace's Winograd) with its post-ops.
  void run_primitive(const Step& s, const memory& src, const memory& dst, const std::vector<const float*>& in) const {
    if (s.winograd) {  // its blocks in the slot after the chain's own (those above)
      s.winograd->run(static_cast<const float*>(src.get_data_handle()), s.b >= 0 ? in[size_t(s.b)] : nullptr,
                      static_cast<float*>(dst.get_data_handle()), threads_to_run(s.threads), n_slots_ + 1 + steps_.size());
      return;
    }
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

  // A Concat: each value, in the result's layout (reordered into the step's own buffer where its
  // layout differs), copied run by run into its place in the result's runs.
  void run_concat(const Step& s, size_t k, const std::vector<const float*>& in, const std::vector<memory>& result,
                  const memory& dst) const {
    for (size_t j = 0; j < s.parts.size(); ++j) {
      const int v = s.parts[j];
      memory part = v >= 0 ? wrap(plain(dims_of(input_shapes_[size_t(v)])), in[size_t(v)]) : result[size_t(-1 - v)];
      if (s.part_reorder[j]) {
        memory m(s.part_desc[j], cpu_engine(), thread_buffer(n_slots_ + 1 + k, s.part_desc[j].get_size()));
        (*s.part_reorder[j])(part, m, s.threads);
        part = m;
      }
      const int64_t len = s.part_channels[j] * s.unit;
      copy_runs(static_cast<float*>(dst.get_data_handle()) + s.part_at[j] * s.unit, s.out_shape[1] * s.unit,
                static_cast<const float*>(part.get_data_handle()), len, s.copy_rows, len, threads_to_run(s.threads));
    }
  }

  // A Conv with its post-ops; a pool; a Scale, x times a per-channel s (binary_mul); a Concat or
  // Slice of channels (Terrace's copies). A pool's and a Scale's `conv` holds their primitive;
  // they have no weights.
  enum class StepKind { Conv, Pool, Scale, Concat, Slice };
  struct Step {
    Node node;                   // the Conv, the pool, the Mul, the Concat or the Split
    StepKind kind = StepKind::Conv;
    int x = -1, w = -1, b = -1;  // chain inputs (x: -1 when it is an earlier step's result)
    int x_step = -1;             // the step whose result is x
    int s = -1, s_step = -1;     // a Scale's s: a chain input, or the step whose result it is
    // A Concat's values (chain input i, or -1 - the step whose result it is), each in the
    // result's layout (reordered where its own differs): its channels, and its first one's.
    std::vector<int> parts;
    std::vector<memory::desc> part_desc;
    std::vector<std::optional<Reorder>> part_reorder;
    std::vector<int64_t> part_channels, part_at;
    int64_t begin = 0, end = 0;  // a Slice's channels of x
    int64_t unit = 0, copy_rows = 0;  // a Concat's or Slice's ChannelRuns: floats a channel; runs
    bool s_first = false;        // the Mul's first input is s (for the reference path)
    memory::desc s_desc;         // s in the layout the binary primitive reads
    std::optional<Reorder> s_reorder;  // step s_step's result into s_desc
    std::optional<ChannelScaleLoop> own_scale;  // in place of a reference binary_mul
    memory::desc in_user;        // x, a chain input, in plain NCHW
    std::optional<Reorder> in_reorder;  // ... into the primitive's source layout
    std::optional<Reorder> step_reorder;  // x, step x_step's result, into the source layout (is_reference)
    Shape x_shape, w_shape, out_shape;  // w_shape: a Conv's weights, a Scale's s
    // In order after the convolution: an activation, or a sum (activation None) of chain input
    // `sum_input` or of step `sum_step`'s result.
    std::vector<DnnlActivation> post;
    int sum_input = -1, sum_step = -1;
    bool sum_in_place = false;  // dst is the summed result's own buffer (its last use)
    bool add_after = false;     // the last sum, after an activation, is added after the primitive
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
                       ops[size_t(k) + 1].kind == DnnlChainOp::Kind::Pool ||
                       ops[size_t(k) + 1].kind == DnnlChainOp::Kind::Scale ||
                       ops[size_t(k) + 1].kind == DnnlChainOp::Kind::Concat ||
                       ops[size_t(k) + 1].kind == DnnlChainOp::Kind::Slice),
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
        TERRACE_CHECK(k > 0 || (!op.inputs.empty() && op.inputs[0] >= 0), Internal, op.node.describe(),
                      ": a chain starts with a Conv of a chain input");
        steps_.push_back(parse_conv(ops, op, input_shape));
        op_step_.push_back(int(steps_.size()) - 1);
        continue;
      }
      if (op.kind == DnnlChainOp::Kind::Pool) {
        TERRACE_CHECK(op.inputs.size() == 1 && (k > 0 || op.inputs[0] >= 0), Internal, op.node.describe(),
                      ": a chained pool reads one value");
        Step s;
        s.node = op.node;
        s.kind = StepKind::Pool;
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
      if (op.kind == DnnlChainOp::Kind::Concat || op.kind == DnnlChainOp::Kind::Slice) {
        steps_.push_back(parse_copy(ops, op, input_shape));
        op_step_.push_back(int(steps_.size()) - 1);
        continue;
      }
      if (op.kind == DnnlChainOp::Kind::Scale) {
        steps_.push_back(parse_scale(ops, op, input_shape));
        op_step_.push_back(int(steps_.size()) - 1);
        continue;
      }
      Step& s = steps_.back();
      TERRACE_CHECK(s.kind == StepKind::Conv, Internal, op.node.describe(),
                    ": a chained activation or Add follows a Conv, not a pool or a Scale");
      op_step_.push_back(int(steps_.size()) - 1);
      if (op.kind == DnnlChainOp::Kind::Activation) {
        TERRACE_CHECK(op.activation.kind != DnnlActivation::Kind::None, Internal, op.node.describe(), ": no activation");
        s.post.push_back(op.activation);
        has_activation_ = true;
        continue;
      }
      TERRACE_CHECK(s.sum_input < 0 && s.sum_step < 0 && op.inputs.size() == 1, Internal, op.node.describe(),
                    ": a chained Add follows a Conv (or its activation) and reads one other value");
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

  // A Conv step: x a chain input or an earlier result, w and b chain inputs.
  template <typename InputShape>
  Step parse_conv(const std::vector<DnnlChainOp>& ops, const DnnlChainOp& op, const InputShape& input_shape) {
    TERRACE_CHECK(op.inputs.size() == 2 || op.inputs.size() == 3, InvalidArgument, op.node.describe(),
                  ": Conv takes 2 or 3 inputs");
    TERRACE_CHECK(op.inputs[1] >= 0 && (op.inputs.size() == 2 || op.inputs[2] >= 0), Internal, op.node.describe(),
                  ": a chained Conv reads an earlier result as x only");
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
    return s;
  }

  // A Scale step from its Mul: x is the operand of the result's shape, s the per-channel one
  // ([N or 1, C, 1, ...]); for equal shapes, the Mul's first input is x.
  template <typename InputShape>
  Step parse_scale(const std::vector<DnnlChainOp>& ops, const DnnlChainOp& op, const InputShape& input_shape) {
    TERRACE_CHECK(op.inputs.size() == 2, Internal, op.node.describe(), ": a chained Scale reads two values");
    Step st;
    st.node = op.node;
    st.kind = StepKind::Scale;
    int operand_step[2] = {-1, -1};
    Shape shape[2];
    for (int i = 0; i < 2; ++i) {
      const int v = op.inputs[size_t(i)];
      if (v < 0) operand_step[i] = step_of_result(ops, -1 - v);
      shape[i] = v >= 0 ? input_shape(op, v) : steps_[size_t(operand_step[i])].out_shape;
    }
    st.s_first = shape_numel(shape[0]) < shape_numel(shape[1]);
    const int xi = st.s_first ? 1 : 0, si = 1 - xi;
    const Shape &x = shape[xi], &sc = shape[si];
    bool per_channel = x.size() >= 3 && sc.size() == x.size() && sc[1] == x[1] && (sc[0] == 1 || sc[0] == x[0]);
    for (size_t d = 2; d < sc.size() && per_channel; ++d) per_channel = sc[d] == 1 || sc == x;
    TERRACE_CHECK(per_channel, NotImplemented, op.node.describe(), ": tier 1 chains a Mul by one value per channel, not ",
                  shape_str(x), " by ", shape_str(sc));
    st.x = op.inputs[size_t(xi)] >= 0 ? op.inputs[size_t(xi)] : -1;
    st.x_step = operand_step[xi];
    st.s = op.inputs[size_t(si)] >= 0 ? op.inputs[size_t(si)] : -1;
    st.s_step = operand_step[si];
    st.x_shape = x;
    st.w_shape = sc;  // a Scale's second operand
    st.out_shape = x;
    return st;
  }

  // A Scale step: binary_mul reading x in its producer's layout and s in its producer's (a chain
  // input: plain), else s reordered to plain where oneDNN would run its reference code.
  void build_scale_step(size_t k) {
    Step& s = steps_[k];
    s.threads = threads_for(double(shape_numel(s.out_shape)) / 8);  // a multiply per element
    const memory::desc x = s.x < 0 ? steps_[size_t(s.x_step)].dst : plain(dims_of(s.x_shape));
    const memory::desc sp = plain(dims_of(s.w_shape));
    const memory::desc given = s.s < 0 ? steps_[size_t(s.s_step)].dst : sp;
    const memory::desc dst(dims_of(s.out_shape), memory::data_type::f32, memory::format_tag::any);
    auto primitive = [&](const memory::desc& scale) {
      return building(s.node, s.threads, "primitive", [&] {
        dnnl::binary::desc d(dnnl::algorithm::binary_mul, x, scale, dst);
        return dnnl::binary::primitive_desc(d, user_scratchpad(), cpu_engine());
      });
    };
    auto pd = primitive(given);
    if (is_reference(pd) && given != sp)
      if (auto p = primitive(sp); !is_reference(p)) pd = p;
    s.src = pd.src_desc(0);
    s.s_desc = pd.src_desc(1);
    s.dst = pd.dst_desc();
    if (is_reference(pd) && s.src == s.dst && (s.own_scale = ChannelScaleLoop::of(s.src, s.w_shape[0]))) {
      s.s_desc = sp;
    } else {
      s.conv = dnnl::binary(pd);
      s.scratch = pd.scratchpad_desc();
    }
    if (s.x >= 0) s.in_user = plain(dims_of(s.x_shape));
    if (s.s_step >= 0 && s.s_desc != given) s.s_reorder = make_reorder(s.node, given, s.s_desc, s.threads);
    s.text = "binary_mul (" + s.node.describe() + ", " + (s.own_scale ? std::string("Terrace's loop") : pd.impl_info_str()) + "): x " +
             (s.x >= 0 ? "input " + std::to_string(s.x) : "step " + std::to_string(s.x_step)) + " " +
             dims_str(dims_of(s.x_shape)) + " times s " +
             (s.s >= 0 ? "input " + std::to_string(s.s) : "step " + std::to_string(s.s_step)) + " " +
             dims_str(dims_of(s.w_shape)) + (s.s_reorder ? " (reordered)" : "") + "; " + std::to_string(s.threads) +
             " OpenMP threads";
  }

  // A Scale step's s for this call, in the layout its primitive reads.
  memory scale_source(const Step& s, size_t k, const std::vector<const float*>& in, const std::vector<memory>& result) const {
    if (s.s >= 0) return wrap(s.s_desc, in[size_t(s.s)]);
    if (!s.s_reorder) return result[size_t(s.s_step)];
    memory m(s.s_desc, cpu_engine(), thread_buffer(n_slots_ + 1 + k, s.s_desc.get_size()));
    (*s.s_reorder)(result[size_t(s.s_step)], m, s.threads);
    return m;
  }

  // A Concat step (its values along channels) or a Slice step (channels [begin, end) of x), 4-D.
  template <typename InputShape>
  Step parse_copy(const std::vector<DnnlChainOp>& ops, const DnnlChainOp& op, const InputShape& input_shape) {
    Step st;
    st.node = op.node;
    auto shape_of = [&](int v) -> const Shape& {
      return v >= 0 ? input_shape(op, v) : steps_[size_t(step_of_result(ops, -1 - v))].out_shape;
    };
    if (op.kind == DnnlChainOp::Kind::Slice) {
      TERRACE_CHECK(op.inputs.size() == 1, Internal, op.node.describe(), ": a chained Slice reads one value");
      st.kind = StepKind::Slice;
      st.x = op.inputs[0] >= 0 ? op.inputs[0] : -1;
      if (op.inputs[0] < 0) st.x_step = step_of_result(ops, -1 - op.inputs[0]);
      st.x_shape = shape_of(op.inputs[0]);
      TERRACE_CHECK(st.x_shape.size() == 4 && 0 <= op.begin && op.begin < op.end && op.end <= st.x_shape[1], Internal,
                    op.node.describe(), ": a chained Slice keeps channels [", op.begin, ", ", op.end, ") of ",
                    shape_str(st.x_shape));
      st.begin = op.begin;
      st.end = op.end;
      st.out_shape = st.x_shape;
      st.out_shape[1] = op.end - op.begin;
      return st;
    }
    TERRACE_CHECK(!op.inputs.empty(), Internal, op.node.describe(), ": a chained Concat reads values");
    st.kind = StepKind::Concat;
    for (int v : op.inputs) {
      st.parts.push_back(v >= 0 ? v : -1 - step_of_result(ops, -1 - v));
      const Shape& p = shape_of(v);
      if (st.out_shape.empty() && p.size() == 4) st.out_shape = {p[0], 0, p[2], p[3]};
      TERRACE_CHECK(p.size() == 4 && p[0] == st.out_shape[0] && p[2] == st.out_shape[2] && p[3] == st.out_shape[3],
                    NotImplemented, op.node.describe(), ": tier 1 chains a Concat of 4-D values along channels, not ",
                    shape_str(p));
      st.out_shape[1] += p[1];
    }
    return st;
  }

  // The layout of a chained copy: the first of `layouts` that is a ChannelRuns whose block divides
  // every count in `channels`, else nChw8c where 8 does (others reordered into it), else NCHW.
  static ChannelRuns copy_layout(const std::vector<memory::desc>& layouts, const std::vector<int64_t>& channels,
                                 const Dims& dims) {
    auto divides = [&](int64_t b) {
      return std::all_of(channels.begin(), channels.end(), [&](int64_t c) { return c % b == 0; });
    };
    for (const memory::desc& d : layouts)
      if (auto l = ChannelRuns::of(d); l && divides(l->block)) return *ChannelRuns::of(ChannelRuns::desc(dims, l->tag));
    const memory::format_tag tag = divides(8) ? memory::format_tag::aBcd8b : memory::format_tag::abcd;
    return *ChannelRuns::of(ChannelRuns::desc(dims, tag));
  }

  // A Concat step: its values in one layout (copy_layout; those in another reordered into it),
  // copied run by run.
  void build_concat_step(size_t k) {
    Step& s = steps_[k];
    s.threads = threads_for(double(shape_numel(s.out_shape)) / 16);  // a copy per element
    std::vector<memory::desc> given, steps_first;  // a chain input's plain layout comes last
    for (int v : s.parts) {
      given.push_back(v >= 0 ? plain(dims_of(input_shapes_[size_t(v)])) : steps_[size_t(-1 - v)].dst);
      s.part_channels.push_back(given.back().data.dims[1]);
      steps_first.insert(v >= 0 ? steps_first.end() : steps_first.begin(), given.back());
    }
    const ChannelRuns l = copy_layout(steps_first, s.part_channels, dims_of(s.out_shape));
    s.dst = ChannelRuns::desc(dims_of(s.out_shape), l.tag);
    s.unit = l.unit;
    s.copy_rows = s.out_shape[0] * l.runs;
    int64_t at = 0, reordered = 0;
    for (size_t j = 0; j < s.parts.size(); ++j) {
      Dims dims = dims_of(s.out_shape);
      dims[1] = s.part_channels[j];
      s.part_desc.push_back(ChannelRuns::desc(dims, l.tag));
      s.part_reorder.push_back(std::nullopt);
      if (given[j] != s.part_desc[j]) s.part_reorder.back() = make_reorder(s.node, given[j], s.part_desc[j], s.threads);
      reordered += s.part_reorder.back() ? 1 : 0;
      s.part_at.push_back(at);
      at += s.part_channels[j];
    }
    s.text = "concat (" + s.node.describe() + ", Terrace's copy in " + l.name() + "): " + std::to_string(s.parts.size()) +
             " values, " + std::to_string(reordered) + " reordered -> dst " + dims_str(dims_of(s.out_shape)) + "; " +
             std::to_string(s.threads) + " OpenMP threads";
  }

  // A Slice step: x in its producer's layout where that is a ChannelRuns whose block divides the
  // slice's ends, else reordered (copy_layout); the kept channels copied run by run.
  void build_slice_step(size_t k) {
    Step& s = steps_[k];
    s.threads = threads_for(double(shape_numel(s.out_shape)) / 16);
    const memory::desc given = s.x < 0 ? steps_[size_t(s.x_step)].dst : plain(dims_of(s.x_shape));
    const ChannelRuns l = copy_layout({given}, {s.begin, s.end, s.x_shape[1]}, dims_of(s.x_shape));
    s.src = ChannelRuns::desc(dims_of(s.x_shape), l.tag);
    s.dst = ChannelRuns::desc(dims_of(s.out_shape), l.tag);
    s.unit = l.unit;
    s.copy_rows = s.x_shape[0] * l.runs;
    if (s.x >= 0) {
      s.in_user = given;
      if (s.src != given) s.in_reorder = make_reorder(s.node, given, s.src, s.threads);
    } else if (s.src != given) {
      s.step_reorder = make_reorder(s.node, given, s.src, s.threads);
    }
    s.text = "slice (" + s.node.describe() + ", Terrace's copy in " + l.name() + "): x " +
             (s.x >= 0 ? "input " + std::to_string(s.x) : "step " + std::to_string(s.x_step)) + " " +
             dims_str(dims_of(s.x_shape)) + (s.src != given ? " (reordered)" : "") + ", channels [" +
             std::to_string(s.begin) + ", " + std::to_string(s.end) + "); " + std::to_string(s.threads) +
             " OpenMP threads";
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

  // Step s's primitive from `primitive(src, dst, with_last_sum)`, avoiding oneDNN's reference code
  // for the layouts given (a grouped convolution reading the NHWC its producer wrote: 10-50 ms
  // against well under 1 on RegNet's) by the layouts it picks itself, with a reorder from the
  // producer's, where that gets an optimised implementation.
  template <typename Primitive>
  static auto pick_primitive(Step& s, const Primitive& primitive, const memory::desc& src, const memory::desc& dst) {
    const memory::desc any_src(dims_of(s.x_shape), memory::data_type::f32, memory::format_tag::any),
        any_dst(dims_of(s.out_shape), memory::data_type::f32, memory::format_tag::any);
    auto best = [&](bool with_last_sum) {
      auto pd = primitive(src, dst, with_last_sum);
      if (is_reference(pd) && (src != any_src || dst != any_dst))
        if (auto free = primitive(any_src, any_dst, with_last_sum); !is_reference(free)) pd = free;
      return pd;
    };
    auto pd = best(true);
    // Below AVX-512 no oneDNN kernel takes a sum after an activation (YOLO's bottleneck: SiLU, then
    // the residual Add): the convolution without it, the Add after it (add_after).
    if (is_reference(pd) && s.post.size() > 1 && s.post.back().kind == DnnlActivation::Kind::None &&
        s.post[s.post.size() - 2].kind != DnnlActivation::Kind::None)
      if (auto p = best(false); !is_reference(p)) {
        pd = p;
        s.add_after = true;
      }
    return pd;
  }

  void build_step(size_t k, bool plain_edges, const std::vector<const Tensor*>& constants) {
    if (steps_[k].kind == StepKind::Pool) return build_pool_step(k);
    if (steps_[k].kind == StepKind::Scale) return build_scale_step(k);
    if (steps_[k].kind == StepKind::Concat) return build_concat_step(k);
    if (steps_[k].kind == StepKind::Slice) return build_slice_step(k);
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
    auto primitive = [&](const memory::desc& src, const memory::desc& dst, bool with_last_sum) {
      return building(s.node, s.threads, "primitive", [&] {
        const memory::desc weights = any(w);
        dnnl::convolution_forward::desc d =
            s.b >= 0 ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                       dnnl::algorithm::convolution_direct, src, weights, s.bias, dst,
                                                       strides, dil, pad_l, pad_r)
                     : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                       dnnl::algorithm::convolution_direct, src, weights, dst, strides,
                                                       dil, pad_l, pad_r);
        dnnl::post_ops post;
        for (size_t i = 0; i < s.post.size() - (with_last_sum ? 0 : 1); ++i) {
          if (s.post[i].kind == DnnlActivation::Kind::None) post.append_sum(1.0f);  // dst = conv + dst, dst holding the addend
          else append_activation(post, s.post[i]);
        }
        dnnl::primitive_attr attr = user_scratchpad();
        attr.set_post_ops(post);
        return dnnl::convolution_forward::primitive_desc(d, attr, cpu_engine());
      });
    };
    auto pd = pick_primitive(s, primitive, src, dst);
    s.conv = dnnl::convolution_forward(pd);
    s.scratch = pd.scratchpad_desc();
    s.src = pd.src_desc();
    s.dst = pd.dst_desc();
    s.w_desc = pd.weights_desc();
    if (s.x < 0 && s.src != steps_[size_t(s.x_step)].dst)
      s.step_reorder = make_reorder(s.node, steps_[size_t(s.x_step)].dst, s.src, s.threads);
    build_input_reorders(s);
    build_step_weights(s, g, constant_w);
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
    if (s.add_after) s.text += " (the sum after the primitive, Terrace's loop)";
    s.text += "; " + std::to_string(s.threads) + " OpenMP threads";
  }

  // Step s's reorders into the layouts its primitive chose: of a chain input, of a summed addend.
  void build_input_reorders(Step& s) {
    if (s.x >= 0) {
      s.in_user = plain(dims_of(s.x_shape));
      if (s.src != s.in_user) s.in_reorder = make_reorder(s.node, s.in_user, s.src, s.threads);
    }
    if (s.sum_input >= 0) {
      s.sum_user = plain(dims_of(s.out_shape));
      s.sum_reorder = make_reorder(s.node, s.sum_user, s.dst, s.threads);
    }
    if (s.sum_step >= 0) s.sum_reorder = make_reorder(s.node, steps_[size_t(s.sum_step)].dst, s.dst, s.threads);
  }

  // Step s's weights: constant ones for Terrace's Winograd kernel or in the primitive's layout
  // once; given ones reordered on each call where that layout is not theirs.
  void build_step_weights(Step& s, const ops::ConvGeometry& g, const Tensor* constant_w) {
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
  }

  // Terrace's own convolution for step s where it computes what oneDNN would, faster
  // (jit/cpu/winograd_conv.h): a 3x3 of stride 1 and pads 1, one group, no dilation, constant weights,
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
      if (steps_[k].s_step >= 0) last_use[size_t(steps_[k].s_step)] = std::max(last_use[size_t(steps_[k].s_step)], int(k));
      for (int v : steps_[k].parts)
        if (v < 0) last_use[size_t(-1 - v)] = std::max(last_use[size_t(-1 - v)], int(k));
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
      if (s.sum_step >= 0 && s.sum_step != s.x_step && !s.add_after && last_use[size_t(s.sum_step)] == int(k) &&
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
      if (s.kind == StepKind::Pool) {
        RValue x = s.x >= 0 ? tensor_of(s.x) : RValue(result[size_t(s.x_step)]);
        result[k] = interpret_node(s.node, {&x}).at(0).tensor;
        continue;
      }
      if (s.kind == StepKind::Concat || s.kind == StepKind::Slice) {
        result[k] = reference_copy(s, tensor_of, result);
        continue;
      }
      if (s.kind == StepKind::Scale) {
        RValue x = s.x >= 0 ? tensor_of(s.x) : RValue(result[size_t(s.x_step)]);
        RValue c = s.s >= 0 ? tensor_of(s.s) : RValue(result[size_t(s.s_step)]);
        result[k] = interpret_node(s.node, s.s_first ? std::vector<const RValue*>{&c, &x} : std::vector<const RValue*>{&x, &c})
                        .at(0)
                        .tensor;
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

  // A Concat (the interpreter's) or a Slice (its channels copied) on the reference path.
  template <typename TensorOf>
  Tensor reference_copy(const Step& s, const TensorOf& tensor_of, const std::vector<Tensor>& result) const {
    if (s.kind == StepKind::Concat) {
      std::vector<RValue> parts;
      parts.reserve(s.parts.size());
      for (int v : s.parts) parts.push_back(v >= 0 ? tensor_of(v) : RValue(result[size_t(-1 - v)]));
      std::vector<const RValue*> args;
      for (const RValue& p : parts) args.push_back(&p);
      return interpret_node(s.node, args).at(0).tensor;
    }
    const Tensor x = s.x >= 0 ? tensor_of(s.x).tensor : result[size_t(s.x_step)];
    Tensor y = Tensor::empty(DType::Float32, s.out_shape);
    const int64_t image = shape_numel(s.out_shape) / std::max<int64_t>(1, s.out_shape[0]);
    const int64_t plane = s.x_shape[2] * s.x_shape[3];
    for (int64_t n = 0; n < s.out_shape[0] && image > 0; ++n)
      std::memcpy(y.data<float>() + n * image, x.data<float>() + (n * s.x_shape[1] + s.begin) * plane,
                  size_t(image) * sizeof(float));
    return y;
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

}  // namespace

std::unique_ptr<DnnlPrimitive> make_dnnl_conv_chain(const std::vector<DnnlChainOp>& ops,
                                                    const std::vector<Shape>& input_shapes,
                                                    const std::vector<const Tensor*>& constants,
                                                    const std::vector<int>& outputs) {
  return std::make_unique<ConvChain>(ops, input_shapes, constants, outputs);
}

}  // namespace terrace::jit
