// ONNX import: parse, validate (Terrace's checks, ONNX's checker, shape inference), convert to Graph.
#include "interp/onnx_import.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <unordered_map>

#include <onnx/checker.h>
#include <onnx/defs/data_type_utils.h>

#include "interp/log.h"
#include "interp/op_versions.h"
#include "interp/raw_data_split.h"
#include "interp/shape_infer.h"
#include "interp/tensor_proto.h"
#include "interp/verify.h"

namespace terrace {

namespace {

using AttrType = onnx::AttributeProto::AttributeType;

void tensor_type_info(const onnx::TypeProto_Tensor& t, ValueInfo& vi) {
  DType d;
  if (t.elem_type() != 0 && dtype_from_onnx(t.elem_type(), &d)) vi.dtype = d;
  if (!t.has_shape()) return;
  vi.shape.emplace();
  for (const auto& dim : t.shape().dim()) {
    vi.shape->push_back(dim.has_dim_value() ? dim.dim_value() : -1);
    vi.dim_names.push_back(dim.has_dim_param() ? dim.dim_param() : "");
  }
}

// Static facts from an ONNX type; sequences and optionals record their tensors' dtype.
ValueInfo value_info_from_type(const onnx::TypeProto& t) {
  ValueInfo vi;
  const onnx::TypeProto* elem = nullptr;
  switch (t.value_case()) {
    case onnx::TypeProto::kTensorType: tensor_type_info(t.tensor_type(), vi); return vi;
    case onnx::TypeProto::kSequenceType:
      vi.kind = ValueKind::Sequence;
      elem = &t.sequence_type().elem_type();
      break;
    case onnx::TypeProto::kOptionalType:
      vi.kind = ValueKind::Optional;
      elem = &t.optional_type().elem_type();
      if (elem->has_sequence_type()) elem = &elem->sequence_type().elem_type();
      break;
    default: vi.kind = ValueKind::Unknown; return vi;
  }
  if (elem->has_tensor_type()) {
    DType d;
    if (dtype_from_onnx(elem->tensor_type().elem_type(), &d)) vi.dtype = d;
  }
  return vi;
}

// ONNX's own spelling of a type ("tensor(float)", "seq(tensor(int64))"): TYPE_PROTO attributes
// (Optional's `type`, ...) become String attributes holding it.
std::string type_string(const onnx::TypeProto& t, const std::string& what) {
  try {
    return *onnx::Utils::DataTypeUtils::ToType(t);
  } catch (const std::exception& e) {
    fail(ErrorCode::InvalidModel, what, ": invalid type: ", e.what());
  }
}

// Old models leave `type` unset; then the field that holds a value says what it is.
AttrType attribute_type(const onnx::AttributeProto& a, const std::string& what) {
  if (a.type() != onnx::AttributeProto::UNDEFINED) return a.type();
  if (a.has_f()) return onnx::AttributeProto::FLOAT;
  if (a.has_i()) return onnx::AttributeProto::INT;
  if (a.has_s()) return onnx::AttributeProto::STRING;
  if (a.has_t()) return onnx::AttributeProto::TENSOR;
  if (a.has_g()) return onnx::AttributeProto::GRAPH;
  if (a.floats_size()) return onnx::AttributeProto::FLOATS;
  if (a.ints_size()) return onnx::AttributeProto::INTS;
  if (a.strings_size()) return onnx::AttributeProto::STRINGS;
  if (a.tensors_size()) return onnx::AttributeProto::TENSORS;
  if (a.graphs_size()) return onnx::AttributeProto::GRAPHS;
  fail(ErrorCode::InvalidModel, what, " has neither a type nor a value");
}

// Frees a field's storage (clear() would keep its capacity).
template <typename Field> void free_field(Field* f) { Field().Swap(f); }

// Initializers of at least this many bytes are file-backed (Tensor::file_backed).
constexpr size_t kFileBackedBytes = size_t(1) << 20;

void release_data(onnx::TensorProto& t) {
  delete t.release_raw_data();
  free_field(t.mutable_float_data());
  free_field(t.mutable_int32_data());
  free_field(t.mutable_int64_data());
  free_field(t.mutable_double_data());
  free_field(t.mutable_uint64_data());
  free_field(t.mutable_string_data());
}

// Converts one (sub)graph (releasing its initializers' data as it goes); `parent` is the enclosing graph's builder, for captures.
class GraphBuilder {
 public:
  GraphBuilder(const GraphBuilder* parent, int opset) : parent_(parent), opset_(opset) {}
  std::shared_ptr<Graph> build(onnx::GraphProto& gp, const std::string& where);

 private:
  int resolve(const std::string& name, const std::string& what);
  ValueInfo info_for(const std::string& name) const;
  std::shared_ptr<Graph> subgraph(onnx::GraphProto& gp, const std::string& what);
  Attribute attribute(onnx::AttributeProto& a, const std::string& what);
  void add_node(onnx::NodeProto& np, const std::string& where);

  const GraphBuilder* parent_;
  int opset_;
  std::shared_ptr<Graph> g_;
  std::unordered_map<std::string, const onnx::TypeProto*> types_;
};

ValueInfo GraphBuilder::info_for(const std::string& name) const {
  for (const GraphBuilder* b = this; b; b = b->parent_) {
    auto it = b->types_.find(name);
    if (it != b->types_.end()) return value_info_from_type(*it->second);
    int id = b->g_->find_value(name);
    if (id >= 0) return b->g_->value(id).info;
  }
  ValueInfo unknown;  // no type recorded anywhere
  unknown.kind = ValueKind::Unknown;
  return unknown;
}

// The value a name refers to; in a subgraph, a name defined outside becomes a capture.
int GraphBuilder::resolve(const std::string& name, const std::string& what) {
  int id = g_->find_value(name);
  if (id >= 0) return id;
  TERRACE_CHECK(parent_, InvalidModel, what, " reads '", name, "', which is not defined");
  id = g_->add_value(name, info_for(name));
  g_->captures.push_back(id);
  return id;
}

std::shared_ptr<Graph> GraphBuilder::subgraph(onnx::GraphProto& gp, const std::string& what) {
  std::shared_ptr<Graph> body = GraphBuilder(this, opset_).build(gp, what + ": ");
  // What the body reads from outside, this graph reads too: from its own values or, in turn,
  // as its own capture.
  for (int c : body->captures) resolve(body->value(c).name, what);
  return body;
}

Attribute GraphBuilder::attribute(onnx::AttributeProto& a, const std::string& what) {
  Attribute r;
  using K = Attribute::Kind;
  switch (attribute_type(a, what)) {
    case onnx::AttributeProto::FLOAT: r.kind = K::Float; r.f = a.f(); break;
    case onnx::AttributeProto::INT: r.kind = K::Int; r.i = a.i(); break;
    case onnx::AttributeProto::STRING: r.kind = K::String; r.s = a.s(); break;
    case onnx::AttributeProto::TENSOR: r.kind = K::Tensor; r.t = tensor_from_proto(a.t(), what); break;
    case onnx::AttributeProto::GRAPH: r.kind = K::Graph; r.g = subgraph(*a.mutable_g(), what); break;
    case onnx::AttributeProto::FLOATS:
      r.kind = K::Floats;
      r.floats.assign(a.floats().begin(), a.floats().end());
      break;
    case onnx::AttributeProto::INTS:
      r.kind = K::Ints;
      r.ints.assign(a.ints().begin(), a.ints().end());
      break;
    case onnx::AttributeProto::STRINGS:
      r.kind = K::Strings;
      r.strings.assign(a.strings().begin(), a.strings().end());
      break;
    case onnx::AttributeProto::TENSORS:
      r.kind = K::Tensors;
      for (const auto& t : a.tensors()) r.tensors.push_back(tensor_from_proto(t, what));
      break;
    case onnx::AttributeProto::GRAPHS:
      r.kind = K::Graphs;
      for (auto& g : *a.mutable_graphs()) r.graphs.push_back(subgraph(g, what));
      break;
    case onnx::AttributeProto::TYPE_PROTO: r.kind = K::String; r.s = type_string(a.tp(), what); break;
    case onnx::AttributeProto::TYPE_PROTOS:
      r.kind = K::Strings;
      for (const auto& tp : a.type_protos()) r.strings.push_back(type_string(tp, what));
      break;
    default:
      fail(ErrorCode::NotImplemented, what, ": attribute type ",
           onnx::AttributeProto_AttributeType_Name(a.type()), " is not supported");
  }
  return r;
}

void GraphBuilder::add_node(onnx::NodeProto& np, const std::string& where) {
  std::string what = where + "node '" + np.name() + "' (" + np.op_type() + ")";
  std::optional<Op> op = op_from_name(np.op_type());
  TERRACE_CHECK(op && is_default_domain(np.domain()), NotImplemented, what, ": op '",
                np.op_type(), "' of domain '", np.domain(), "' is not supported");
  Node n;
  n.op = *op;
  n.name = np.name();
  for (auto& a : *np.mutable_attribute())
    n.attrs.emplace(a.name(), attribute(a, what + ", attribute '" + a.name() + "'"));
  for (const auto& in : np.input()) n.inputs.push_back(in.empty() ? -1 : resolve(in, what));
  int index = int(g_->nodes.size());
  if (n.name.empty()) {
    n.anonymous = "#" + std::to_string(index);
    for (const auto& out : np.output())
      if (!out.empty()) {
        n.anonymous += " -> '" + out + "'";
        break;
      }
  }
  for (const auto& out : np.output()) {
    int id = out.empty() ? -1 : g_->add_value(out, info_for(out));
    if (id >= 0) g_->values[size_t(id)].producer = index;
    n.outputs.push_back(id);
  }
  g_->nodes.push_back(std::move(n));
}

std::shared_ptr<Graph> GraphBuilder::build(onnx::GraphProto& gp, const std::string& where) {
  g_ = std::make_shared<Graph>();
  g_->name = gp.name();
  g_->opset = opset_;
  for (const auto& v : gp.value_info()) types_[v.name()] = &v.type();
  for (const auto& v : gp.input()) types_[v.name()] = &v.type();
  for (const auto& v : gp.output()) types_[v.name()] = &v.type();
  for (auto& t : *gp.mutable_initializer()) {
    std::string what = where + "initializer '" + t.name() + "'";
    // A large one in a file's pages, which the OS may take back once a compiled tier has its own
    // copy (packed weights) and nothing reads this one: resident memory stays near one copy.
    Tensor value = tensor_from_proto(t, what, kFileBackedBytes);
    CutRawData::done(t);
    release_data(t);  // the proto's copy is no longer needed: peak memory stays near one copy
    value.drop_resident_pages();  // read back from the page cache by the first call
    ValueInfo info;
    info.dtype = value.dtype();
    info.shape = value.shape();
    info.dim_names.resize(value.shape().size());
    int id = g_->add_value(t.name(), std::move(info));
    g_->initializers.emplace(id, std::move(value));
  }
  for (const auto& v : gp.input())
    if (g_->find_value(v.name()) < 0) g_->inputs.push_back(g_->add_value(v.name(), info_for(v.name())));
  for (auto& np : *gp.mutable_node()) add_node(np, where);
  for (const auto& v : gp.output())
    g_->outputs.push_back(resolve(v.name(), where + "graph output '" + v.name() + "'"));
  return g_;
}

// ONNX 1.12's checker rejects any IR version newer than its own (8), though a model of opset 17
// or less uses nothing newer that verify_model has not already rejected (new data types are
// unknown codes there). So newer models are checked as if they were version 8.
// ONNX's checker writes "Node () has input size 2 ...\n\n==> Context: Bad node spec for node.
// Name:  OpType: Relu": one line here, with the node's op type (and name) where it says "Node ()".
std::string checker_message(const std::string& raw) {
  std::string main = raw, context;
  if (size_t at = raw.find("==> Context:"); at != std::string::npos) {
    main = raw.substr(0, at);
    context = raw.substr(at + 12);
  }
  auto squeeze = [](std::string t) {
    std::string out;
    for (char c : t) {
      const char w = (c == '\n' || c == '\r' || c == '\t') ? ' ' : c;
      if (w == ' ' && (out.empty() || out.back() == ' ')) continue;
      out += w;
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out;
  };
  main = squeeze(main);
  context = squeeze(context);
  if (size_t at = context.find("OpType: "); at != std::string::npos && main.rfind("Node ()", 0) == 0) {
    std::string op = context.substr(at + 8);
    op = op.substr(0, op.find(' '));
    main.replace(0, 7, "Node (" + op + ")");
  }
  return context.empty() ? main : main + " [" + context + "]";
}

// ONNX's checker wants every main-graph input, output and value_info tensor to carry a shape
// field; ONNX Runtime loads models without one (exporters leave a computed output's rank
// unknown), and so does Terrace: such fields get an empty shape for the checker only, which
// checks its presence, and lose it again after (an empty shape would say rank 0).
std::vector<onnx::TypeProto_Tensor*> shapes_for_checker(onnx::GraphProto& g) {
  std::vector<onnx::TypeProto_Tensor*> lent;
  auto lend = [&](onnx::ValueInfoProto& v) {
    if (!v.has_type() || !v.type().has_tensor_type() || v.type().tensor_type().has_shape()) return;
    onnx::TypeProto_Tensor* t = v.mutable_type()->mutable_tensor_type();
    t->mutable_shape();
    lent.push_back(t);
  };
  for (auto& v : *g.mutable_input()) lend(v);
  for (auto& v : *g.mutable_output()) lend(v);
  for (auto& v : *g.mutable_value_info()) lend(v);
  return lent;
}

void run_onnx_checker(onnx::ModelProto& m) {
  int64_t ir_version = m.ir_version();
  if (ir_version > onnx::IR_VERSION) m.set_ir_version(onnx::IR_VERSION);
  const std::vector<onnx::TypeProto_Tensor*> lent = shapes_for_checker(*m.mutable_graph());
  std::string error;
  try {
    onnx::checker::check_model(m);
  } catch (const std::exception& e) {
    error = e.what();
  }
  for (onnx::TypeProto_Tensor* t : lent) t->clear_shape();
  m.set_ir_version(ir_version);
  TERRACE_CHECK(error.empty(), InvalidModel, "ONNX checker: ", checker_message(error));
}

// ONNX 1.12 knows opsets up to 17. For a newer model, its checker and shape inference run with
// the default opset taken as 17, which is right for every node whose version in force is 17 or
// older or differs only by new types (VersionForm::Types); the other nodes (VersionForm::Own,
// verify_model has checked them) move to kOwnDomain, which ONNX skips and Terrace's own inference
// covers, and come back when the guard ends.
class NewerVersionsHidden {
 public:
  explicit NewerVersionsHidden(onnx::ModelProto& m) : m_(m) {
    for (auto& o : *m.mutable_opset_import())
      if (is_default_domain(o.domain()) && o.version() > 17) {
        opset_ = int(o.version());
        entry_ = &o;
      }
    if (!entry_) return;
    entry_->set_version(17);
    onnx::OperatorSetIdProto* own = m.add_opset_import();
    own->set_domain(kOwnDomain);
    own->set_version(1);
    hide(*m.mutable_graph());
  }
  ~NewerVersionsHidden() {
    if (!entry_) return;
    for (onnx::NodeProto* n : hidden_) n->set_domain(std::string());
    m_.mutable_opset_import()->RemoveLast();
    // entry_ may have moved when the list grew: find the default domain again.
    for (auto& o : *m_.mutable_opset_import())
      if (is_default_domain(o.domain())) o.set_version(opset_);
  }
  NewerVersionsHidden(const NewerVersionsHidden&) = delete;
  NewerVersionsHidden& operator=(const NewerVersionsHidden&) = delete;

 private:
  void hide(onnx::GraphProto& g) {
    for (auto& n : *g.mutable_node()) {
      for (auto& a : *n.mutable_attribute()) {
        if (a.has_g()) hide(*a.mutable_g());
        for (auto& sub : *a.mutable_graphs()) hide(sub);
      }
      std::optional<Op> op = op_from_name(n.op_type());
      if (!op || !is_default_domain(n.domain())) continue;
      const OpVersion* v = op_version_in_force(*op, opset_);
      if (!v || v->form == VersionForm::Types) continue;
      n.set_domain(kOwnDomain);
      hidden_.push_back(&n);
    }
  }

  onnx::ModelProto& m_;
  onnx::OperatorSetIdProto* entry_ = nullptr;
  int opset_ = 0;
  std::vector<onnx::NodeProto*> hidden_;
};

Model convert_model(onnx::ModelProto& mp, const std::string& base_dir) {
  Model m;
  m.ir_version = mp.ir_version();
  for (const auto& o : mp.opset_import())
    m.opsets[is_default_domain(o.domain()) ? "" : o.domain()] = o.version();
  m.producer = mp.producer_name();
  m.dir = base_dir;
  // verify_model admits older opsets only where every op means what it means at kMinOpset.
  int opset = std::max(default_opset(mp), kMinOpset);
  m.graph = GraphBuilder(nullptr, opset).build(*mp.mutable_graph(), "");
  return m;
}

}  // namespace

namespace {

// Parses the model with `parse(message, recursion_limit)` (from bytes or from a file); InvalidModel
// saying why it does not parse.
template <typename Parse>
void parse_model(Parse&& parse, onnx::ModelProto& mp) {
  if (parse(&mp, kModelRecursionLimit)) return;
  // Deeper nesting than the limit also fails to parse: tell the two apart with a looser limit
  // (parsing recurses once per level; a few thousand levels fit any thread's stack).
  onnx::ModelProto deep;
  TERRACE_CHECK(!parse(&deep, 3000), InvalidModel, "If/Loop/Scan bodies are nested more than ",
                kMaxSubgraphDepth, " levels deep (the limit Terrace takes)");
  fail(ErrorCode::InvalidModel, "not an ONNX model: the protobuf does not parse (truncated, corrupt, or nested over 1000 levels deep?)");
}

}  // namespace

Model load_onnx_bytes(std::string_view bytes, const std::string& base_dir) {
  try {
    TERRACE_CHECK(!bytes.empty(), InvalidModel, "the model is empty (0 bytes)");
    onnx::ModelProto mp;
    parse_model([&](onnx::ModelProto* m, int limit) { return parse_proto(bytes, m, limit); }, mp);
    return load_onnx_model(mp, base_dir);
  } catch (const std::bad_alloc&) {
    fail(ErrorCode::OutOfMemory, "out of memory while loading the model");
  }
}

namespace {
Model load_model_from(onnx::ModelProto& mp, const std::string& base_dir, const std::string& link_root) {
  try {
    verify_model(mp, base_dir, link_root);  // before ONNX's checker, which crashes on some malformed models
    std::vector<std::string> warnings;
    {
      NewerVersionsHidden hidden(mp);
      run_onnx_checker(mp);
      warnings = infer_shapes(mp);
    }
    Model model = convert_model(mp, base_dir);
    for (const std::string& w : warnings) log(LogLevel::Warn, "model: ", w);
    model.graph->warnings = std::move(warnings);
    return model;
  } catch (const std::bad_alloc&) {
    fail(ErrorCode::OutOfMemory, "out of memory while loading the model");
  }
}
}  // namespace

Model load_onnx_model(onnx::ModelProto& mp, const std::string& base_dir) { return load_model_from(mp, base_dir, ""); }

Model load_onnx_file(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  try {
    onnx::ModelProto mp;
    // Large weights are read from the file's mapping, not copied by protobuf first
    // (interp/raw_data_split.h); a model with none is parsed from the file in blocks.
    const FileMapping file(path);
    TERRACE_CHECK(!file.bytes().empty(), InvalidModel, "the model is empty (0 bytes)");
    std::optional<SplitModel> split = split_large_raw_data(file.bytes(), kFileBackedBytes);
    CutRawData cut(true);
    if (split) {
      parse_model([&](onnx::ModelProto* m, int limit) { return parse_proto(split->parsed, m, limit); }, mp);
      std::string().swap(split->parsed);
      for (const auto& [k, bytes] : split->cut)
        if (k < size_t(mp.graph().initializer_size())) cut.add(&mp.graph().initializer(int(k)), bytes);
    } else {
      size_t size = 0;
      parse_model([&](onnx::ModelProto* m, int limit) { return parse_proto_file(path, m, &size, limit); }, mp);
    }
    // A model file that is a symbolic link (the Hugging Face cache's snapshots/REV/model.onnx):
    // its external data may also lie in the folder the link resolves into.
    std::error_code ec;
    std::filesystem::path target = std::filesystem::canonical(path, ec);
    return load_model_from(mp, dir.empty() ? "." : dir, ec ? "" : target.parent_path().string());
  } catch (const std::bad_alloc&) {
    throw Error(ErrorCode::OutOfMemory, path + ": out of memory while loading the model");
  } catch (const Error& e) {
    if (e.code() == ErrorCode::IoError) throw;  // opening or reading the file: it names the path
    throw Error(e.code(), path + ": " + e.message());
  }
}

}  // namespace terrace
