// Static shape inference: ONNX's per-op inference functions behind guards, with all-or-nothing results.
#include <string>
#include "interp/shape_infer.h"

#include <algorithm>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <unordered_map>
#include <vector>

#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>

#include "interp/error.h"
#include "interp/tensor_proto.h"

namespace terrace {

namespace {

using onnx::InferenceContext;

// Skips one node's inference: ONNX records the error and carries on with the next node.
[[noreturn]] void skip(const std::string& op, const std::string& why) {
  throw onnx::InferenceError("Terrace skipped inference of " + op + ": " + why);
}

// The rank of input i where inference already knows it, else -1.
int64_t input_rank(InferenceContext& ctx, size_t i) {
  if (i >= ctx.getNumInputs()) return -1;
  const onnx::TypeProto* t = ctx.getInputType(i);
  if (!t || !t->has_tensor_type() || !t->tensor_type().has_shape()) return -1;
  return t->tensor_type().shape().dim_size();
}

const onnx::AttributeProto* attr(InferenceContext& ctx, const char* name) {
  return ctx.getAttribute(name);
}

void check_in_range(const std::string& op, const char* name, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v >= hi)
    skip(op, std::string(name) + " " + std::to_string(v) + " is outside [" + std::to_string(lo) +
                 ", " + std::to_string(hi) + ")");
}

// `axis` indexes the first input's dims; Flatten's may equal the rank, OneHot's the output rank.
void check_axis(const std::string& op, InferenceContext& ctx) {
  const onnx::AttributeProto* a = attr(ctx, "axis");
  int64_t r = input_rank(ctx, 0);
  if (!a || r < 0 || op == "ConcatFromSequence") return;
  int64_t lo = op == "OneHot" ? -(r + 1) : -r;
  int64_t hi = op == "OneHot" || op == "Flatten" ? r + 1 : r;
  check_in_range(op, "axis", a->i(), lo, hi);
}

void check_axes(const std::string& op, InferenceContext& ctx) {
  const onnx::AttributeProto* a = attr(ctx, "axes");
  int64_t r = input_rank(ctx, 0);
  if (!a || r < 0) return;
  int64_t out_rank = op == "Unsqueeze" ? r + a->ints_size() : r;
  for (int64_t v : a->ints()) check_in_range(op, "axes", v, -out_rank, out_rank);
}

void check_perm(const std::string& op, InferenceContext& ctx) {
  const onnx::AttributeProto* a = attr(ctx, "perm");
  int64_t r = input_rank(ctx, 0);
  if (!a || r < 0) return;
  if (a->ints_size() != r) skip(op, "perm does not match the input rank");
  std::vector<bool> seen(size_t(r), false);
  for (int64_t v : a->ints()) {
    check_in_range(op, "perm", v, 0, r);
    if (seen[size_t(v)]) skip(op, "perm repeats an axis");
    seen[size_t(v)] = true;
  }
}

// Convolution and pooling attributes: positive sizes (they divide), one entry per spatial dim.
void check_spatial(const std::string& op, InferenceContext& ctx) {
  int64_t r = input_rank(ctx, 0);
  for (const char* name : {"kernel_shape", "strides", "dilations", "output_padding", "output_shape", "pads"}) {
    const onnx::AttributeProto* a = attr(ctx, name);
    if (!a || op == "Pad") continue;  // Pad's old `pads` attribute covers every dim
    bool positive = std::string(name) != "pads" && std::string(name) != "output_padding";
    for (int64_t v : a->ints())
      if (positive && v <= 0) skip(op, std::string(name) + " must be positive");
    int64_t per_dim = std::string(name) == "pads" ? 2 : 1;
    if (r >= 2 && a->ints_size() != per_dim * (r - 2))
      skip(op, std::string(name) + " does not match the input's spatial rank");
    if (r >= 0 && r < 2) skip(op, "the input has no spatial dims");
  }
}

// Counts that inference divides by or multiplies into sizes: positive, and small enough that a
// blocksize squared cannot overflow to zero.
void check_counts(const std::string& op, InferenceContext& ctx) {
  for (const char* name : {"group", "blocksize"}) {
    const onnx::AttributeProto* a = attr(ctx, name);
    if (a) check_in_range(op, name, a->i(), 1, int64_t(1) << 20);
  }
  const onnx::AttributeProto* b = attr(ctx, "batch_dims");
  if (b) check_in_range(op, "batch_dims", b->i(), 0, std::max<int64_t>(input_rank(ctx, 0), 1));
}

// Convolutions index the weights' dims, and MaxUnpool the indices' dims, by the data's rank.
void check_same_rank(const std::string& op, InferenceContext& ctx, size_t other) {
  int64_t r = input_rank(ctx, 0), ro = input_rank(ctx, other);
  if (r >= 0 && ro >= 0 && r != ro)
    skip(op, "input " + std::to_string(other) + " has another rank than input 0");
}

// Signal ops index their input's dims without checking its rank.
void check_signal_rank(const std::string& op, InferenceContext& ctx) {
  int64_t r = input_rank(ctx, 0);
  if (r < 0) return;
  if (op == "STFT" && r != 3) skip(op, "the signal must have rank 3");
  if (op == "DFT" && r < 2) skip(op, "the input must have rank 2 or more");
}

// Inputs that inference divides by when their values are known (Range's delta, Slice's steps).
void check_nonzero_input(const std::string& op, InferenceContext& ctx, size_t i) {
  if (i >= ctx.getNumInputs()) return;
  const onnx::TensorProto* data = ctx.getInputData(i);
  if (!data) return;
  Tensor t = tensor_from_proto(*data, op + " input " + std::to_string(i));
  if (t.dtype() == DType::String) return;
  for (int64_t k = 0; k < t.numel(); ++k)
    if (t.get_as_double(k) == 0) skip(op, "input " + std::to_string(i) + " holds a zero");
}

// A rank-giving input known to be longer than kMaxRank: skip, so no 2^40-dim shape is built (a
// declared one is refused at load; this catches lengths inference itself computed).
void check_rank_length(const std::string& op, InferenceContext& ctx) {
  int second = -1;
  for (int i : {rank_giving_input(op, &second), second}) {
    if (i < 0 || size_t(i) >= ctx.getNumInputs()) continue;
    const onnx::TypeProto* t = ctx.getInputType(size_t(i));
    if (!t || !t->has_tensor_type() || !t->tensor_type().has_shape()) continue;
    for (const auto& d : t->tensor_type().shape().dim())
      if (d.has_dim_value() && d.dim_value() > kMaxRank)
        skip(op, "input " + std::to_string(i) + " holds " + std::to_string(d.dim_value()) + " values, more dims than " +
                     std::to_string(kMaxRank));
  }
}

void check_node(const std::string& op, InferenceContext& ctx) {
  check_rank_length(op, ctx);
  check_axis(op, ctx);
  check_axes(op, ctx);
  check_perm(op, ctx);
  check_spatial(op, ctx);
  check_counts(op, ctx);
  if (op == "Conv" || op == "ConvInteger" || op == "ConvTranspose" || op == "MaxUnpool")
    check_same_rank(op, ctx, 1);
  if (op == "QLinearConv") check_same_rank(op, ctx, 3);
  check_signal_rank(op, ctx);
  if (op == "Range") check_nonzero_input(op, ctx, 2);
  if (op == "STFT") check_nonzero_input(op, ctx, 1);
  if (op == "Slice") check_nonzero_input(op, ctx, 4);
}

// The context the guards see: the node's attributes, with the schema's defaults filling in
// absent ones (an absent `axis` of -1 is as out of range for a scalar as an explicit one).
class WithDefaults final : public InferenceContext {
 public:
  WithDefaults(InferenceContext& ctx, const onnx::OpSchema& schema) : ctx_(ctx), schema_(schema) {}
  const onnx::AttributeProto* getAttribute(const std::string& name) const override {
    if (const onnx::AttributeProto* a = ctx_.getAttribute(name)) return a;
    auto it = schema_.attributes().find(name);
    if (it == schema_.attributes().end()) return nullptr;
    const onnx::AttributeProto& d = it->second.default_value;
    return d.type() == onnx::AttributeProto::UNDEFINED ? nullptr : &d;
  }
  size_t getNumInputs() const override { return ctx_.getNumInputs(); }
  const onnx::TypeProto* getInputType(size_t i) const override { return ctx_.getInputType(i); }
  const onnx::TensorProto* getInputData(size_t i) const override { return ctx_.getInputData(i); }
  size_t getNumOutputs() const override { return ctx_.getNumOutputs(); }
  onnx::TypeProto* getOutputType(size_t i) override { return ctx_.getOutputType(i); }
  onnx::GraphInferencer* getGraphAttributeInferencer(const std::string& name) override {
    return ctx_.getGraphAttributeInferencer(name);
  }
  const onnx::SparseTensorProto* getInputSparseData(size_t i) const override {
    return ctx_.getInputSparseData(i);
  }
  const onnx::TensorShapeProto* getSymbolicInput(size_t i) const override {
    return ctx_.getSymbolicInput(i);
  }

 private:
  InferenceContext& ctx_;
  const onnx::OpSchema& schema_;
};

// ONNX's schemas, each with its inference function wrapped in check_node. The wrapped copies are
// made once per schema and live as long as the process, as ONNX's own schemas do.
class GuardedRegistry : public onnx::ISchemaRegistry {
 public:
  const onnx::OpSchema* GetSchema(const std::string& key, const int version,
                                  const std::string& domain) const override {
    const onnx::OpSchema* s = onnx::OpSchemaRegistry::Schema(key, version, domain);
    if (!s || !s->has_type_and_shape_inference_function()) return s;
    std::lock_guard<std::mutex> lock(mu_);
    std::unique_ptr<onnx::OpSchema>& guarded = cache_[s];
    if (!guarded) {
      guarded = std::make_unique<onnx::OpSchema>(*s);
      onnx::InferenceFunction inner = s->GetTypeAndShapeInferenceFunction();
      guarded->TypeAndShapeInferenceFunction([key, inner, s](InferenceContext& ctx) {
        WithDefaults seen(ctx, *s);
        check_node(key, seen);
        inner(ctx);
      });
    }
    return guarded.get();
  }

 private:
  mutable std::mutex mu_;
  mutable std::unordered_map<const onnx::OpSchema*, std::unique_ptr<onnx::OpSchema>> cache_;
};

void collect_graphs(onnx::GraphProto* g, std::vector<onnx::GraphProto*>& out) {
  out.push_back(g);
  for (auto& n : *g->mutable_node())
    for (auto& a : *n.mutable_attribute()) {
      if (a.has_g()) collect_graphs(a.mutable_g(), out);
      for (auto& sub : *a.mutable_graphs()) collect_graphs(&sub, out);
    }
}

}  // namespace

int rank_giving_input(const std::string& op, int* second) {
  if (second) *second = op == "Col2Im" ? 2 : -1;
  if (op == "ConstantOfShape") return 0;
  if (op == "Expand" || op == "Reshape" || op == "Col2Im") return 1;
  return -1;
}

// ---- Terrace's own inference of the nodes ONNX 1.12 has no schema for (kOwnDomain) ----
namespace {

using TypeMap = std::unordered_map<std::string, const onnx::TypeProto*>;

const onnx::TypeProto* known_type(const TypeMap& types, const onnx::NodeProto& n, int i) {
  if (i >= n.input_size() || n.input(i).empty()) return nullptr;
  auto it = types.find(n.input(i));
  if (it == types.end() || !it->second->has_tensor_type() || it->second->tensor_type().elem_type() == 0)
    return nullptr;
  return it->second;
}

const onnx::AttributeProto* node_attr(const onnx::NodeProto& n, const char* name) {
  for (const auto& a : n.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

int64_t attr_int_or(const onnx::NodeProto& n, const char* name, int64_t def) {
  const onnx::AttributeProto* a = node_attr(n, name);
  return a ? a->i() : def;
}

// The integer values of input i when an initializer of this graph holds them.
std::optional<std::vector<int64_t>> constant_ints(const onnx::GraphProto& g, const onnx::NodeProto& n, int i) {
  if (i >= n.input_size() || n.input(i).empty()) return std::nullopt;
  for (const auto& t : g.initializer())
    if (t.name() == n.input(i)) {
      if (t.data_type() != onnx::TensorProto::INT64) return std::nullopt;
      return tensor_from_proto(t, n.op_type() + " input " + std::to_string(i)).to_int64_vector();
    }
  return std::nullopt;
}

using Dims = std::vector<std::optional<int64_t>>;  // nullopt: not known
std::optional<Dims> dims_of(const onnx::TypeProto* t) {
  if (!t || !t->tensor_type().has_shape()) return std::nullopt;
  Dims d;
  for (const auto& dim : t->tensor_type().shape().dim())
    d.push_back(dim.has_dim_value() ? std::optional<int64_t>(dim.dim_value()) : std::nullopt);
  return d;
}

std::optional<Dims> broadcast_dims(const Dims& a, const Dims& b) {
  Dims out(std::max(a.size(), b.size()));
  for (size_t k = 0; k < out.size(); ++k) {
    std::optional<int64_t> x = k < out.size() - a.size() ? 1 : a[k - (out.size() - a.size())];
    std::optional<int64_t> y = k < out.size() - b.size() ? 1 : b[k - (out.size() - b.size())];
    if (x && y) {
      if (*x != *y && *x != 1 && *y != 1) return std::nullopt;  // the kernel reports it
      out[k] = *x == 1 ? *y : *x;
    } else if (x && *x != 1) out[k] = x;
    else if (y && *y != 1) out[k] = y;
  }
  return out;
}

// Reduce* from opset 18: axes from the `axes` input when it is a constant.
std::optional<Dims> reduce_dims(const onnx::GraphProto& g, const onnx::NodeProto& n, const Dims& in) {
  std::optional<std::vector<int64_t>> axes =
      n.input_size() > 1 && !n.input(1).empty() ? constant_ints(g, n, 1) : std::vector<int64_t>{};
  if (!axes) return std::nullopt;
  const int64_t r = int64_t(in.size());
  std::vector<bool> reduced(in.size(), axes->empty() && !attr_int_or(n, "noop_with_empty_axes", 0));
  for (int64_t a : *axes) {
    if (a < -r || a >= r) return std::nullopt;
    reduced[size_t(a < 0 ? a + r : a)] = true;
  }
  bool keep = attr_int_or(n, "keepdims", 1) != 0;
  Dims out;
  for (size_t k = 0; k < in.size(); ++k)
    if (!reduced[k]) out.push_back(in[k]);
    else if (keep) out.push_back(1);
  return out;
}

// Split from opset 18 (num_outputs, or the `split` input when constant).
std::optional<Dims> split_dims(const onnx::GraphProto& g, const onnx::NodeProto& n, int out, const Dims& in) {
  const int64_t r = int64_t(in.size());
  int64_t axis = attr_int_or(n, "axis", 0);
  if (axis < -r || axis >= r) return std::nullopt;
  if (axis < 0) axis += r;
  Dims d = in;
  std::optional<int64_t> len = in[size_t(axis)];
  const bool split_given = n.input_size() > 1 && !n.input(1).empty();
  std::optional<std::vector<int64_t>> sizes = constant_ints(g, n, 1);
  if (sizes && out < int64_t(sizes->size())) d[size_t(axis)] = (*sizes)[size_t(out)];
  else if (len && !split_given && n.output_size() > 0) {  // num_outputs: equal parts, the last smaller
    int64_t parts = n.output_size(), chunk = (*len + parts - 1) / parts;
    int64_t start = chunk * out;
    d[size_t(axis)] = std::max<int64_t>(0, std::min(chunk, *len - start));
  } else {
    d[size_t(axis)] = std::nullopt;
  }
  return d;
}

// Output `out` of an own-domain node: dtype, and the shape where the op's rule is simple.
bool own_output_type(const onnx::GraphProto& g, const onnx::NodeProto& n, int out, const TypeMap& types,
                     onnx::TypeProto* result) {
  const std::string& op = n.op_type();
  const onnx::TypeProto* x = known_type(types, n, 0);
  int32_t elem = x ? x->tensor_type().elem_type() : 0;
  if (op == "Cast") elem = int32_t(attr_int_or(n, "to", 0));
  else if (op == "CastLike") elem = known_type(types, n, 1) ? known_type(types, n, 1)->tensor_type().elem_type() : 0;
  else if (op == "OptionalHasElement" || op == "RegexFullMatch") elem = onnx::TensorProto::BOOL;
  else if (op == "StringConcat" || (op == "StringSplit" && out == 0)) elem = onnx::TensorProto::STRING;
  else if (op == "StringSplit") elem = onnx::TensorProto::INT64;
  else if (op == "DequantizeLinear" && attr_int_or(n, "output_dtype", 0)) elem = int32_t(attr_int_or(n, "output_dtype", 0));
  else if (op == "DequantizeLinear") elem = known_type(types, n, 1) ? known_type(types, n, 1)->tensor_type().elem_type() : 0;
  else if (op == "QuantizeLinear") {
    const onnx::TypeProto* zp = known_type(types, n, 2);
    elem = zp ? zp->tensor_type().elem_type() : int32_t(attr_int_or(n, "output_dtype", 0));
    if (elem == 0) elem = onnx::TensorProto::UINT8;
  } else if (op == "OptionalGetElement" || (x && x->tensor_type().elem_type() == 0)) {
    return false;
  }
  if (elem == 0) return false;
  result->mutable_tensor_type()->set_elem_type(elem);
  std::optional<Dims> in = dims_of(x), dims;
  static const std::set<std::string> kSameShape = {"Gelu", "Mish", "BitwiseNot", "Cast", "CastLike",
      "GroupNormalization", "RMSNormalization", "RotaryEmbedding", "QuantizeLinear", "DequantizeLinear", "IsNaN", "IsInf"};
  if (!in) return true;
  if (kSameShape.count(op)) dims = in;
  else if (op == "BitwiseAnd" || op == "BitwiseOr" || op == "BitwiseXor" || op == "StringConcat") {
    if (std::optional<Dims> y = dims_of(known_type(types, n, 1))) dims = broadcast_dims(*in, *y);
  } else if (op.rfind("Reduce", 0) == 0) dims = reduce_dims(g, n, *in);
  else if (op == "Split") dims = split_dims(g, n, out, *in);
  if (!dims) return true;
  auto* shape = result->mutable_tensor_type()->mutable_shape();
  for (const auto& d : *dims) {
    auto* dim = shape->add_dim();
    if (d) dim->set_dim_value(*d);
  }
  return true;
}

onnx::TypeProto initializer_type(const onnx::TensorProto& t) {
  onnx::TypeProto tp;
  tp.mutable_tensor_type()->set_elem_type(t.data_type());
  auto* shape = tp.mutable_tensor_type()->mutable_shape();
  for (int64_t d : t.dims()) shape->add_dim()->set_dim_value(d);
  return tp;
}

// One round over every graph: types for the outputs of own-domain nodes whose inputs' types are
// now known. Returns how many it added (to value_info, where ONNX's next round reads them).
int infer_own_nodes(const std::vector<onnx::GraphProto*>& graphs) {
  int added = 0;
  for (onnx::GraphProto* g : graphs) {
    std::vector<onnx::TypeProto> init_types;
    init_types.reserve(size_t(g->initializer_size()));
    TypeMap types;
    for (const auto& t : g->initializer()) {
      init_types.push_back(initializer_type(t));
      types[t.name()] = &init_types.back();
    }
    for (const auto& v : g->input()) types[v.name()] = &v.type();
    for (const auto& v : g->value_info()) types[v.name()] = &v.type();
    std::set<std::string> outputs;
    for (const auto& v : g->output()) outputs.insert(v.name());
    std::vector<onnx::ValueInfoProto> found;
    for (const auto& n : g->node()) {
      if (n.domain() != kOwnDomain) continue;
      for (int i = 0; i < n.output_size(); ++i) {
        const std::string& name = n.output(i);
        if (name.empty() || types.count(name) || outputs.count(name)) continue;
        onnx::ValueInfoProto vi;
        vi.set_name(name);
        try {
          if (!own_output_type(*g, n, i, types, vi.mutable_type())) continue;
        } catch (const Error&) {
          continue;  // a bad constant: the kernel reports it at run time
        }
        found.push_back(std::move(vi));
      }
    }
    for (auto& vi : found) *g->add_value_info() = std::move(vi);
    added += int(found.size());
  }
  return added;
}

// ONNX's inference, then Terrace's for own-domain nodes, in rounds until nothing new is learnt
// (each round reaches at least one more own node, so a chain of k own nodes takes k + 1 rounds).
void infer_rounds(onnx::ModelProto& m, onnx::ISchemaRegistry* registry, const std::vector<onnx::GraphProto*>& graphs) {
  for (int round = 0; round < 64; ++round) {
    onnx::shape_inference::InferShapes(m, registry);
    if (infer_own_nodes(graphs) == 0) return;
  }
}

}  // namespace

namespace {
// "[2,3]", "[N,3]" or "[?]" for a type's shape; "" when it has no shape.
std::string shape_text(const onnx::TypeProto& t) {
  if (!t.has_tensor_type() || !t.tensor_type().has_shape()) return "";
  const int rank = t.tensor_type().shape().dim_size();
  if (rank > 16) return "[" + std::to_string(rank) + " dims]";  // a warning line stays short
  std::string s = "[";
  for (const auto& d : t.tensor_type().shape().dim()) {
    if (s.size() > 1) s += ",";
    s += d.has_dim_value() ? std::to_string(d.dim_value()) : d.has_dim_param() ? d.dim_param() : "?";
  }
  return s + "]";
}

// True when two shapes cannot describe one tensor: ranks differ, or a dim known in both differs.
bool shapes_conflict(const onnx::TypeProto& a, const onnx::TypeProto& b) {
  if (!a.has_tensor_type() || !b.has_tensor_type() || !a.tensor_type().has_shape() || !b.tensor_type().has_shape())
    return false;
  const auto &da = a.tensor_type().shape().dim(), &db = b.tensor_type().shape().dim();
  if (da.size() != db.size()) return true;
  for (int i = 0; i < da.size(); ++i)
    if (da[i].has_dim_value() && db[i].has_dim_value() && da[i].dim_value() != db[i].dim_value()) return true;
  return false;
}
}  // namespace

std::vector<std::string> infer_shapes(onnx::ModelProto& m) {
  static GuardedRegistry* registry = new GuardedRegistry();  // never destroyed: see the class
  struct Saved {
    onnx::GraphProto* g;
    google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> value_info, outputs;
  };
  std::vector<onnx::GraphProto*> graphs;
  collect_graphs(m.mutable_graph(), graphs);
  std::vector<Saved> saved;
  for (onnx::GraphProto* g : graphs) saved.push_back({g, g->value_info(), g->output()});
  auto restore = [&] {
    for (Saved& s : saved) {
      *s.g->mutable_value_info() = s.value_info;
      *s.g->mutable_output() = s.outputs;
    }
  };
  try {
    infer_rounds(m, registry, graphs);
    return {};
  } catch (const std::exception&) {
    restore();
  }
  // ONNX's inference is all or nothing: one declared shape that disagrees with what the graph
  // computes (an output declared [1,3], computed [2,3]) throws, and every inferred shape is lost
  // (a plan of graph breaks instead of one region). Declared shapes are hints: infer again without
  // them, keep their dtypes, and say where they disagreed.
  for (Saved& s : saved) {
    s.g->clear_value_info();
    for (auto& out : *s.g->mutable_output())
      if (out.type().has_tensor_type()) out.mutable_type()->mutable_tensor_type()->clear_shape();
  }
  try {
    infer_rounds(m, registry, graphs);
  } catch (const std::exception&) {
    restore();
    return {};
  }
  std::vector<std::string> warnings;
  for (Saved& s : saved)
    for (int i = 0; i < s.outputs.size() && i < s.g->output_size(); ++i) {
      const onnx::ValueInfoProto &declared = s.outputs[i], &computed = s.g->output(i);
      if (shapes_conflict(declared.type(), computed.type()))
        warnings.push_back("output '" + declared.name() + "' is declared " + shape_text(declared.type()) +
                           " but the graph computes " + shape_text(computed.type()) + "; the computed shape is used");
    }
  if (warnings.empty())  // the conflict was in value_info: name it generally
    warnings.push_back("declared value_info shapes disagree with what the graph computes; they were ignored");
  return warnings;
}

}  // namespace terrace
