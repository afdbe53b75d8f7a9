// FusionGroup: elementwise ops fused into one kernel, specialised to one input signature; the
// input of kernels/lower.
#pragma once
#include <string>
#include <vector>

#include "interp/graph.h"

namespace terrace::kernels {

// A tensor's static signature: the version of a kernel is specialised to concrete shapes.
struct TensorSig {
  DType dtype = DType::Float32;
  Shape shape;
  bool operator==(const TensorSig&) const = default;
};

// Where an op's operand comes from.
struct Operand {
  enum class Kind : uint8_t { Input, Result, Constant, Absent };
  Kind kind = Kind::Absent;
  int index = -1;  // into FusionGroup::inputs, ::ops (an earlier op) or ::constants

  static Operand input(int i) { return {Kind::Input, i}; }
  static Operand result(int op) { return {Kind::Result, op}; }
  static Operand constant(int i) { return {Kind::Constant, i}; }
  static Operand absent() { return {Kind::Absent, -1}; }  // a missing optional input
};

struct FusedOp {
  // The op and its attributes; its input/output value ids are not used. Names the op in errors.
  Node node;
  std::vector<Operand> operands;  // in the node's input order
  // The result signature. Filled by whoever builds the group (from shape inference, or from
  // infer_result in kernels/lower.h); lower() checks that it agrees.
  TensorSig result;
};

struct FusionGroup {
  std::string name;               // the kernel's name (sanitised into a C identifier)
  std::vector<TensorSig> inputs;  // kernel buffers 0..n-1
  // Constants with one element, inlined into the code. Larger constants must be inputs.
  std::vector<Tensor> constants;
  std::vector<FusedOp> ops;       // topologically ordered: operands refer to earlier ops only
  std::vector<int> outputs;       // indices of ops whose results are written: buffers n, n+1, ...
};

}  // namespace terrace::kernels
