// terrace.Tensor and DLPack both ways (py_tensor.h).
#include "python/src/py_tensor.h"

#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "python/src/dlpack.h"
#ifdef TERRACE_HAVE_CUDA
#include "jit/cuda/cuda_driver.h"
#include "jit/cuda/cuda_memory.h"
#endif

namespace py = pybind11;
using namespace pybind11::literals;
namespace dl = terrace::python::dlpack;

namespace terrace::python {

namespace {

std::optional<DType> dtype_from_dl(dl::DLDataType t) {
  if (t.lanes != 1) return std::nullopt;
  switch (t.code) {
    case dl::kDLInt:
      return t.bits == 8 ? DType::Int8 : t.bits == 16 ? DType::Int16 : t.bits == 32 ? DType::Int32
             : t.bits == 64 ? std::optional(DType::Int64) : std::nullopt;
    case dl::kDLUInt:
      return t.bits == 8 ? DType::UInt8 : t.bits == 16 ? DType::UInt16 : t.bits == 32 ? DType::UInt32
             : t.bits == 64 ? std::optional(DType::UInt64) : std::nullopt;
    case dl::kDLFloat:
      return t.bits == 16 ? DType::Float16 : t.bits == 32 ? DType::Float32
             : t.bits == 64 ? std::optional(DType::Float64) : std::nullopt;
    case dl::kDLBfloat: return t.bits == 16 ? std::optional(DType::BFloat16) : std::nullopt;
    case dl::kDLBool: return t.bits == 8 ? std::optional(DType::Bool) : std::nullopt;
    default: return std::nullopt;
  }
}

dl::DLDataType dl_from_dtype(DType d) {
  const uint8_t bits = uint8_t(dtype_size(d) * 8);
  if (d == DType::Bool) return {dl::kDLBool, 8, 1};
  if (d == DType::BFloat16) return {dl::kDLBfloat, 16, 1};
  if (d == DType::Float16 || d == DType::Float32 || d == DType::Float64) return {dl::kDLFloat, bits, 1};
  if (is_integer(d) && !is_narrow(d)) return {is_signed(d) ? dl::kDLInt : dl::kDLUInt, bits, 1};
  throw py::type_error(std::string("a ") + dtype_name(d) + " tensor has no DLPack dtype");
}

// A managed tensor taken from a producer (either version of the protocol): its deleter runs when
// the last tensor over it goes. Deleters may run without the GIL (the protocol has producers
// take it themselves where they need it: numpy does).
struct Imported {
  dl::DLManagedTensor* legacy = nullptr;
  dl::DLManagedTensorVersioned* versioned = nullptr;
  const dl::DLTensor& t() const { return versioned ? versioned->dl_tensor : legacy->dl_tensor; }
  ~Imported() {
    if (legacy && legacy->deleter) legacy->deleter(legacy);
    if (versioned && versioned->deleter) versioned->deleter(versioned);
  }
};

// Calls obj.__dlpack__ (asking for version 1.0, else as an older producer takes it) and owns the
// tensor it returns.
std::shared_ptr<Imported> take_capsule(py::handle obj, py::object stream, const std::string& what) {
  // The types whose __dlpack__ refused max_version (numpy < 2.1, torch < 2.4), asked without it
  // from then on: a refusal costs a TypeError, tens of microseconds a call. Read and written under
  // the GIL; the types are held, so that their addresses are not reused.
  static auto* legacy = new std::vector<py::object>();
  const py::handle type = py::type::handle_of(obj);
  const bool known_legacy =
      std::any_of(legacy->begin(), legacy->end(), [&](const py::object& t) { return t.is(type); });
  py::object cap;
  if (!known_legacy) {
    try {
      cap = obj.attr("__dlpack__")("stream"_a = stream, "max_version"_a = py::make_tuple(dl::kMajor, dl::kMinor));
    } catch (py::error_already_set& e) {
      if (!e.matches(PyExc_TypeError)) throw;
      legacy->push_back(py::reinterpret_borrow<py::object>(type));
    }
  }
  if (!cap) cap = obj.attr("__dlpack__")("stream"_a = stream);
  auto imported = std::make_shared<Imported>();
  PyObject* c = cap.ptr();
  if (PyCapsule_IsValid(c, dl::kCapsuleVersioned)) {
    imported->versioned = static_cast<dl::DLManagedTensorVersioned*>(PyCapsule_GetPointer(c, dl::kCapsuleVersioned));
    if (PyCapsule_SetName(c, dl::kUsedCapsuleVersioned) != 0) throw py::error_already_set();
    TERRACE_CHECK(imported->versioned->version.major == dl::kMajor, InvalidArgument, what, ": DLPack version ",
                  imported->versioned->version.major, ".", imported->versioned->version.minor,
                  " (this module reads 1.x)");
  } else if (PyCapsule_IsValid(c, dl::kCapsule)) {
    imported->legacy = static_cast<dl::DLManagedTensor*>(PyCapsule_GetPointer(c, dl::kCapsule));
    if (PyCapsule_SetName(c, dl::kUsedCapsule) != 0) throw py::error_already_set();
  } else {
    throw py::type_error(what + ": __dlpack__ returned no unused DLPack capsule");
  }
  return imported;
}

// Row-major and compact, dims of extent 1 aside (their strides do not matter).
bool compact(const dl::DLTensor& t) {
  if (!t.strides) return true;
  int64_t expected = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    if (t.shape[d] != 1 && t.strides[d] != expected) return false;
    expected *= t.shape[d];
  }
  return true;
}

// A compact copy of a strided host tensor.
Tensor gather(const dl::DLTensor& t, const char* base, DType dtype, const Shape& shape) {
  Tensor out = Tensor::empty(dtype, shape);
  const size_t elem = dtype_size(dtype);
  auto* dst = static_cast<char*>(out.raw());
  std::vector<int64_t> index(shape.size(), 0);
  for (int64_t i = 0; i < out.numel(); ++i) {
    int64_t offset = 0;
    for (size_t d = 0; d < shape.size(); ++d) offset += index[d] * t.strides[d];
    std::memcpy(dst + size_t(i) * elem, base + offset * int64_t(elem), elem);
    for (size_t d = shape.size(); d-- > 0;) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

#ifdef TERRACE_HAVE_CUDA
// The stream the module reads producers' CUDA memory on: the producer orders its writes before it
// (the stream passed to __dlpack__).
const jit::cuda::Stream& import_stream() {
  static auto* stream = new jit::cuda::Stream();  // never destroyed: the driver may be gone at exit
  return *stream;
}

// A producer's CUDA memory as a Terrace device tensor's storage. Tier 2 reads a storage that is not
// on its own stream through the host (tiers/gpu/gpu_backend.cpp), which orders both sides.
class ImportedDeviceStorage final : public DeviceStorage {
 public:
  ImportedDeviceStorage(std::shared_ptr<Imported> imported, uint64_t address, size_t bytes)
      : imported_(std::move(imported)), address_(address), bytes_(bytes) {}
  uint64_t address() const override { return address_; }
  size_t bytes() const override { return bytes_; }
  void read(void* dst, size_t bytes) const override {
    if (bytes == 0) return;
    jit::cuda::device();
    jit::cuda::copy_to_host(dst, address_, bytes, import_stream());
    import_stream().synchronize();
  }
  std::string where() const override { return "cuda:0"; }

 private:
  std::shared_ptr<Imported> imported_;
  uint64_t address_;
  size_t bytes_;
};
#endif

// The tensor over `obj`'s DLPack export; `keep` set to what must live as long as it does.
Tensor import_dlpack(py::handle obj, const std::string& what, std::shared_ptr<const void>& keep) {
  if (!py::hasattr(obj, "__dlpack__") || !py::hasattr(obj, "__dlpack_device__"))
    throw py::type_error(what + ": " + std::string(py::str(py::type::of(obj))) +
                         " has no __dlpack__ and __dlpack_device__");
  const auto device = obj.attr("__dlpack_device__")().cast<std::pair<int, int>>();
  const bool host = device.first == dl::kDLCPU || device.first == dl::kDLCUDAHost;
  const bool cuda = device.first == dl::kDLCUDA || device.first == dl::kDLCUDAManaged;
  TERRACE_CHECK(host || cuda, InvalidArgument, what, ": DLPack device type ", device.first,
                " is neither CPU (1) nor CUDA (2)");
  py::object stream = py::none();
#ifdef TERRACE_HAVE_CUDA
  std::string why;
  if (cuda) {
    TERRACE_CHECK(jit::cuda::gpu_available(&why), NotImplemented, what, " is a CUDA tensor, but no GPU is usable: ", why);
    TERRACE_CHECK(device.second == 0, InvalidArgument, what, " is on cuda:", device.second,
                  "; Terrace's tier 2 runs on cuda:0");
    stream = py::int_(reinterpret_cast<uintptr_t>(import_stream().get()));
  }
#else
  TERRACE_CHECK(!cuda, NotImplemented, what, " is a CUDA tensor, and this build has no tier 2 (CUDA)");
#endif
  std::shared_ptr<Imported> imported = take_capsule(obj, stream, what);
  const dl::DLTensor& t = imported->t();
  const std::optional<DType> dtype = dtype_from_dl(t.dtype);
  if (!dtype)
    throw py::type_error(what + ": DLPack dtype (code " + std::to_string(t.dtype.code) + ", " +
                         std::to_string(t.dtype.bits) + " bits, " + std::to_string(t.dtype.lanes) +
                         " lanes) is not one Terrace takes (bool, int8 to int64, uint8 to uint64, float16, "
                         "bfloat16, float32, float64)");
  Shape shape(t.shape, t.shape + t.ndim);
  for (int64_t d : shape) TERRACE_CHECK(d >= 0, InvalidArgument, what, ": negative dim in shape ", shape_str(shape));
  const size_t bytes = size_t(shape_numel(shape)) * dtype_size(*dtype);
  char* data = static_cast<char*>(t.data) + t.byte_offset;
  if (cuda) {
#ifdef TERRACE_HAVE_CUDA
    TERRACE_CHECK(compact(t), InvalidArgument, what, ": a CUDA tensor of shape ", shape_str(shape),
                  " that is not contiguous (row-major, compact); make it so first (torch: .contiguous())");
    keep = imported;
    return Tensor::on_device(*dtype, shape,
                             std::make_shared<ImportedDeviceStorage>(imported, reinterpret_cast<uintptr_t>(data), bytes));
#endif
  }
  const bool aligned = reinterpret_cast<uintptr_t>(data) % dtype_size(*dtype) == 0;
  if (bytes == 0) return Tensor::empty(*dtype, shape);
  if (!compact(t) || !aligned) return gather(t, data, *dtype, shape);  // one copy, owned
  keep = imported;
  return Tensor::borrow(*dtype, shape, data, bytes);
}

// What a capsule's managed tensor points into: the exported tensor and its shape and strides.
struct Exported {
  Tensor t;
  std::shared_ptr<const void> keep;  // the producer's memory under a tensor imported from DLPack
  std::vector<int64_t> shape, strides;
  dl::DLManagedTensor legacy{};
  dl::DLManagedTensorVersioned versioned{};
};

// Capsule destructors: a capsule the consumer never took (still under its first name) frees its tensor.
void free_unused_legacy(PyObject* cap) {
  if (PyCapsule_IsValid(cap, dl::kCapsule)) {
    auto* m = static_cast<dl::DLManagedTensor*>(PyCapsule_GetPointer(cap, dl::kCapsule));
    if (m->deleter) m->deleter(m);
  }
}
void free_unused_versioned(PyObject* cap) {
  if (PyCapsule_IsValid(cap, dl::kCapsuleVersioned)) {
    auto* m = static_cast<dl::DLManagedTensorVersioned*>(PyCapsule_GetPointer(cap, dl::kCapsuleVersioned));
    if (m->deleter) m->deleter(m);
  }
}

const ConstantMemory& no_constants() {
  static const ConstantMemory none{Graph{}};
  return none;
}

}  // namespace

PyTensor PyTensor::from_dlpack(py::handle obj) {
  if (py::isinstance<PyTensor>(obj)) return obj.cast<const PyTensor&>();
  std::shared_ptr<const void> keep;
  Tensor t = import_dlpack(obj, "from_dlpack", keep);
  PyTensor p(std::move(t));
  p.keep_ = std::move(keep);
  return p;
}

py::object PyTensor::dlpack(py::object stream, py::object max_version, py::object dl_device, py::object copy) const {
  const auto own = dlpack_device().cast<std::pair<int, int>>();
  const bool versioned = !max_version.is_none() && max_version.cast<std::pair<int, int>>().first >= 1;
  Tensor t = t_;
  bool copied = false;
  if (!dl_device.is_none() && dl_device.cast<std::pair<int, int>>() != own) {
    const auto want = dl_device.cast<std::pair<int, int>>();
    if (!(t.on_device() && want.first == dl::kDLCPU) || (!copy.is_none() && !copy.cast<bool>()))
      throw py::buffer_error("a " + device() + " tensor is exported to its own device" +
                             (t.on_device() ? " or, copied, to the CPU" : ""));
    t = t.to_host();
    copied = true;
  } else if (!copy.is_none() && copy.cast<bool>()) {
    if (t.on_device()) throw py::buffer_error("a copy of a device tensor on its device is not made here");
    t = t.clone();
    copied = true;
  }
  if (!t.on_device() && !stream.is_none())
    throw py::value_error("__dlpack__: stream must be None for a CPU tensor");
  // A device tensor's writes are done before the consumer reads it, on whatever stream: read
  // waits for the device work that writes the storage.
  if (t.on_device() && t.nbytes() > 0) {
    char first;
    py::gil_scoped_release nogil;
    t.device_storage()->read(&first, 1);
  }
  auto* e = new Exported{t, copied ? nullptr : keep_, t.shape(), row_major_strides(t.shape())};
  dl::DLTensor dt{};
  dt.data = t.numel() == 0 ? nullptr
            : t.on_device() ? reinterpret_cast<void*>(t.device_address())
                            : const_cast<void*>(t.raw());
  dt.device = {t.on_device() ? dl::kDLCUDA : dl::kDLCPU, 0};
  dt.ndim = int32_t(e->shape.size());
  dt.dtype = dl_from_dtype(t.dtype());
  dt.shape = e->shape.data();
  dt.strides = e->strides.data();
  if (versioned) {
    e->versioned.version = {dl::kMajor, dl::kMinor};
    e->versioned.manager_ctx = e;
    e->versioned.deleter = [](dl::DLManagedTensorVersioned* m) { delete static_cast<Exported*>(m->manager_ctx); };
    e->versioned.flags = copied ? dl::kFlagIsCopied : 0;
    e->versioned.dl_tensor = dt;
    return py::reinterpret_steal<py::object>(PyCapsule_New(&e->versioned, dl::kCapsuleVersioned, free_unused_versioned));
  }
  e->legacy.manager_ctx = e;
  e->legacy.deleter = [](dl::DLManagedTensor* m) { delete static_cast<Exported*>(m->manager_ctx); };
  e->legacy.dl_tensor = dt;
  return py::reinterpret_steal<py::object>(PyCapsule_New(&e->legacy, dl::kCapsule, free_unused_legacy));
}

py::tuple PyTensor::dlpack_device() const {
  return t_.on_device() ? py::make_tuple(dl::kDLCUDA, 0) : py::make_tuple(dl::kDLCPU, 0);
}

py::array PyTensor::numpy() const {
  if (t_.on_device()) {
    Tensor host;
    {
      py::gil_scoped_release nogil;
      host = t_.to_host();
    }
    return numpy_from_tensor(std::move(host), no_constants());
  }
  return numpy_from_tensor(t_, no_constants());  // a copy where t_ is over a producer's memory
}

py::tuple PyTensor::shape() const { return py::tuple(py::cast(t_.shape())); }

std::string PyTensor::dtype() const { return dtype_name(t_.dtype()); }

std::string PyTensor::device() const { return t_.on_device() ? t_.device_storage()->where() : "cpu"; }

uintptr_t PyTensor::data_ptr() const {
  if (t_.on_device()) return uintptr_t(t_.device_address());
  return reinterpret_cast<uintptr_t>(t_.numel() ? t_.raw() : nullptr);
}

std::string PyTensor::repr() const {
  return "terrace.Tensor(shape=" + shape_str(t_.shape()) + ", dtype=" + dtype() + ", device=" + device() + ")";
}

Tensor tensor_from_value(const std::string& name, py::handle value, std::vector<py::object>& keep) {
  if (py::isinstance<PyTensor>(value)) {
    keep.push_back(py::reinterpret_borrow<py::object>(value));
    return value.cast<const PyTensor&>().tensor();
  }
  if (py::isinstance<py::array>(value) || !py::hasattr(value, "__dlpack__"))
    return tensor_from_numpy(name, value, keep);
  std::shared_ptr<const void> held;
  Tensor t = import_dlpack(value, "input '" + name + "'", held);
  // Freed with `keep`, under the GIL: a capsule over the holder.
  if (held)
    keep.push_back(py::capsule(new std::shared_ptr<const void>(std::move(held)),
                               [](void* p) { delete static_cast<std::shared_ptr<const void>*>(p); }));
  return t;
}

PyTensor tensor_output(Tensor t, const ConstantMemory& constants) {
  if (!t.on_device() && t.numel() > 0 && (t.borrowed() || constants.holds(t.raw()))) t = t.clone();
  return PyTensor(std::move(t));
}

void register_tensor(py::module_& m) {
  py::class_<PyTensor>(m, "Tensor",
                       "A Terrace tensor in host or device memory, as ONNX Runtime's OrtValue: DLPack both ways "
                       "(numpy.from_dlpack(t), torch.from_dlpack(t); Tensor.from_dlpack(obj)), .numpy().")
      .def_static("from_dlpack", &PyTensor::from_dlpack, "obj"_a,
                  "A tensor over any object with __dlpack__ (no copy where it is compact and aligned).")
      .def("__dlpack__", &PyTensor::dlpack, "stream"_a = py::none(), py::kw_only(), "max_version"_a = py::none(),
           "dl_device"_a = py::none(), "copy"_a = py::none())
      .def("__dlpack_device__", &PyTensor::dlpack_device)
      .def("numpy", &PyTensor::numpy, "A numpy array: over the tensor's memory on the CPU, a copy from a device.")
      .def_property_readonly("shape", &PyTensor::shape)
      .def_property_readonly("dtype", &PyTensor::dtype)
      .def_property_readonly("device", &PyTensor::device)
      .def("data_ptr", &PyTensor::data_ptr)
      .def("__repr__", &PyTensor::repr);
}

}  // namespace terrace::python
