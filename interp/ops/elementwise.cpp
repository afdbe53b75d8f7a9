// Reference kernels of the 'elementwise' family (see interp/ops.def): registration, Identity, and
// the broadcast planning the other elementwise_*.cpp files share.
#include "interp/ops/elementwise_common.h"

namespace terrace {
namespace ops {

void unsupported_dtype(const Node& node, DType dtype, const char* what) {
  fail(ErrorCode::NotImplemented, node.describe(), ": ", what, " dtype ", dtype_name(dtype),
       " is not supported by ", op_name(node.op));
}

Shape broadcast_all(const Node& node, const std::vector<Shape>& shapes) {
  TERRACE_ASSERT(!shapes.empty());
  Shape out = shapes[0];
  for (size_t i = 1; i < shapes.size(); ++i) out = broadcast_shapes(node, out, shapes[i]);
  return out;
}

BroadcastPlan plan_broadcast(const Shape& out, const std::vector<Shape>& inputs) {
  const size_t k_inputs = inputs.size();
  std::vector<std::vector<int64_t>> strides;
  for (const Shape& s : inputs) strides.push_back(broadcast_strides(s, out));

  // Merged dims, innermost first. Size-1 dims never move an offset, so they are dropped; a dim
  // merges into the one inside it when every input steps over both as over one longer dim.
  std::vector<int64_t> sizes;
  std::vector<std::vector<int64_t>> merged(k_inputs);
  for (size_t d = out.size(); d-- > 0;) {
    if (out[d] == 1) continue;
    bool can_merge = !sizes.empty();
    for (size_t k = 0; k < k_inputs && can_merge; ++k)
      can_merge = strides[k][d] == merged[k].back() * sizes.back();
    if (can_merge) {
      sizes.back() *= out[d];
    } else {
      sizes.push_back(out[d]);
      for (size_t k = 0; k < k_inputs; ++k) merged[k].push_back(strides[k][d]);
    }
  }

  BroadcastPlan p;
  p.total = shape_numel(out);
  p.outer_strides.resize(k_inputs);
  p.inner_step.assign(k_inputs, 0);
  if (sizes.empty()) return p;  // every dim is 1: a single element
  p.inner = sizes[0];
  for (size_t k = 0; k < k_inputs; ++k) p.inner_step[k] = merged[k][0];
  for (size_t m = sizes.size(); m-- > 1;) {
    p.outer.push_back(sizes[m]);
    for (size_t k = 0; k < k_inputs; ++k) p.outer_strides[k].push_back(merged[k][m]);
  }
  return p;
}

namespace {
// Identity passes any runtime value through: tensors, sequences and optionals alike.
void identity_kernel(KernelContext& ctx) { ctx.set_output_value(0, ctx.input_value(0)); }
}  // namespace

}  // namespace ops

void register_elementwise_kernels(KernelTable& t) {
  t.add(Op::Identity, ops::identity_kernel);
  ops::register_unary_math(t);
  ops::register_activations(t);
  ops::register_binary(t);
  ops::register_nary(t);
  ops::register_casts(t);
}

}  // namespace terrace
