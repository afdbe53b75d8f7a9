// The Scan kernel: opset 9+ semantics (per-input/output axes and directions), and opset 8's
// batched form (leading batch axis, sequence_lens input) run as one opset-9 scan per batch entry.
#include <algorithm>

#include "interp/ops/control_kernels.h"

namespace terrace::ops {
namespace {

struct ScanSpec {
  std::vector<int64_t> in_axes, in_dirs, out_axes, out_dirs;
};

// A per-input attribute list: `n` zeros when absent, else exactly n entries.
std::vector<int64_t> per_item_attr(const Node& node, const char* name, size_t n) {
  std::vector<int64_t> v = node.attr_ints(name, std::vector<int64_t>(n, 0));
  TERRACE_CHECK(v.size() == n, InvalidModel, node.describe(), ": attribute '", name, "' has ",
                v.size(), " entries, expected ", n);
  return v;
}

// Runs the scan over states (the N loop-carried values) and scan inputs; returns the final states
// followed by the K stacked scan outputs.
std::vector<RValue> run_scan(KernelContext& ctx, const Graph& body, std::vector<RValue> states,
                             const std::vector<Tensor>& xs, const ScanSpec& spec, size_t n_out) {
  const Node& node = ctx.node;
  const size_t n_state = states.size(), n_scan_out = n_out - n_state;
  std::vector<int64_t> axes(xs.size());
  int64_t len = -1;
  for (size_t j = 0; j < xs.size(); ++j) {
    axes[j] = normalize_axis(node, spec.in_axes[j], xs[j].rank());
    TERRACE_CHECK(xs[j].rank() >= 1, InvalidArgument, node.describe(), ": scan input ", j,
                  " must have rank >= 1");
    int64_t l = xs[j].dim(axes[j]);
    TERRACE_CHECK(len < 0 || l == len, InvalidArgument, node.describe(), ": scan input ", j,
                  " has length ", l, " along its scan axis, others have ", len);
    len = l;
  }
  TERRACE_CHECK(len >= 0, InvalidModel, node.describe(), ": needs at least one scan input");

  std::vector<std::vector<Tensor>> parts(n_scan_out);
  for (int64_t t = 0; t < len; ++t) {
    std::vector<RValue> in;
    in.reserve(n_state + xs.size());
    for (RValue& s : states) in.push_back(std::move(s));
    for (size_t j = 0; j < xs.size(); ++j)
      in.emplace_back(select_axis(xs[j], axes[j], spec.in_dirs[j] ? len - 1 - t : t));
    std::vector<RValue> out = ctx.run_subgraph(body, std::move(in));
    TERRACE_CHECK(out.size() == n_out, InvalidModel, node.describe(), ": body returns ",
                  out.size(), " outputs, expected ", n_out);
    for (size_t k = 0; k < n_state; ++k) states[k] = std::move(out[k]);
    for (size_t k = 0; k < n_scan_out; ++k) {
      RValue& p = out[n_state + k];
      TERRACE_CHECK(p.kind == ValueKind::Tensor && p.tensor.defined(), InvalidModel,
                    node.describe(), ": scan output ", k, " of the body is not a tensor");
      parts[k].push_back(std::move(p.tensor));
    }
  }

  std::vector<RValue> result = std::move(states);
  for (size_t k = 0; k < n_scan_out; ++k) {
    if (spec.out_dirs[k]) std::reverse(parts[k].begin(), parts[k].end());
    if (parts[k].empty()) {  // zero iterations: the element shape is unknown
      result.emplace_back(Tensor::empty(DType::Float32, {0}));
      continue;
    }
    int64_t axis = normalize_axis(node, spec.out_axes[k], parts[k][0].rank() + 1);
    result.emplace_back(concat_tensors(node, parts[k], axis, /*new_axis=*/true));
  }
  return result;
}

void scan_kernel(KernelContext& ctx) {
  const Node& node = ctx.node;
  const Graph& body = node.attr_graph("body");
  const int64_t m = node.attr_int("num_scan_inputs");
  // Opset 8 has a leading sequence_lens input, so the node takes one input more than its body.
  const bool batched = ctx.num_inputs() == body.inputs.size() + 1;
  const size_t first = batched ? 1 : 0;
  TERRACE_CHECK(m >= 1 && size_t(m) <= ctx.num_inputs() - first, InvalidModel, node.describe(),
                ": num_scan_inputs ", m, " does not fit its ", ctx.num_inputs(), " inputs");
  TERRACE_CHECK(ctx.num_inputs() - first == body.inputs.size(), InvalidModel, node.describe(),
                ": body takes ", body.inputs.size(), " inputs, the node gives ",
                ctx.num_inputs() - first);
  const size_t n_state = ctx.num_inputs() - first - size_t(m);
  TERRACE_CHECK(ctx.num_outputs() >= n_state, InvalidModel, node.describe(), ": has ", n_state,
                " state inputs but only ", ctx.num_outputs(), " outputs");
  const size_t n_out = ctx.num_outputs(), n_scan_out = n_out - n_state;

  std::vector<RValue> states;
  for (size_t k = 0; k < n_state; ++k) states.push_back(ctx.input_value(first + k));
  std::vector<Tensor> xs;
  for (size_t j = 0; j < size_t(m); ++j) xs.push_back(ctx.input(first + n_state + j));

  std::vector<RValue> result;
  if (!batched) {
    ScanSpec spec{per_item_attr(node, "scan_input_axes", size_t(m)),
                  per_item_attr(node, "scan_input_directions", size_t(m)),
                  per_item_attr(node, "scan_output_axes", n_scan_out),
                  per_item_attr(node, "scan_output_directions", n_scan_out)};
    result = run_scan(ctx, body, std::move(states), xs, spec, n_out);
  } else {
    TERRACE_CHECK(!ctx.has_input(0), NotImplemented, node.describe(),
                  ": Scan-8 sequence_lens is not supported");
    ScanSpec spec{std::vector<int64_t>(size_t(m), 0), per_item_attr(node, "directions", size_t(m)),
                  std::vector<int64_t>(n_scan_out, 0), std::vector<int64_t>(n_scan_out, 0)};
    TERRACE_CHECK(!xs.empty() && xs[0].rank() >= 1, InvalidArgument, node.describe(),
                  ": scan inputs need a batch axis");
    const int64_t batch = xs[0].dim(0);
    std::vector<std::vector<Tensor>> per_batch(n_out);
    for (int64_t b = 0; b < batch; ++b) {
      std::vector<RValue> sb;
      for (const RValue& s : states) {
        TERRACE_CHECK(s.kind == ValueKind::Tensor && s.tensor.rank() >= 1 &&
                          s.tensor.dim(0) == batch, InvalidArgument, node.describe(),
                      ": every state needs the batch axis of length ", batch);
        sb.emplace_back(select_axis(s.tensor, 0, b));
      }
      std::vector<Tensor> xb;
      for (const Tensor& x : xs) {
        TERRACE_CHECK(x.rank() >= 2 && x.dim(0) == batch, InvalidArgument, node.describe(),
                      ": every scan input needs shape [batch ", batch, ", sequence, ...]");
        xb.push_back(select_axis(x, 0, b));
      }
      std::vector<RValue> r = run_scan(ctx, body, std::move(sb), xb, spec, n_out);
      for (size_t k = 0; k < n_out; ++k) per_batch[k].push_back(std::move(r[k].tensor));
    }
    for (size_t k = 0; k < n_out; ++k) {
      TERRACE_CHECK(batch > 0, NotImplemented, node.describe(), ": Scan-8 with batch size 0");
      result.emplace_back(concat_tensors(node, per_batch[k], 0, /*new_axis=*/true));
    }
  }
  for (size_t k = 0; k < n_out; ++k) ctx.set_output_value(k, std::move(result[k]));
}

}  // namespace

void register_control_scan_kernel(KernelTable& t) { t.add(Op::Scan, scan_kernel); }

}  // namespace terrace::ops
