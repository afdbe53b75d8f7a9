// Shape inference after the rewrites: the import's inference (interp/shape_infer.h, ONNX's per-op
// functions behind guards) ran on the model as exported, where a Reshape's target or an Expand's
// shape was still computed at run time; once folding made them constants, the same inference knows
// its results' shapes. The top-level graph goes to a ModelProto (initializers up to 4096 elements
// with their data, which shape arithmetic reads; larger ones as typed inputs, so that no weight is
// copied), is inferred, and each value's ValueInfo takes what it lacked: a shape where it had none,
// dims where it had -1, a dtype, symbolic dim names. Nothing known is changed (a rank that
// disagrees is left as it was). Nodes with bodies (If, Loop, Scan) are left out, their outputs
// declared with what is known of them; ops ONNX 1.12 has no schema for at the graph's opset go to
// Terrace's own inference (kOwnDomain), and so do, in graphs of opsets past 17 (inferred as opset
// 17, all ONNX 1.12 knows), the ops whose version in force changed more than their types since.
#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>

#include <algorithm>

#include "interp/onnx_export.h"
#include "interp/op_versions.h"
#include "interp/shape_infer.h"
#include "interp/tensor_proto.h"
#include "tiers/passes/graph_edit.h"
#include "tiers/passes/passes.h"

namespace terrace::passes {
namespace {

constexpr int64_t kDataElements = 4096;  // initializers exported with their data

// A value's type as far as it is known; false when not even its dtype is.
bool export_type(const Graph& g, int v, onnx::ValueInfoProto* p) {
  const ValueInfo& info = g.values[size_t(v)].info;
  p->set_name(g.values[size_t(v)].name);
  if (info.kind != ValueKind::Tensor || !info.dtype) return false;
  auto* tt = p->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(dtype_to_onnx(*info.dtype));
  if (!info.shape) return true;
  auto* shape = tt->mutable_shape();
  for (size_t d = 0; d < info.shape->size(); ++d) {
    auto* dim = shape->add_dim();
    const int64_t n = (*info.shape)[d];
    if (n >= 0) dim->set_dim_value(n);
    else if (d < info.dim_names.size() && !info.dim_names[d].empty()) dim->set_dim_param(info.dim_names[d]);
  }
  return true;
}

// An op whose version in force at the graph's opset (past 17) means more than its opset-17 version,
// which is all ONNX 1.12 knows: Terrace's own inference takes it, as at import.
bool newer_meaning(Op op, int opset) {
  const OpVersion* v = op_version_in_force(op, opset);
  return v && v->form != VersionForm::Types;
}

onnx::ModelProto to_model(const Graph& g, int opset) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  auto* o = m.add_opset_import();
  o->set_domain("");
  o->set_version(opset);
  auto* own = m.add_opset_import();
  own->set_domain(kOwnDomain);
  own->set_version(1);
  onnx::GraphProto* gp = m.mutable_graph();
  gp->set_name(g.name);
  for (int v : g.inputs) export_type(g, v, gp->add_input());
  for (auto& [v, t] : g.initializers) {
    if (t.numel() <= kDataElements) tensor_to_proto(t, gp->add_initializer(), g.values[size_t(v)].name);
    else if (!export_type(g, v, gp->add_input())) gp->mutable_input()->RemoveLast();
  }
  for (const Node& n : g.nodes) {
    if (!n.subgraphs().empty()) {  // left out: what reads its results sees their declared types
      for (int v : n.outputs)
        if (v >= 0 && !export_type(g, v, gp->add_input())) gp->mutable_input()->RemoveLast();
      continue;
    }
    onnx::NodeProto* np = gp->add_node();
    np->set_op_type(op_name(n.op));
    np->set_name(n.name);
    if (!onnx::OpSchemaRegistry::Schema(op_name(n.op), opset, "") || newer_meaning(n.op, g.opset))
      np->set_domain(kOwnDomain);
    for (int v : n.inputs) np->add_input(v >= 0 ? g.values[size_t(v)].name : "");
    for (int v : n.outputs) np->add_output(v >= 0 ? g.values[size_t(v)].name : "");
    for (auto& [k, a] : n.attrs) attribute_to_proto(k, a, np->add_attribute());  // no bodies here
  }
  // Outputs whose dtype is unknown are left out: inference then records them in value_info, where
  // Terrace's own inference writes too (it leaves declared outputs alone).
  for (int v : g.outputs)
    if (!export_type(g, v, gp->add_output())) gp->mutable_output()->RemoveLast();
  return m;
}

// Takes what `t` tells about value `v` where its ValueInfo lacks it; true when a dim or a whole
// shape became known.
bool learn(Graph& g, int v, const onnx::TypeProto& t) {
  ValueInfo& info = g.values[size_t(v)].info;
  if (info.kind != ValueKind::Tensor || !t.has_tensor_type()) return false;
  const auto& tt = t.tensor_type();
  DType dtype;
  if (!info.dtype && dtype_from_onnx(tt.elem_type(), &dtype)) info.dtype = dtype;
  if (!tt.has_shape()) return false;
  std::vector<int64_t> dims;
  std::vector<std::string> names;
  for (const auto& d : tt.shape().dim()) {
    dims.push_back(d.has_dim_value() && d.dim_value() >= 0 ? d.dim_value() : -1);
    names.push_back(d.has_dim_param() ? d.dim_param() : "");
  }
  if (!info.shape) {
    info.shape = dims;
    info.dim_names = names;
    return true;
  }
  if (info.shape->size() != dims.size()) return false;
  info.dim_names.resize(dims.size());
  bool learnt = false;
  for (size_t d = 0; d < dims.size(); ++d) {
    if ((*info.shape)[d] >= 0) continue;
    if (dims[d] >= 0) {
      (*info.shape)[d] = dims[d];
      info.dim_names[d].clear();
      learnt = true;
    } else if (info.dim_names[d].empty()) {
      info.dim_names[d] = names[d];
    }
  }
  return learnt;
}

}  // namespace

int infer_static_shapes(Graph& g, const PassConfig&) {
  if (g.opset < 1) return 0;
  // ONNX 1.12 knows opsets up to 17: a newer graph is inferred as opset 17, the ops that changed
  // since in Terrace's own domain (newer_meaning).
  onnx::ModelProto m = to_model(g, std::min(g.opset, 17));
  infer_shapes(m);  // best effort: on failure it records nothing
  int learnt = 0;
  auto take = [&](const onnx::ValueInfoProto& vi) {
    const int v = g.find_value(vi.name());
    if (v >= 0 && !is_constant(g, v) && learn(g, v, vi.type())) ++learnt;
  };
  for (const auto& vi : m.graph().value_info()) take(vi);
  for (const auto& vi : m.graph().output()) take(vi);
  return learnt;
}

}  // namespace terrace::passes
