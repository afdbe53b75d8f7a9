// GraphBuilder: records a Graph as code writes it; build() exports it to ONNX and imports it back
// through load_onnx_model, so a built graph is validated and inferred by the one import path.
#include "interp/graph_builder.h"

#include <onnx/onnx_pb.h>

#include "interp/onnx_export.h"
#include "interp/onnx_import.h"
#include "interp/shape_infer.h"
#include "interp/verify.h"

namespace terrace {

namespace {

Attribute make_attr(Attribute::Kind kind) {
  Attribute a;
  a.kind = kind;
  return a;
}

ValueInfo tensor_info(DType dtype, const std::vector<Dim>& shape, const std::string& what) {
  ValueInfo info;
  info.dtype = dtype;
  info.shape.emplace();
  for (size_t i = 0; i < shape.size(); ++i) {
    const Dim& d = shape[i];
    TERRACE_CHECK(!d.name.empty() || d.size >= -1, InvalidArgument, what, ": dim ", i, " is ", d.size,
                  " (a size is 0 or more, -1 an unknown size; a named dim such as \"batch\" is better)");
    info.shape->push_back(d.name.empty() ? d.size : -1);
    info.dim_names.push_back(d.name);
  }
  return info;
}

onnx::ModelProto to_model(const Graph& g) {
  onnx::ModelProto mp;
  mp.set_ir_version(8);
  mp.set_producer_name("terrace GraphBuilder");
  auto* opset = mp.add_opset_import();
  opset->set_domain("");
  opset->set_version(g.opset);
  graph_to_proto(g, mp.mutable_graph());
  return mp;
}

// ONNX's checker wants the main graph's outputs typed, with their rank. Outputs the builder was
// not told the type of get what import infers for the same graph without its outputs (so that
// what is wrong with a node is reported as import reports it, before any output's type).
void type_outputs(onnx::ModelProto& mp) {
  onnx::GraphProto* gp = mp.mutable_graph();
  bool untyped = false;
  for (const auto& o : gp->output()) untyped = untyped || !o.has_type();
  if (!untyped) return;
  onnx::ModelProto probe = mp;
  probe.mutable_graph()->clear_output();
  std::shared_ptr<Graph> inferred = load_onnx_model(probe).graph;
  for (auto& o : *gp->mutable_output()) {
    if (o.has_type()) continue;
    const int id = inferred->find_value(o.name());
    const ValueInfo* info = id >= 0 ? &inferred->value(id).info : nullptr;
    TERRACE_CHECK(info && info->kind == ValueKind::Tensor && info->dtype && info->shape, InvalidModel,
                  "graph output '", o.name(), "': its ", info && info->dtype ? "rank" : "type",
                  " cannot be inferred; declare it with output(name, dtype, shape)");
    value_info_to_proto(Value{o.name(), *info, -1}, &o);
  }
}

}  // namespace

AttrValue::AttrValue(int64_t v) : attr(make_attr(Attribute::Kind::Int)) { attr.i = v; }
AttrValue::AttrValue(float v) : attr(make_attr(Attribute::Kind::Float)) { attr.f = v; }
AttrValue::AttrValue(std::string v) : attr(make_attr(Attribute::Kind::String)) { attr.s = std::move(v); }
AttrValue::AttrValue(std::vector<int64_t> v) : attr(make_attr(Attribute::Kind::Ints)) { attr.ints = std::move(v); }
AttrValue::AttrValue(std::vector<float> v) : attr(make_attr(Attribute::Kind::Floats)) { attr.floats = std::move(v); }
AttrValue::AttrValue(std::vector<std::string> v) : attr(make_attr(Attribute::Kind::Strings)) {
  attr.strings = std::move(v);
}
AttrValue::AttrValue(Tensor v) : attr(make_attr(Attribute::Kind::Tensor)) { attr.t = std::move(v); }
AttrValue::AttrValue(const GraphBuilder& body) : attr(make_attr(Attribute::Kind::Graph)) { attr.g = std::make_shared<Graph>(*body.recorded()); }

GraphBuilder::GraphBuilder(std::string graph_name, int opset) : g_(std::make_shared<Graph>()) {
  g_->name = std::move(graph_name);
  g_->opset = opset;
}

std::string GraphBuilder::input(const std::string& name, DType dtype, const std::vector<Dim>& shape) {
  TERRACE_CHECK(!name.empty(), InvalidArgument, "a graph input needs a name");
  g_->inputs.push_back(g_->add_value(name, tensor_info(dtype, shape, "graph input '" + name + "'")));
  return name;
}

std::string GraphBuilder::constant(const std::string& name, Tensor value) {
  TERRACE_CHECK(!name.empty(), InvalidArgument, "a constant needs a name");
  TERRACE_CHECK(value.defined(), InvalidArgument, "constant '", name, "' holds no tensor");
  ValueInfo info;
  info.dtype = value.dtype();
  info.shape = value.shape();
  info.dim_names.resize(value.shape().size());
  g_->initializers.emplace(g_->add_value(name, std::move(info)), std::move(value));
  return name;
}

int GraphBuilder::value_for_read(const std::string& name) {
  if (name.empty()) return -1;
  int id = g_->find_value(name);
  if (id >= 0) return id;
  ValueInfo outer;  // defined by an enclosing graph, or by nothing: build() tells which
  outer.kind = ValueKind::Unknown;
  id = g_->add_value(name, outer);
  g_->captures.push_back(id);
  return id;
}

std::string GraphBuilder::op(const std::string& op_type, const std::vector<std::string>& inputs, const Attrs& attrs) {
  return op(op_type, inputs, attrs, 1)[0];
}

std::vector<std::string> GraphBuilder::op(const std::string& op_type, const std::vector<std::string>& inputs,
                                          const Attrs& attrs, int num_outputs) {
  const std::string node_name = op_type + std::to_string(g_->nodes.size());
  TERRACE_CHECK(num_outputs >= 1, InvalidArgument, "node '", node_name, "' (", op_type, "): ", num_outputs,
                " outputs asked (at least 1)");
  std::vector<std::string> outputs;
  for (int k = 0; k < num_outputs; ++k) outputs.push_back(node_name + "_" + std::to_string(k));
  return node(op_type, node_name, inputs, attrs, outputs);
}

std::vector<std::string> GraphBuilder::node(const std::string& op_type, const std::string& node_name,
                                            const std::vector<std::string>& inputs, const Attrs& attrs,
                                            const std::vector<std::string>& outputs) {
  const std::string what = "node '" + node_name + "' (" + op_type + ")";
  std::optional<Op> op = op_from_name(op_type);
  TERRACE_CHECK(op, NotImplemented, what, ": op '", op_type, "' of domain '' is not supported");
  Node n;
  n.op = *op;
  n.name = node_name;
  for (const auto& [k, v] : attrs) {
    TERRACE_CHECK(!k.empty(), InvalidArgument, what, " has an attribute without a name");
    TERRACE_CHECK(v.attr.kind != Attribute::Kind::Graph || v.attr.g, InvalidArgument, what, ", attribute '", k,
                  "' holds no graph");
    n.attrs[k] = v.attr;
  }
  for (const std::string& in : inputs) n.inputs.push_back(value_for_read(in));
  const int index = int(g_->nodes.size());
  for (const std::string& out : outputs) {
    int id = out.empty() ? -1 : g_->add_value(out);
    if (id >= 0) g_->values[size_t(id)].producer = index;
    n.outputs.push_back(id);
  }
  g_->nodes.push_back(std::move(n));
  return outputs;
}

void GraphBuilder::output(const std::string& name) {
  const int id = g_->find_value(name);
  TERRACE_CHECK(id >= 0, InvalidArgument, "graph output '", name, "' is not a value of graph '", g_->name, "'");
  g_->outputs.push_back(id);
}

void GraphBuilder::output(const std::string& name, DType dtype, const std::vector<Dim>& shape) {
  output(name);
  ValueInfo declared = tensor_info(dtype, shape, "graph output '" + name + "'");
  ValueInfo& info = g_->values[size_t(g_->outputs.back())].info;
  TERRACE_CHECK(!info.dtype || *info.dtype == dtype, InvalidArgument, "graph output '", name, "' is declared ",
                dtype_name(dtype), " but holds ", dtype_name(*info.dtype));
  info = std::move(declared);
}

std::string GraphBuilder::to_onnx() const {
  onnx::ModelProto mp = to_model(*g_);
  type_outputs(mp);
  std::string bytes;
  TERRACE_CHECK(mp.SerializeToString(&bytes), InvalidModel, "graph '", g_->name,
                "' does not serialize as an ONNX model (over 2 GiB?)");
  return bytes;
}

std::shared_ptr<Graph> GraphBuilder::build() const {
  try {
    onnx::ModelProto mp = to_model(*g_);
    type_outputs(mp);
    return load_onnx_model(mp).graph;
  } catch (const std::bad_alloc&) {
    fail(ErrorCode::OutOfMemory, "out of memory while building graph '", g_->name, "'");
  }
}

}  // namespace terrace
