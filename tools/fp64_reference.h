// terrace validate's second opinion: the model recomputed in float64 on the interpreter, against
// which a tier's float32 output is judged when it differs from the float32 interpreter's by more
// than the compare module's tolerance (PyTorch's accuracy checker does the same with an fp64
// reference): a compiled tier whose only difference is the order of fp32 roundings is as far from
// the exact answer as the interpreter is, however far the two are from each other after fifty
// convolutions whose errors compound.
#pragma once
#include <memory>
#include <string>

#include "interp/graph.h"
#include "tiers/session.h"

namespace terrace::cli {

// A copy of `g` computing in float64 where it computes in float32: value types, initializers,
// tensor attributes, Cast/CastLike targets and dtype attributes widened (subgraphs too). nullptr,
// with the reason in `why`, for a graph this cannot widen (float16 or bfloat16 arithmetic, which
// widening would change in other ways).
std::shared_ptr<Graph> widen_to_float64(const Graph& g, std::string* why);

// The outputs of the widened graph for `inputs` (float32 inputs widened), on the interpreter;
// empty, with the reason in `why`, where an op has no float64 kernel or the graph cannot widen.
NamedTensors float64_outputs(const Graph& widened, const NamedTensors& inputs, std::string* why);

// The verdict on a float32 output `got` that the compare module found different from the
// interpreter's `want`: with `exact` the float64 reference, it passes when its largest error
// against `exact` is at most twice the interpreter's, or 1e-5 of the output's largest magnitude
// (fp32 accumulation compounded over a deep network, as ONNX Runtime's and PyTorch's have it;
// fp64_reference.cpp gives the measurements), plus 1e-7. `detail` says the errors and the bound.
bool close_to_float64(const Tensor& want, const Tensor& got, const Tensor& exact, std::string* detail);

}  // namespace terrace::cli
