// SequenceMap: applies its body to each element of the input sequence(s).
#include "interp/ops/control_kernels.h"

namespace terrace::ops {

namespace {
void sequence_map_kernel(KernelContext& ctx) {
  const Node& node = ctx.node;
  const Graph& body = node.attr_graph("body");
  const RValue& first = ctx.input_value(0);
  TERRACE_CHECK(first.kind == ValueKind::Sequence, InvalidModel, node.describe(),
                ": input 0 must be a sequence");
  TERRACE_CHECK(body.inputs.size() == ctx.num_inputs() && body.outputs.size() == ctx.num_outputs(),
                InvalidModel, node.describe(), ": body takes ", body.inputs.size(), " inputs and gives ",
                body.outputs.size(), " outputs; the node has ", ctx.num_inputs(), " and ", ctx.num_outputs());
  const size_t n = first.seq.size();
  for (size_t k = 1; k < ctx.num_inputs(); ++k) {
    const RValue& v = ctx.input_value(k);
    TERRACE_CHECK(v.kind != ValueKind::Sequence || v.seq.size() == n, InvalidArgument, node.describe(),
                  ": sequence input ", k, " has ", v.seq.size(), " elements, input 0 has ", n);
  }
  std::vector<std::vector<Tensor>> outputs(ctx.num_outputs());
  for (size_t i = 0; i < n; ++i) {
    std::vector<RValue> in;
    for (size_t k = 0; k < ctx.num_inputs(); ++k) {
      const RValue& v = ctx.input_value(k);
      in.push_back(v.kind == ValueKind::Sequence ? RValue(v.seq[i]) : v);
    }
    std::vector<RValue> out = ctx.run_subgraph(body, std::move(in));
    for (size_t o = 0; o < out.size(); ++o) {
      TERRACE_CHECK(out[o].kind == ValueKind::Tensor, NotImplemented, node.describe(),
                    ": body output ", o, " must be a tensor");
      outputs[o].push_back(std::move(out[o].tensor));
    }
  }
  for (size_t o = 0; o < outputs.size(); ++o) ctx.set_output_value(o, RValue::sequence(std::move(outputs[o])));
}
}  // namespace

void register_control_sequence_map_kernel(KernelTable& t) { t.add(Op::SequenceMap, sequence_map_kernel); }

}  // namespace terrace::ops
