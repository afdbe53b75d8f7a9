// Reference kernels of the 'control' family (see interp/ops.def): If and Loop here, Scan in
// control_scan.cpp, sequences and optionals in control_sequence.cpp.
#include "interp/ops/control_kernels.h"

namespace terrace {
namespace ops {
namespace {

// A body must return exactly `want` values; anything else is a malformed model.
void check_body_outputs(const Node& node, const char* body, size_t got, size_t want) {
  TERRACE_CHECK(got == want, InvalidModel, node.describe(), ": ", body, " returns ", got,
                " outputs, expected ", want);
}

void if_kernel(KernelContext& ctx) {
  const Node& node = ctx.node;
  bool cond = read_bool_scalar(node, ctx.input_value(0), "the condition");
  const char* branch = cond ? "then_branch" : "else_branch";
  std::vector<RValue> out = ctx.run_subgraph(node.attr_graph(branch), {});
  check_body_outputs(node, branch, out.size(), ctx.num_outputs());
  for (size_t i = 0; i < out.size(); ++i) ctx.set_output_value(i, std::move(out[i]));
}

// A scan output with zero iterations: shape [0, body output dims...] where the body's static
// type knows them (unknown dims become 0), float32 when it knows no dtype.
Tensor empty_scan_output(const Graph& body, int value) {
  const ValueInfo& info = body.value(value).info;
  Shape shape{0};
  if (info.shape)
    for (int64_t d : *info.shape) shape.push_back(d < 0 ? 0 : d);
  return Tensor::empty(info.dtype.value_or(DType::Float32), shape);
}

// The most bytes a Loop's scan outputs may hold together (16 GiB): a trip count read from an
// input can be anything up to 2^63, and the parts are kept until the loop ends.
constexpr uint64_t kMaxLoopScanBytes = uint64_t(1) << 34;

// Loop (opset 11+): optional trip count M and condition; body(i, cond, carried...) returns
// (cond, carried..., scan parts...). Scan parts are kept per iteration and joined once at the
// end, so many iterations cost linear time.
void loop_kernel(KernelContext& ctx) {
  const Node& node = ctx.node;
  const Graph& body = node.attr_graph("body");
  TERRACE_CHECK(ctx.num_inputs() >= 2, InvalidModel, node.describe(),
                ": needs inputs M and cond (either may be empty)");
  const size_t n_carried = ctx.num_inputs() - 2;
  TERRACE_CHECK(ctx.num_outputs() >= n_carried, InvalidModel, node.describe(), ": has ",
                n_carried, " loop-carried inputs but only ", ctx.num_outputs(), " outputs");
  const size_t n_scan = ctx.num_outputs() - n_carried;
  TERRACE_CHECK(body.inputs.size() == 2 + n_carried, InvalidModel, node.describe(),
                ": body takes ", body.inputs.size(), " inputs, expected ", 2 + n_carried,
                " (iteration number, condition, loop-carried values)");
  check_body_outputs(node, "body", body.outputs.size(), 1 + n_carried + n_scan);

  const bool has_trip = ctx.has_input(0), has_cond = ctx.has_input(1);
  const int64_t trip = has_trip ? read_int_scalar(node, ctx.input_value(0), "trip count M") : 0;
  bool cond = has_cond ? read_bool_scalar(node, ctx.input_value(1), "cond") : true;

  std::vector<RValue> carried(n_carried);
  for (size_t k = 0; k < n_carried; ++k) {
    TERRACE_CHECK(ctx.has_input(2 + k), InvalidModel, node.describe(), ": loop-carried input ",
                  k, " is missing");
    carried[k] = ctx.input_value(2 + k);
  }
  std::vector<std::vector<Tensor>> scans(n_scan);
  uint64_t scan_bytes = 0;  // all scan parts kept so far
  for (int64_t i = 0; (!has_trip || i < trip) && cond; ++i) {
    std::vector<RValue> in;
    in.reserve(2 + n_carried);
    in.emplace_back(Tensor::scalar<int64_t>(i));
    in.emplace_back(Tensor::scalar<bool>(cond));
    for (RValue& v : carried) in.push_back(std::move(v));
    std::vector<RValue> out = ctx.run_subgraph(body, std::move(in));
    check_body_outputs(node, "body", out.size(), 1 + n_carried + n_scan);
    // Without a cond input the body's condition output is ignored (ONNX spec).
    if (has_cond) cond = read_bool_scalar(node, out[0], "the body's condition output");
    for (size_t k = 0; k < n_carried; ++k) carried[k] = std::move(out[1 + k]);
    for (size_t k = 0; k < n_scan; ++k) {
      RValue& part = out[1 + n_carried + k];
      TERRACE_CHECK(part.kind == ValueKind::Tensor && part.tensor.defined(), InvalidModel,
                    node.describe(), ": scan output ", k, " of the body is not a tensor");
      // Checked as each part comes, not when they are joined after the last iteration (a long
      // loop would run to its end, holding every part, before saying so).
      if (!scans[k].empty()) {
        const Tensor& first = scans[k].front();
        TERRACE_CHECK(part.tensor.dtype() == first.dtype() && part.tensor.shape() == first.shape(),
                      InvalidArgument, node.describe(), ": scan output ", k, " of iteration ", i, " is ",
                      dtype_name(part.tensor.dtype()), shape_str(part.tensor.shape()), ", iteration 0 gave ",
                      dtype_name(first.dtype()), shape_str(first.shape()), " (scan outputs keep one shape)");
      }
      scan_bytes += part.tensor.nbytes();
      TERRACE_CHECK(scan_bytes <= kMaxLoopScanBytes, OutOfMemory, node.describe(), ": its scan outputs reach ",
                    scan_bytes, " bytes after ", i + 1, " iterations, past the limit of ", kMaxLoopScanBytes);
      scans[k].push_back(std::move(part.tensor));
    }
  }
  for (size_t k = 0; k < n_carried; ++k) ctx.set_output_value(k, std::move(carried[k]));
  for (size_t k = 0; k < n_scan; ++k)
    ctx.set_output(n_carried + k,
                   scans[k].empty() ? empty_scan_output(body, body.outputs[1 + n_carried + k])
                                    : concat_tensors(node, scans[k], 0, /*new_axis=*/true));
}

}  // namespace
}  // namespace ops

void register_control_kernels(KernelTable& t) {
  t.add(Op::If, ops::if_kernel);
  t.add(Op::Loop, ops::loop_kernel);
  ops::register_control_scan_kernel(t);
  ops::register_control_sequence_kernels(t);
  ops::register_control_sequence_map_kernel(t);
}

}  // namespace terrace
