// A MatMul whose row count is known only per call (oneDNN's runtime dims): one primitive for every
// size of a symbolic dim (issue 36), the weights read as given (plain), no activation; and a batched
// product of two computed operands whose matrices' dims are all known per call.
#include "jit/cpu/dnnl_common.h"
#include "jit/cpu/dnnl_internal.h"
#include "jit/cpu/dnnl_ops.h"

namespace terrace::jit {

namespace {

using dnnl::memory;

class RowsMatMul : public DnnlPrimitive {
 public:
  RowsMatMul(const Node& node, int64_t k, int64_t n, bool bias) : k_(k), n_(n), bias_(bias) {
    const memory::dim rows = DNNL_RUNTIME_DIM_VAL;
    const memory::desc src({rows, k}, memory::data_type::f32, memory::dims{k, 1});
    const memory::desc dst({rows, n}, memory::data_type::f32, memory::dims{n, 1});
    weights_ = plain({k, n});
    if (bias) bias_desc_ = plain({1, n});
    // Built for the calling thread's whole team: the rows, hence the work, are not known here.
    threads_ = threads_for(1e9);
    std::string impl;
    prim_ = building(node, threads_, "primitive", [&] {
      dnnl::matmul::primitive_desc pd(bias ? dnnl::matmul::desc(src, weights_, bias_desc_, dst)
                                           : dnnl::matmul::desc(src, weights_, dst),
                                      user_scratchpad(), cpu_engine());
      scratch_ = pd.scratchpad_desc();
      impl = pd.impl_info_str();
      return dnnl::primitive(dnnl::matmul(pd));
    });
    description_ = "oneDNN matmul, rows at run time (" + node.describe() + "): src [rows," + std::to_string(k) +
                   "] x weights [" + std::to_string(k) + "," + std::to_string(n) + "]" + (bias ? " + bias" : "") +
                   " (" + impl + ")";
  }
  const Shape& output_shape() const override { return shape_; }
  bool runtime_shapes() const override { return true; }
  void run(const std::vector<const float*>&, float*) const override {
    fail(ErrorCode::InvalidArgument, "a matmul with runtime dims runs with its shapes (run_shaped)");
  }
  void run_shaped(const std::vector<const float*>& in, const std::vector<float*>& out, const Shape& a,
                  const Shape&) const override {
    const int64_t rows = k_ > 0 ? shape_numel(a) / k_ : 0;
    std::unordered_map<int, memory> args;
    args[DNNL_ARG_SRC] = wrap(plain({rows, k_}), in.at(0));
    args[DNNL_ARG_WEIGHTS] = wrap(weights_, in.at(1));
    if (bias_) args[DNNL_ARG_BIAS] = wrap(bias_desc_, in.at(2));
    args[DNNL_ARG_DST] = wrap(plain({rows, n_}), out.at(0));
    execute(prim_, scratch_, args, threads_);
  }

 private:
  int64_t k_, n_;
  bool bias_;
  Shape shape_;
  memory::desc weights_, bias_desc_, scratch_;
  int threads_ = 1;
  dnnl::primitive prim_;
};

// Both operands computed, every dim but the batch's given per call.
class BatchedMatMul : public DnnlPrimitive {
 public:
  BatchedMatMul(const Node& node, int64_t batch) : batch_(batch) {
    const memory::dim r = DNNL_RUNTIME_DIM_VAL;
    const memory::desc any({batch, r, r}, memory::data_type::f32, memory::dims{r, r, 1});
    threads_ = threads_for(1e9);
    std::string impl;
    prim_ = building(node, threads_, "primitive", [&] {
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(any, any, any), user_scratchpad(), cpu_engine());
      scratch_ = pd.scratchpad_desc();
      impl = pd.impl_info_str();
      return dnnl::primitive(dnnl::matmul(pd));
    });
    description_ = "oneDNN batched matmul, dims at run time (" + node.describe() + "): " + std::to_string(batch) +
                   " products (" + impl + ")";
  }
  const Shape& output_shape() const override { return shape_; }
  bool runtime_shapes() const override { return true; }
  void run(const std::vector<const float*>&, float*) const override {
    fail(ErrorCode::InvalidArgument, "a matmul with runtime dims runs with its shapes (run_shaped)");
  }
  void run_shaped(const std::vector<const float*>& in, const std::vector<float*>& out, const Shape& a,
                  const Shape& b) const override {
    const int64_t m = a[a.size() - 2], k = a.back(), n = b.back();
    std::unordered_map<int, memory> args;
    args[DNNL_ARG_SRC] = wrap(plain({batch_, m, k}), in.at(0));
    args[DNNL_ARG_WEIGHTS] = wrap(plain({batch_, k, n}), in.at(1));
    args[DNNL_ARG_DST] = wrap(plain({batch_, m, n}), out.at(0));
    execute(prim_, scratch_, args, threads_);
  }

 private:
  int64_t batch_;
  Shape shape_;
  memory::desc scratch_;
  int threads_ = 1;
  dnnl::primitive prim_;
};

}  // namespace

std::unique_ptr<DnnlPrimitive> make_batched_matmul(const Node& node, int64_t batch) {
  return std::make_unique<BatchedMatMul>(node, batch);
}

std::unique_ptr<DnnlPrimitive> make_rows_matmul(const Node& node, int64_t k, int64_t n, bool bias) {
  return std::make_unique<RowsMatMul>(node, k, n, bias);
}

}  // namespace terrace::jit
