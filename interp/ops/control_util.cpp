// Tensor stacking, slicing and scalar-reading helpers shared by the control-family kernels.
#include <cstring>

#include "interp/ops/control_kernels.h"

namespace terrace::ops {

void copy_elements(const Tensor& src, int64_t src_off, Tensor& dst, int64_t dst_off,
                   int64_t count) {
  TERRACE_ASSERT(src.dtype() == dst.dtype());
  if (count <= 0) return;
  if (src.dtype() == DType::String) {
    const std::string* s = src.data<std::string>() + src_off;
    std::string* d = dst.data<std::string>() + dst_off;
    for (int64_t i = 0; i < count; ++i) d[i] = s[i];
    return;
  }
  size_t es = dtype_size(src.dtype());
  std::memcpy(static_cast<char*>(dst.raw()) + size_t(dst_off) * es,
              static_cast<const char*>(src.raw()) + size_t(src_off) * es, size_t(count) * es);
}

namespace {
int64_t prod(const Shape& s, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to; ++i) p *= s[i];
  return p;
}
}  // namespace

Tensor concat_tensors(const Node& node, const std::vector<Tensor>& parts, int64_t axis,
                      bool new_axis) {
  TERRACE_CHECK(!parts.empty(), InvalidArgument, node.describe(), ": nothing to concatenate");
  const Tensor& first = parts[0];
  const int64_t rank = first.rank();
  TERRACE_ASSERT(axis >= 0 && axis <= rank - (new_axis ? 0 : 1));
  Shape out_shape = first.shape();
  if (new_axis) out_shape.insert(out_shape.begin() + axis, int64_t(parts.size()));
  else out_shape[size_t(axis)] = 0;
  for (const Tensor& p : parts) {
    bool same = p.dtype() == first.dtype() && p.rank() == rank;
    for (int64_t d = 0; same && d < rank; ++d)
      same = d == axis && !new_axis ? true : p.dim(d) == first.dim(d);
    TERRACE_CHECK(same, InvalidArgument, node.describe(), ": cannot join ",
                  dtype_name(p.dtype()), shape_str(p.shape()), " with ",
                  dtype_name(first.dtype()), shape_str(first.shape()), " along axis ", axis);
    if (!new_axis) out_shape[size_t(axis)] += p.dim(axis);
  }
  Tensor out = Tensor::empty(first.dtype(), out_shape);
  // Each part contributes one contiguous chunk per index of the dims before `axis`.
  const int64_t outer = prod(first.shape(), 0, size_t(axis));
  int64_t dst = 0;
  for (int64_t o = 0; o < outer; ++o)
    for (const Tensor& p : parts) {
      int64_t chunk = outer ? p.numel() / outer : 0;
      copy_elements(p, o * chunk, out, dst, chunk);
      dst += chunk;
    }
  return out;
}

Tensor slice_axis(const Tensor& t, int64_t axis, int64_t start, int64_t len) {
  TERRACE_ASSERT(axis >= 0 && axis < t.rank() && start >= 0 && start + len <= t.dim(axis));
  Shape shape = t.shape();
  shape[size_t(axis)] = len;
  Tensor out = Tensor::empty(t.dtype(), shape);
  const int64_t outer = prod(t.shape(), 0, size_t(axis));
  const int64_t inner = prod(t.shape(), size_t(axis) + 1, t.shape().size());
  for (int64_t o = 0; o < outer; ++o)
    copy_elements(t, (o * t.dim(axis) + start) * inner, out, o * len * inner, len * inner);
  return out;
}

Tensor select_axis(const Tensor& t, int64_t axis, int64_t i) {
  Shape shape = t.shape();
  shape.erase(shape.begin() + axis);
  return slice_axis(t, axis, i, 1).reshaped(shape);
}

namespace {
const Tensor& one_element(const Node& node, const RValue& v, const char* what) {
  TERRACE_CHECK(v.kind == ValueKind::Tensor && v.tensor.defined() && v.tensor.numel() == 1,
                InvalidArgument, node.describe(), ": ", what, " must be a one-element tensor",
                v.kind == ValueKind::Tensor && v.tensor.defined()
                    ? ", got shape " + shape_str(v.tensor.shape()) : std::string());
  return v.tensor;
}
}  // namespace

bool read_bool_scalar(const Node& node, const RValue& v, const char* what) {
  const Tensor& t = one_element(node, v, what);
  TERRACE_CHECK(t.dtype() == DType::Bool, InvalidArgument, node.describe(), ": ", what,
                " must be bool, got ", dtype_name(t.dtype()));
  return t.data<bool>()[0];
}

int64_t read_int_scalar(const Node& node, const RValue& v, const char* what) {
  const Tensor& t = one_element(node, v, what);
  TERRACE_CHECK(is_integer(t.dtype()), InvalidArgument, node.describe(), ": ", what,
                " must be an integer, got ", dtype_name(t.dtype()));
  return t.get_as_int64(0);
}

}  // namespace terrace::ops
