// numpy arrays <-> Terrace tensors for the Python module: which dtypes map, and when memory is shared.
#pragma once
#include <pybind11/numpy.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "interp/graph.h"
#include "interp/tensor.h"

namespace terrace::python {

// The memory of a graph's constants (initializers and Constant nodes' tensors, subgraphs' too):
// an output over it must be copied, else writing the returned array would change the model.
class ConstantMemory {
 public:
  explicit ConstantMemory(const Graph& g);
  bool holds(const void* p) const;

 private:
  void add(const Graph& g);
  void add(const Tensor& t);
  std::vector<std::pair<uintptr_t, uintptr_t>> ranges_;  // [begin, end), sorted by begin
};

// The tensor for feed value `value` of input `name`. A C-contiguous, aligned, native-endian array
// of a dtype Terrace takes is borrowed (no copy); anything else is first made one by numpy (one
// copy). The array the tensor reads is appended to `keep`, which must outlive the run.
// TypeError for a dtype Terrace does not take.
Tensor tensor_from_numpy(const std::string& name, pybind11::handle value, std::vector<pybind11::object>& keep);

// Output `t` as an array: over the tensor's own memory (a capsule holds the tensor) where the
// session gave it to the caller; a copy where it is borrowed (an input passed through), a model
// constant's, or in device memory.
pybind11::array numpy_from_tensor(Tensor t, const ConstantMemory& constants);

// The ONNX type string of a value, as ONNX Runtime's NodeArg.type: "tensor(float)", "seq(tensor(int64))".
std::string onnx_type_string(const ValueInfo& info);

}  // namespace terrace::python
