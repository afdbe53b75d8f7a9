// Sequence and optional kernels: SequenceConstruct/Empty/At/Insert/Erase/Length,
// SplitToSequence, ConcatFromSequence, Optional, OptionalHasElement, OptionalGetElement.
#include "interp/ops/control_kernels.h"

namespace terrace::ops {
namespace {

const std::vector<Tensor>& input_sequence(KernelContext& ctx, size_t i) {
  const RValue& v = ctx.input_value(i);
  TERRACE_CHECK(v.kind == ValueKind::Sequence, InvalidArgument, ctx.node.describe(), ": input ",
                i, " must be a sequence");
  return v.seq;
}

// A sequence position in [-n, n - 1] (or up to n where inserting at the end is allowed), as an
// index in [0, n].
size_t sequence_position(KernelContext& ctx, size_t input, size_t n, bool allow_end) {
  int64_t p = read_int_scalar(ctx.node, ctx.input_value(input), "position");
  int64_t hi = int64_t(n) - (allow_end ? 0 : 1);
  TERRACE_CHECK(p >= -int64_t(n) && p <= hi, InvalidArgument, ctx.node.describe(),
                ": position ", p, " is out of range for a sequence of ", n, " tensors");
  return size_t(p < 0 ? p + int64_t(n) : p);
}

void sequence_empty(KernelContext& ctx) { ctx.set_output_value(0, RValue::sequence({})); }

void sequence_construct(KernelContext& ctx) {
  std::vector<Tensor> seq;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    const Tensor& t = ctx.input(i);
    TERRACE_CHECK(seq.empty() || t.dtype() == seq[0].dtype(), InvalidArgument,
                  ctx.node.describe(), ": input ", i, " is ", dtype_name(t.dtype()),
                  ", input 0 is ", dtype_name(seq[0].dtype()));
    seq.push_back(t);
  }
  ctx.set_output_value(0, RValue::sequence(std::move(seq)));
}

void sequence_at(KernelContext& ctx) {
  const auto& seq = input_sequence(ctx, 0);
  ctx.set_output(0, seq[sequence_position(ctx, 1, seq.size(), false)]);
}

void sequence_insert(KernelContext& ctx) {
  std::vector<Tensor> seq = input_sequence(ctx, 0);
  const Tensor& t = ctx.input(1);
  TERRACE_CHECK(seq.empty() || t.dtype() == seq[0].dtype(), InvalidArgument,
                ctx.node.describe(), ": cannot insert a ", dtype_name(t.dtype()),
                " tensor into a sequence of ", dtype_name(seq[0].dtype()));
  size_t pos = ctx.has_input(2) ? sequence_position(ctx, 2, seq.size(), true) : seq.size();
  seq.insert(seq.begin() + std::ptrdiff_t(pos), t);
  ctx.set_output_value(0, RValue::sequence(std::move(seq)));
}

void sequence_erase(KernelContext& ctx) {
  std::vector<Tensor> seq = input_sequence(ctx, 0);
  TERRACE_CHECK(!seq.empty(), InvalidArgument, ctx.node.describe(),
                ": cannot erase from an empty sequence");
  size_t pos = ctx.has_input(1) ? sequence_position(ctx, 1, seq.size(), false) : seq.size() - 1;
  seq.erase(seq.begin() + std::ptrdiff_t(pos));
  ctx.set_output_value(0, RValue::sequence(std::move(seq)));
}

void sequence_length(KernelContext& ctx) {
  ctx.set_output(0, Tensor::scalar<int64_t>(int64_t(input_sequence(ctx, 0).size())));
}

// The chunk lengths SplitToSequence cuts `dim` into: from the split input (a scalar chunk size
// or a list of lengths summing to dim), else chunks of 1.
std::vector<int64_t> split_lengths(KernelContext& ctx, int64_t dim) {
  const Node& node = ctx.node;
  if (!ctx.has_input(1)) return std::vector<int64_t>(size_t(dim), 1);
  const Tensor& split = ctx.input(1);
  TERRACE_CHECK(split.rank() <= 1 && is_integer(split.dtype()), InvalidArgument,
                node.describe(), ": split must be an integer scalar or 1-D tensor");
  std::vector<int64_t> v = split.to_int64_vector();
  if (split.rank() == 0) {
    TERRACE_CHECK(v[0] > 0, InvalidArgument, node.describe(), ": split ", v[0],
                  " must be positive");
    std::vector<int64_t> lens;
    for (int64_t at = 0; at < dim; at += v[0]) lens.push_back(std::min(v[0], dim - at));
    return lens;
  }
  int64_t sum = 0;
  for (int64_t l : v) {
    TERRACE_CHECK(l >= 0, InvalidArgument, node.describe(), ": negative split length ", l);
    sum += l;
  }
  TERRACE_CHECK(sum == dim, InvalidArgument, node.describe(), ": split lengths sum to ", sum,
                ", the axis has length ", dim);
  return v;
}

void split_to_sequence(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t axis = normalize_axis(ctx.node, ctx.node.attr_int("axis", 0), x.rank());
  TERRACE_CHECK(x.rank() >= 1, InvalidArgument, ctx.node.describe(), ": input must have rank >= 1");
  // keepdims only matters when no split is given (chunks of 1 may drop the axis).
  const bool squeeze = !ctx.has_input(1) && ctx.node.attr_int("keepdims", 1) == 0;
  std::vector<Tensor> seq;
  int64_t at = 0;
  for (int64_t len : split_lengths(ctx, x.dim(axis))) {
    seq.push_back(squeeze ? select_axis(x, axis, at) : slice_axis(x, axis, at, len));
    at += len;
  }
  ctx.set_output_value(0, RValue::sequence(std::move(seq)));
}

void concat_from_sequence(KernelContext& ctx) {
  const auto& seq = input_sequence(ctx, 0);
  TERRACE_CHECK(!seq.empty(), InvalidArgument, ctx.node.describe(),
                ": cannot concatenate an empty sequence");
  const bool new_axis = ctx.node.attr_int("new_axis", 0) != 0;
  const int64_t rank = seq[0].rank() + (new_axis ? 1 : 0);
  const int64_t axis = normalize_axis(ctx.node, ctx.node.attr_int("axis"), rank);
  TERRACE_CHECK(new_axis || seq[0].rank() >= 1, InvalidArgument, ctx.node.describe(),
                ": cannot concatenate scalars without new_axis");
  ctx.set_output(0, concat_tensors(ctx.node, seq, axis, new_axis));
}

void optional_kernel(KernelContext& ctx) {
  RValue r;
  r.kind = ValueKind::Optional;
  if (ctx.has_input(0)) {
    const RValue& v = ctx.input_value(0);
    TERRACE_CHECK(v.kind == ValueKind::Tensor || v.kind == ValueKind::Sequence, InvalidArgument,
                  ctx.node.describe(), ": input must be a tensor or a sequence");
    r.has_element = true;
    r.elem_kind = v.kind;
    r.tensor = v.tensor;
    r.seq = v.seq;
  } else {
    // The importer spells the `type` attribute ONNX's way: "seq(tensor(float))", "tensor(int64)".
    const std::string type = ctx.node.attr_string("type", "");
    r.elem_kind = type.rfind("seq(", 0) == 0 ? ValueKind::Sequence : ValueKind::Tensor;
  }
  ctx.set_output_value(0, std::move(r));
}

void optional_has_element(KernelContext& ctx) {
  bool has = ctx.has_input(0);
  if (has && ctx.input_value(0).kind == ValueKind::Optional)
    has = ctx.input_value(0).has_element;
  ctx.set_output(0, Tensor::scalar<bool>(has));
}

void optional_get_element(KernelContext& ctx) {
  const RValue& v = ctx.input_value(0);
  if (v.kind != ValueKind::Optional) {  // opset 18 also accepts a plain tensor or sequence
    ctx.set_output_value(0, v);
    return;
  }
  TERRACE_CHECK(v.has_element, InvalidArgument, ctx.node.describe(),
                ": the optional input is empty");
  ctx.set_output_value(0, v.elem_kind == ValueKind::Sequence ? RValue::sequence(v.seq)
                                                             : RValue(v.tensor));
}

}  // namespace

void register_control_sequence_kernels(KernelTable& t) {
  t.add(Op::SequenceEmpty, sequence_empty);
  t.add(Op::SequenceConstruct, sequence_construct);
  t.add(Op::SequenceAt, sequence_at);
  t.add(Op::SequenceInsert, sequence_insert);
  t.add(Op::SequenceErase, sequence_erase);
  t.add(Op::SequenceLength, sequence_length);
  t.add(Op::SplitToSequence, split_to_sequence);
  t.add(Op::ConcatFromSequence, concat_from_sequence);
  t.add(Op::Optional, optional_kernel);
  t.add(Op::OptionalHasElement, optional_has_element);
  t.add(Op::OptionalGetElement, optional_get_element);
}

}  // namespace terrace::ops
