// ONNX export of part of a graph: a region's nodes as a standalone model (repros, tests).
#pragma once
#include <string>
#include <vector>

#include "interp/graph.h"

namespace onnx {
class AttributeProto;
class GraphProto;
class ValueInfoProto;
}

namespace terrace {

// A serialized ModelProto holding `nodes` of `graph`, reading `inputs` and producing `outputs`,
// typed by example values (their dtypes and shapes). Initializers among the inputs are exported
// as initializers. Graph-valued attributes are NotImplemented.
std::string export_onnx(const Graph& graph, const std::vector<int>& nodes, const std::vector<int>& inputs,
                        const std::vector<Tensor>& input_values, const std::vector<int>& outputs,
                        const std::vector<Tensor>& output_values);

}  // namespace terrace

namespace terrace {

// The whole graph as a GraphProto: inputs and outputs typed with what the graph knows (dtype,
// static dims, symbolic dim names; an output of unknown dtype is left untyped), initializers,
// nodes, and If/Loop/Scan bodies recursively (a body's captures stay names of the outer scope).
void graph_to_proto(const Graph& graph, onnx::GraphProto* gp);
// One attribute (If/Loop/Scan bodies exported recursively, as graph_to_proto does).
void attribute_to_proto(const std::string& name, const Attribute& a, onnx::AttributeProto* p);

// A value's name and type as far as its ValueInfo knows it: no type where the dtype is unknown.
void value_info_to_proto(const Value& value, onnx::ValueInfoProto* p);

}  // namespace terrace
