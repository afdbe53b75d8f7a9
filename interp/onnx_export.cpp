// ONNX export of a node subset, through the ONNX protobuf classes.
#include "interp/onnx_export.h"

#include <algorithm>

#include "interp/tensor_proto.h"

namespace terrace {

void attribute_to_proto(const std::string& name, const Attribute& a, onnx::AttributeProto* p) {
  using K = Attribute::Kind;
  p->set_name(name);
  switch (a.kind) {
    case K::Int: p->set_type(onnx::AttributeProto::INT); p->set_i(a.i); break;
    case K::Float: p->set_type(onnx::AttributeProto::FLOAT); p->set_f(a.f); break;
    case K::String: p->set_type(onnx::AttributeProto::STRING); p->set_s(a.s); break;
    case K::Tensor: p->set_type(onnx::AttributeProto::TENSOR); tensor_to_proto(a.t, p->mutable_t()); break;
    case K::Ints:
      p->set_type(onnx::AttributeProto::INTS);
      for (int64_t v : a.ints) p->add_ints(v);
      break;
    case K::Floats:
      p->set_type(onnx::AttributeProto::FLOATS);
      for (float v : a.floats) p->add_floats(v);
      break;
    case K::Strings:
      p->set_type(onnx::AttributeProto::STRINGS);
      for (auto& v : a.strings) p->add_strings(v);
      break;
    case K::Tensors:
      p->set_type(onnx::AttributeProto::TENSORS);
      for (auto& t : a.tensors) tensor_to_proto(t, p->add_tensors());
      break;
    case K::Graph:
      TERRACE_CHECK(a.g, InvalidArgument, "graph attribute '", name, "' holds no graph");
      p->set_type(onnx::AttributeProto::GRAPH);
      graph_to_proto(*a.g, p->mutable_g());
      break;
    case K::Graphs:
      p->set_type(onnx::AttributeProto::GRAPHS);
      for (auto& g : a.graphs) {
        TERRACE_CHECK(g, InvalidArgument, "graph attribute '", name, "' holds no graph");
        graph_to_proto(*g, p->add_graphs());
      }
      break;
  }
}

namespace {

void export_value_info(const std::string& name, DType dtype, const Shape* shape, onnx::ValueInfoProto* p) {
  p->set_name(name);
  auto* tt = p->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(dtype_to_onnx(dtype));
  auto* sp = tt->mutable_shape();
  for (int64_t d : *shape) sp->add_dim()->set_dim_value(d);
}

}  // namespace

void value_info_to_proto(const Value& v, onnx::ValueInfoProto* p) {
  p->set_name(v.name);
  if (v.info.kind != ValueKind::Tensor || !v.info.dtype) return;
  auto* tt = p->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(dtype_to_onnx(*v.info.dtype));
  if (!v.info.shape) return;
  auto* sp = tt->mutable_shape();
  for (size_t i = 0; i < v.info.shape->size(); ++i) {
    auto* d = sp->add_dim();
    const std::string name = i < v.info.dim_names.size() ? v.info.dim_names[i] : "";
    if (!name.empty()) d->set_dim_param(name);
    else if ((*v.info.shape)[i] >= 0) d->set_dim_value((*v.info.shape)[i]);
  }
}
void graph_to_proto(const Graph& g, onnx::GraphProto* gp) {
  gp->set_name(g.name.empty() ? "graph" : g.name);
  for (int v : g.inputs) value_info_to_proto(g.value(v), gp->add_input());
  std::vector<int> constants;  // in value order: the same graph exports to the same bytes
  for (const auto& [id, t] : g.initializers) constants.push_back(id);
  std::sort(constants.begin(), constants.end());
  for (int id : constants) tensor_to_proto(g.initializers.at(id), gp->add_initializer(), g.value(id).name);
  for (const Node& node : g.nodes) {
    onnx::NodeProto* np = gp->add_node();
    np->set_op_type(op_name(node.op));
    np->set_name(node.name);
    for (int v : node.inputs) np->add_input(v >= 0 ? g.value(v).name : "");
    for (int v : node.outputs) np->add_output(v >= 0 ? g.value(v).name : "");
    for (auto& [k, a] : node.attrs) attribute_to_proto(k, a, np->add_attribute());
  }
  for (int v : g.outputs) value_info_to_proto(g.value(v), gp->add_output());
}

std::string export_onnx(const Graph& g, const std::vector<int>& nodes, const std::vector<int>& inputs,
                        const std::vector<Tensor>& input_values, const std::vector<int>& outputs,
                        const std::vector<Tensor>& output_values) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.set_producer_name("terrace");
  auto* opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(g.opset);
  onnx::GraphProto* gp = model.mutable_graph();
  gp->set_name(g.name.empty() ? "region" : g.name);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string& name = g.values[size_t(inputs[i])].name;
    auto init = g.initializers.find(inputs[i]);
    if (init != g.initializers.end()) {
      tensor_to_proto(init->second, gp->add_initializer(), name);
      continue;
    }
    export_value_info(name, input_values[i].dtype(), &input_values[i].shape(), gp->add_input());
  }
  for (int n : nodes) {
    const Node& node = g.nodes[size_t(n)];
    onnx::NodeProto* np = gp->add_node();
    np->set_op_type(op_name(node.op));
    np->set_name(node.name);
    for (int v : node.inputs) np->add_input(v >= 0 ? g.values[size_t(v)].name : "");
    for (int v : node.outputs) np->add_output(v >= 0 ? g.values[size_t(v)].name : "");
    for (auto& [k, a] : node.attrs) attribute_to_proto(k, a, np->add_attribute());
  }
  for (size_t i = 0; i < outputs.size(); ++i)
    export_value_info(g.values[size_t(outputs[i])].name, output_values[i].dtype(), &output_values[i].shape(),
                      gp->add_output());
  std::string bytes;
  TERRACE_CHECK(model.SerializeToString(&bytes), Internal, "could not serialize the exported model");
  return bytes;
}

}  // namespace terrace
