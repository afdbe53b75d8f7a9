// Backend: what a compiled tier provides to the tier manager; each tier lives in its folder
// (tiers/cpu/, tiers/gpu/) and is registered in tiers/ladder.cpp.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "interp/graph.h"
#include "tiers/options.h"
#include "tiers/partition.h"
#include "tiers/passes/passes.h"
#include "tiers/plan_memory.h"

namespace terrace {

struct SymbolicDim;  // tiers/symbolic_lowering.h

// What one call did, counted as it runs: host<->device copies (tier 2's uploads, the tier
// manager's and the session's downloads) and regions the interpreter ran (a cold region, a
// validation, a deopt). Session::run keeps one per call, for its CallRecord.
struct CallTally {
  int64_t transfers = 0;
  int64_t interpreted = 0;
};

// One region compiled for one input signature.
class CompiledRegion {
 public:
  virtual ~CompiledRegion() = default;
  // Computes the region's outputs (Region::outputs order) from its inputs (Region::inputs order),
  // counting its copies in `tally`.
  virtual std::vector<Tensor> run(const std::vector<Tensor>& inputs, CallTally& tally) = 0;
  std::vector<Tensor> run(const std::vector<Tensor>& inputs) {
    CallTally ignored;
    return run(inputs, ignored);
  }
  // run() with outputs placed by a call plan (tiers/plan_memory.h): `into[i]`, where defined, is
  // output i's buffer when its dtype and shape are the version's own for output i; an output
  // it does not take gets a buffer of its own. The default places none.
  virtual std::vector<Tensor> run_into(const std::vector<Tensor>& inputs, const std::vector<Tensor>& /*into*/,
                                       CallTally& tally) {
    return run(inputs, tally);
  }
  // Per output, how its storage relates to the inputs' and the other outputs' (kOwnOutput, an
  // input's index, kSharedOutput); empty where unknown: then a plan places none of its outputs
  // nor any value it reads (an output might view one).
  std::vector<int> output_storage;
  std::string source;    // the generated code, for dumps and repros
  std::string ir;        // the kernel IR, printed
  // Region inputs whose values (not only dtype and shape) the version was compiled for: small
  // shape-like tensors computed in another step. The tier manager guards their contents.
  std::vector<int> value_inputs;
  // Tensors copied between host and device by run() so far (tier 2; tier 1 copies none). A tier-2
  // version takes host or device inputs and returns device tensors (Tensor::on_device); the tier
  // manager gives every other consumer host tensors.
  std::atomic<int64_t> transfers{0};
  // The device's own time for the version's work, summed over the calls timed (tier 2 times each
  // call with events when $TERRACE_DEVICE_TIMING=1, which synchronises every region: a profiling
  // mode; 0 calls otherwise).
  std::atomic<int64_t> device_ns{0}, device_calls{0};
  // Drops the version's entries in the disk code cache once validation found it wrong, so that
  // the next process compiles it again instead of loading the same wrong code.
  virtual void forget_cached() {}
};

// A whole call plan handed to one tier (Backend::take_plan): every step a version of that tier.
struct WholePlan {
  struct Step {
    std::shared_ptr<CompiledRegion> code;
    std::vector<int> inputs, outputs;  // value ids, in the region's order
  };
  std::vector<Step> steps;
  std::vector<int> inputs, outputs;  // the graph's inputs and outputs (value ids)
  std::vector<std::pair<int, Tensor>> constants;  // the initializers the steps read
  std::vector<Tensor> example_inputs;  // a call's graph inputs (host): the plan's dtypes and shapes
  size_t values = 0;  // the graph's value count (ids are below it)
};

// A call plan a tier took whole (tier 2: one CUDA graph). run() is thread-safe.
class TakenPlan {
 public:
  virtual ~TakenPlan() = default;
  // The graph's outputs (graph order) for `inputs` (graph order, the plan's signature), on the
  // host or, with `on_device`, in the tier's device memory; nullopt when a run-time check of the
  // compiled code fired, so that the caller runs the call step by step (which answers it).
  virtual std::optional<std::vector<Tensor>> run(const std::vector<Tensor>& inputs, bool on_device,
                                                 CallTally& tally) = 0;
  virtual size_t device_bytes() const = 0;  // the memory it holds on its device
  virtual std::string describe() const = 0;  // "CUDA graph of 412 nodes, 18.2 MB"
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Tier tier() const = 0;
  // "" when this backend can compile the node inside a region, else the reason it cannot.
  virtual std::string can_compile(const Graph& graph, const Node& node) const = 0;
  // Calls with one input signature before a region climbs to this tier: on the interpreter for the
  // session's first compiled tier, on the tier below it for the others.
  virtual int promotion_threshold(const Options& options) const = 0;
  // True for a tier whose versions take and return tensors in its device memory: the tier
  // manager hands every other consumer host copies.
  virtual bool device_resident() const { return false; }
  // False where this tier cannot run `next` in the region of the library op `last` that the
  // first tier's rule (absorbs) would put it in: every tier of a session's ladder is asked, and a
  // node some tier refuses starts a region of its own.
  virtual bool fuses(const Node& /*last*/, const Node& /*next*/) const { return true; }
  // True for a node that gets a region of its own (partition's AlonePredicate).
  virtual bool alone(const Node&) const { return false; }
  // Turns on the graph rewrites whose results this tier compiles (the session asks every tier of
  // its ladder before it optimizes): tier 2 fuses attention blocks into one Attention op, which no
  // lower tier runs, so such a region climbs from the interpreter straight to it.
  virtual void configure_passes(passes::PassConfig&) const {}
  // True when `next` joins `alone_node`'s region (partition's AbsorbPredicate).
  virtual bool absorbs(const Graph&, const Node&, const Node&) const { return false; }
  // Per region output, an error allowance for validation on top of the tolerance of ARCHITECTURE.md's "Rules the code keeps" (an
  // undefined tensor: none): a bound on the rounding error of the compiled version's own
  // arithmetic where it legitimately differs from the interpreter's (fp32 products of long
  // reductions against the interpreter's double). `inputs` are the region's inputs of the call.
  virtual std::vector<Tensor> error_allowance(const Graph&, const Region& region,
                                              const std::vector<Tensor>& /*inputs*/) const {
    return std::vector<Tensor>(region.outputs.size());
  }
  // Compiles `region` specialised to the dtypes and shapes of `inputs`. Runs on a background
  // thread; throws Error(CompileFailed) with the compiler's message on failure.
  virtual std::unique_ptr<CompiledRegion> compile(const Graph& graph, const Region& region,
                                                  const std::vector<Tensor>& inputs) = 0;
  // Compiles `region` with one dim symbolic (tiers/symbolic_lowering.h): one version for every size
  // of `sym` in [sym.lo, sym.hi], which it sets; null, and why in `why`, where it cannot. Runs on a
  // background thread. By default a tier compiles static versions only.
  virtual std::unique_ptr<CompiledRegion> compile_symbolic(const Graph& /*graph*/, const Region& /*region*/,
                                                           const std::vector<Tensor>& /*inputs*/, SymbolicDim& /*sym*/,
                                                           std::string& why) {
    why = std::string("the ") + tier_name(tier()) + " tier compiles static versions only";
    return nullptr;
  }
  // Takes `plan` whole, or returns null and says why in `why`. Runs on a background thread; the
  // plan's versions have served calls already. By default a tier takes none.
  virtual std::unique_ptr<TakenPlan> take_plan(const WholePlan& /*plan*/, std::string& why) {
    why = std::string("the ") + tier_name(tier()) + " tier runs plans step by step";
    return nullptr;
  }
  // A block of `bytes` of the memory this tier's versions read and write (run_into's buffers):
  // host memory, unless the tier is device_resident.
  virtual std::unique_ptr<MemoryBlock> memory_block(size_t bytes) { return host_memory_block(bytes); }
  // A copy of host tensor `t` in this backend's device memory, for callers that bind device
  // inputs (tier 2); Error(NotImplemented) for a backend without a device.
  virtual Tensor to_device(const Tensor& t) {
    fail(ErrorCode::NotImplemented, "the ", tier_name(tier()), " tier has no device memory for tensor ",
         shape_str(t.shape()));
  }
};

}  // namespace terrace
