// ONNX export of part of a graph: a region's nodes as a standalone model (repros, tests).
#pragma once
#include <string>
#include <vector>

#include "interp/graph.h"

namespace terrace {

// A serialized ModelProto holding `nodes` of `graph`, reading `inputs` and producing `outputs`,
// typed by example values (their dtypes and shapes). Initializers among the inputs are exported
// as initializers. Graph-valued attributes are NotImplemented.
std::string export_onnx(const Graph& graph, const std::vector<int>& nodes, const std::vector<int>& inputs,
                        const std::vector<Tensor>& input_values, const std::vector<int>& outputs,
                        const std::vector<Tensor>& output_values);

}  // namespace terrace
