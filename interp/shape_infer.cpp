// Static shape inference: ONNX's per-op inference functions behind guards, with all-or-nothing results.
#include <string>
#include "interp/shape_infer.h"

#include <algorithm>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>

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

void check_node(const std::string& op, InferenceContext& ctx) {
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

namespace {
// "[2,3]", "[N,3]" or "[?]" for a type's shape; "" when it has no shape.
std::string shape_text(const onnx::TypeProto& t) {
  if (!t.has_tensor_type() || !t.tensor_type().has_shape()) return "";
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
    onnx::shape_inference::InferShapes(m, registry);
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
    onnx::shape_inference::InferShapes(m, registry);
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
