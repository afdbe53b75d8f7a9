// terrace.Tensor: a Terrace tensor held by Python, in host or device memory, with the DLPack
// protocol both ways (__dlpack__/__dlpack_device__ out, any DLPack object in), as ONNX Runtime's
// OrtValue; and the conversion of a feed value (numpy, DLPack object, terrace.Tensor) to a tensor.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "interp/tensor.h"
#include "python/src/arrays.h"

namespace terrace::python {

class PyTensor {
 public:
  // Over `t`, which the caller gives up (its memory is this object's from now on).
  explicit PyTensor(Tensor t) : t_(std::move(t)) {}
  // A tensor over any object with __dlpack__ and __dlpack_device__ (numpy arrays >= 1.22, torch
  // tensors, terrace.Tensor): the producer's memory, not a copy, where it is compact and aligned
  // (a strided CPU tensor is copied once; a strided CUDA one is refused). TypeError for an object
  // without the protocol or of a dtype Terrace does not take; InvalidArgument for a device it
  // cannot read.
  static PyTensor from_dlpack(pybind11::handle obj);

  const Tensor& tensor() const { return t_; }
  pybind11::object dlpack(pybind11::object stream, pybind11::object max_version, pybind11::object dl_device,
                          pybind11::object copy) const;
  pybind11::tuple dlpack_device() const;
  pybind11::array numpy() const;
  pybind11::tuple shape() const;
  std::string dtype() const;   // numpy's name for it: "float32"
  std::string device() const;  // "cpu", "cuda:0"
  uintptr_t data_ptr() const;  // the address of its first element, in its device's memory
  std::string repr() const;

 private:
  Tensor t_;
  std::shared_ptr<const void> keep_;  // the producer's memory under a tensor made by from_dlpack
};

// The tensor for feed value `value` of input `name`: a terrace.Tensor's own; a numpy array as
// tensor_from_numpy takes it; another object with __dlpack__ through DLPack. What the tensor
// reads is appended to `keep`, which must outlive the run.
Tensor tensor_from_value(const std::string& name, pybind11::handle value, std::vector<pybind11::object>& keep);

// Output `t` as a terrace.Tensor: over the session's own buffer; a copy where the buffer is
// borrowed (an input passed through) or a model constant's.
PyTensor tensor_output(Tensor t, const ConstantMemory& constants);

// Defines terrace._terrace.Tensor.
void register_tensor(pybind11::module_& m);

}  // namespace terrace::python
