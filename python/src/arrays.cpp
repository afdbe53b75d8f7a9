// numpy arrays <-> Terrace tensors (arrays.h).
#include "python/src/arrays.h"

#include <algorithm>

namespace py = pybind11;
using namespace pybind11::literals;

namespace terrace::python {

namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "native numpy byte order is taken to be little-endian");

// The dtypes that numpy and Terrace share, with numpy's kind, size and type number (NPY_*).
struct NumpyType {
  DType dtype;
  char kind;
  int size;
  int typenum;
};
constexpr NumpyType kNumpyTypes[] = {
    {DType::Bool, 'b', 1, 0},     {DType::Int8, 'i', 1, 1},    {DType::UInt8, 'u', 1, 2},
    {DType::Int16, 'i', 2, 3},    {DType::UInt16, 'u', 2, 4},  {DType::Int32, 'i', 4, 5},
    {DType::UInt32, 'u', 4, 6},   {DType::Int64, 'i', 8, 7},   {DType::UInt64, 'u', 8, 8},
    {DType::Float16, 'f', 2, 23}, {DType::Float32, 'f', 4, 11}, {DType::Float64, 'f', 8, 12},
};
constexpr const char* kSupported = "bool, int8 to int64, uint8 to uint64, float16, float32 and float64";

const NumpyType* numpy_type(const py::dtype& dt) {
  for (const NumpyType& n : kNumpyTypes)
    if (n.kind == dt.kind() && n.size == dt.itemsize() && !dt.has_fields()) return &n;
  return nullptr;
}

const NumpyType* numpy_type(DType d) {
  for (const NumpyType& n : kNumpyTypes)
    if (n.dtype == d) return &n;
  return nullptr;
}

// A string tensor as an object array of str (numpy has no variable-length string dtype).
py::array string_array(const Tensor& t) {
  py::list items;
  const std::string* s = t.data<std::string>();
  for (int64_t i = 0; i < t.numel(); ++i) items.append(py::str(s[i]));
  py::array flat = py::module_::import("numpy").attr("array")(items, "dtype"_a = "object");
  return flat.attr("reshape")(py::tuple(py::cast(t.shape())));
}

}  // namespace

ConstantMemory::ConstantMemory(const Graph& g) {
  add(g);
  std::sort(ranges_.begin(), ranges_.end());
}

void ConstantMemory::add(const Tensor& t) {
  if (!t.defined() || t.on_device() || t.dtype() == DType::String || t.nbytes() == 0) return;
  const auto begin = reinterpret_cast<uintptr_t>(t.raw());
  ranges_.emplace_back(begin, begin + t.nbytes());
}

void ConstantMemory::add(const Graph& g) {
  for (const auto& [id, t] : g.initializers) add(t);
  for (const Node& n : g.nodes) {
    for (const auto& [key, a] : n.attrs) {
      add(a.t);
      for (const Tensor& t : a.tensors) add(t);
    }
    for (const Graph* sub : n.subgraphs()) add(*sub);
  }
}

bool ConstantMemory::holds(const void* p) const {
  const auto at = reinterpret_cast<uintptr_t>(p);
  // The last range starting at or before p; constants do not overlap one another.
  auto it = std::upper_bound(ranges_.begin(), ranges_.end(), std::make_pair(at, UINTPTR_MAX));
  return it != ranges_.begin() && at < std::prev(it)->second;
}

Tensor tensor_from_numpy(const std::string& name, py::handle value, std::vector<py::object>& keep) {
  py::array arr = py::array::ensure(value);  // lists and scalars as numpy.asarray makes them
  if (!arr) throw py::type_error("input '" + name + "': " + std::string(py::str(py::type::of(value))) +
                                 " is not a numpy array, nor convertible to one");
  const NumpyType* n = numpy_type(arr.dtype());
  if (!n)
    throw py::type_error("input '" + name + "': numpy dtype " + std::string(py::str(arr.dtype())) +
                         " is not supported (Terrace takes " + kSupported + ")");
  if (arr.dtype().byteorder() == '>') arr = arr.attr("astype")(py::dtype(n->typenum));
  constexpr int kAligned = py::detail::npy_api::NPY_ARRAY_ALIGNED_;
  if (!(arr.flags() & py::array::c_style) || !(arr.flags() & kAligned))
    arr = py::array::ensure(arr, py::array::c_style | kAligned);
  if (!arr) throw py::error_already_set();
  Shape shape(arr.shape(), arr.shape() + arr.ndim());
  const size_t bytes = size_t(arr.nbytes());
  void* data = bytes ? const_cast<void*>(arr.data()) : nullptr;
  keep.push_back(arr);
  return Tensor::borrow(n->dtype, std::move(shape), data, bytes);
}

py::array numpy_from_tensor(Tensor t, const ConstantMemory& constants) {
  if (t.on_device()) t = t.to_host();
  if (t.dtype() == DType::String) return string_array(t);
  const NumpyType* n = numpy_type(t.dtype());
  if (!n)
    throw py::type_error(std::string("an output of dtype ") + dtype_name(t.dtype()) +
                         " has no numpy dtype (Terrace returns " + kSupported + " and string)");
  const std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
  const py::dtype dt(n->typenum);
  if (t.numel() == 0 || t.borrowed() || constants.holds(t.raw()))
    return py::array(dt, shape, t.numel() ? t.raw() : nullptr);  // no base: numpy copies
  auto* held = new Tensor(std::move(t));
  py::capsule owner(held, [](void* p) { delete static_cast<Tensor*>(p); });
  return py::array(dt, shape, held->raw(), owner);
}

std::string onnx_type_string(const ValueInfo& info) {
  std::string elem = "undefined";
  if (info.dtype) {
    const DType d = *info.dtype;
    elem = d == DType::Float32 ? "float" : d == DType::Float64 ? "double" : dtype_name(d);
  }
  const std::string tensor = "tensor(" + elem + ")";
  switch (info.kind) {
    case ValueKind::Sequence: return "seq(" + tensor + ")";
    case ValueKind::Optional: return "optional(" + tensor + ")";
    default: return tensor;
  }
}

}  // namespace terrace::python
