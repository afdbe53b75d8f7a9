// Conformance comparison: runtime values (tensors, sequences, optionals) vs ONNX's expected outputs.
#include "tools/conformance.h"

namespace terrace::conformance {
namespace {

const char* kind_name(ValueKind k) {
  switch (k) {
    case ValueKind::Tensor: return "tensor";
    case ValueKind::Sequence: return "sequence";
    case ValueKind::Optional: return "optional";
    case ValueKind::Unknown: break;
  }
  return "unknown value";
}

std::optional<std::string> compare_tensor(const Tensor& want, const Tensor& got, const Tolerance& tol) {
  Comparison c = compare_tensors(want, got, tol);
  if (c.equal) return std::nullopt;
  return c.message;
}

std::optional<std::string> compare_sequence(const std::vector<Tensor>& want,
                                            const std::vector<Tensor>& got, const Tolerance& tol) {
  if (want.size() != got.size())
    return detail::concat("expected a sequence of ", want.size(), " tensors, got ", got.size());
  for (size_t i = 0; i < want.size(); ++i)
    if (auto m = compare_tensor(want[i], got[i], tol)) return detail::concat("sequence element ", i, ": ", *m);
  return std::nullopt;
}

}  // namespace

std::optional<std::string> compare_values(const RValue& want, const RValue& got, const Tolerance& tol) {
  if (want.kind != got.kind)
    return detail::concat("expected a ", kind_name(want.kind), ", got a ", kind_name(got.kind));
  if (want.kind == ValueKind::Sequence) return compare_sequence(want.seq, got.seq, tol);
  if (want.kind != ValueKind::Optional) return compare_tensor(want.tensor, got.tensor, tol);
  // Optionals: presence first, then the element.
  if (want.has_element != got.has_element)
    return std::string(want.has_element ? "expected a present optional, got an empty one"
                                        : "expected an empty optional, got a present one");
  if (!want.has_element) return std::nullopt;
  if (want.elem_kind != got.elem_kind)
    return detail::concat("expected an optional ", kind_name(want.elem_kind), ", got an optional ",
                          kind_name(got.elem_kind));
  return want.elem_kind == ValueKind::Sequence ? compare_sequence(want.seq, got.seq, tol)
                                               : compare_tensor(want.tensor, got.tensor, tol);
}

}  // namespace terrace::conformance
