// TierManager's insides (tiers/tier_manager.h), shared by dispatch.cpp (a call's guarded dispatch
// and its profile), tier_manager.cpp (promotion up the ladder, compiles, reports) and validator.cpp
// (shadow validation, re-checks, demotion). Not for other files.
#pragma once
#include <atomic>
#include <chrono>
#include <compare>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "interp/interpreter.h"
#include "tiers/backend.h"
#include "tiers/symbolic_lowering.h"
#include "tiers/tier_manager.h"

namespace terrace {

class JobPool;

inline constexpr size_t kMaxGuardFailuresKept = 16;
inline constexpr size_t kMaxSignaturesKept = 64;
// A size is hot (gets an exact version beside the symbolic one) with this many calls and at least
// a quarter of the region's counted calls.
inline constexpr int64_t kHotCalls = 16;
using VersionList = std::vector<std::shared_ptr<Version>>;
inline double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// A version's identity: the rung of the ladder that compiled it, and the input signature it was
// compiled for. Counting, compiling, failures and dispatch share it.
struct VersionKey {
  size_t rung = 0;
  Signature signature;
  auto operator<=>(const VersionKey&) const = default;
};

// What dispatch measures of a region, call by call: what promotion, continuous validation and the
// report read.
struct RegionProfile {
  int64_t calls = 0, deopts = 0;
  double total_ms = 0;  // on any tier
  // Calls served one rung below a key's (the interpreter for rung 0), counted for its promotion.
  std::map<VersionKey, int> served;
  std::vector<std::string> guard_failures;  // most recent first, at most kMaxGuardFailuresKept
  double interp_ms = 0;  // the interpreter's latest time for the region (a re-check's cost)
  // Continuous validation: compiled time served, and interpreter time spent re-checking.
  double served_ms = 0, recheck_ms = 0;
  double validate_ms = 0;  // spent in calls shadow-validating new versions (TierManager::Core::validate)
  // The shape histogram: calls per input signature, those interpreted and those a symbolic version
  // served (exact versions' calls are not counted: their dispatch stays allocation-free); at most
  // kMaxSignaturesKept signatures.
  std::map<Signature, int64_t> seen;
  int64_t seen_calls = 0;
  // Per signature seen, its first call's one-element integer inputs (a symbol's value inputs).
  std::map<Signature, ScalarValues> seen_values;
};

struct TierManager::RegionState {
  const Region* region = nullptr;
  std::shared_ptr<const VersionList> versions = std::make_shared<VersionList>();  // atomic access
  mutable std::mutex mu;  // guards everything below
  RegionProfile profile;
  std::set<VersionKey> compiling, failed;  // keys in flight / never to retry
  // Where validation stands: a version's first calls still to check (Pending), all checked
  // (Passed), a mismatch (Failed, with `failure`), or nothing to validate (Off).
  enum class Validation { Off, Pending, Passed, Failed } validation = Validation::Pending;
  std::string failure;  // why the last demoted version failed
  // Whether the region still compiles new signatures on the first rung, and if not why (no compiled
  // tier, a failed compile, the specialization limit, no background thread).
  enum class Compiles { Open, Stopped } compiles = Compiles::Open;
  std::string stopped;  // the reason, when Stopped
  double compile_ms = 0;
  double tune_ms = 0;  // of compile_ms, timing candidates (jit/tuning.h)
  int64_t promoted_at_call = -1;
  bool recheck_queued = false;  // continuous validation: one re-check at a time per region
  int64_t rechecks = 0;
  // Per rung: why the region cannot run there ("" when it can).
  std::vector<std::string> unable;
  // The lowest rung that can run it: 0, or above for a node only a higher tier compiles (tier 2's
  // Attention); the interpreter's calls count toward it.
  size_t entry = 0;
  std::string climb;  // why a region with a compiled version is not on the next rung up
  // The region's symbolic version on its entry rung: none yet (Open), being compiled, published,
  // or refused (`symbolic_why`: the region keeps static versions).
  enum class Symbolic { Open, Compiling, Published, Refused } symbolic = Symbolic::Open;
  std::string symbolic_why;
  // A published symbolic version of one residue class (SymbolicDim::modulus): the other class may
  // get a second one, tried once.
  int64_t class_modulus = 0;
  bool class_divisible = false, complement_tried = false;
  std::pair<int, int> symbolic_at{-1, -1};

  std::shared_ptr<const VersionList> load() const { return std::atomic_load(&versions); }
  void stop(std::string why) {  // caller holds mu
    compiles = Compiles::Stopped;
    stopped = std::move(why);
  }
  void publish(std::shared_ptr<Version> v) {  // caller holds mu
    auto next = std::make_shared<VersionList>(*load());
    // Highest tier first, a tier's exact versions before its symbolic one: dispatch takes the first
    // version whose guards pass.
    auto at = std::find_if(next->begin(), next->end(), [&](const auto& o) {
      return o->tier < v->tier || (o->tier == v->tier && o->symbolic && !v->symbolic);
    });
    next->insert(at, std::move(v));
    std::atomic_store(&versions, std::shared_ptr<const VersionList>(std::move(next)));
  }
};

struct TierManager::Core : std::enable_shared_from_this<Core> {
  Core(std::shared_ptr<const Graph> g, Plan p, const Options& o, std::vector<std::unique_ptr<Backend>> ladder)
      : graph_ptr(std::move(g)), graph_(*graph_ptr), plan_(std::move(p)), options_(o), ladder_(std::move(ladder)) {
    for (const Region& r : plan_.regions) {
      regions_.push_back(std::make_unique<RegionState>());
      RegionState& st = *regions_.back();
      st.region = &r;
      release_after_.push_back(released_after(graph_, r));
      st.unable.assign(ladder_.size(), "");
      for (size_t k = 0; k < ladder_.size(); ++k)
        for (int n : r.nodes)
          if (std::string why = ladder_[k]->can_compile(graph_, graph_.nodes[size_t(n)]); !why.empty()) {
            st.unable[k] = graph_.nodes[size_t(n)].describe() + ": " + why;
            break;
          }
      while (st.entry < ladder_.size() && !st.unable[st.entry].empty()) ++st.entry;
      if (st.entry + 1 < ladder_.size() && !st.unable[st.entry + 1].empty())
        st.climb = "stays on " + rung_name(st.entry) + ": " + st.unable[st.entry + 1];
      if (options_.validate == ValidateMode::Off) st.validation = RegionState::Validation::Off;
      if (ladder_.empty()) st.stop("no compiled tier enabled");
      else if (st.entry == ladder_.size()) st.stop(st.unable[0]);
    }
  }

  // "tier 1": how reports name a rung.
  std::string rung_name(size_t rung) const { return "tier " + std::to_string(int(ladder_[rung]->tier())); }
  // What serves a region's calls below `rung`: the rung under it, or the interpreter below its entry.
  std::string below(const RegionState& st, size_t rung) const {
    return rung > st.entry ? rung_name(rung - 1) : std::string("the interpreter");
  }

  void interpret_region(const Region& region, Frame& frame) const;
  // After the interpreter ran a compiled region for validation or a re-check: lets the OS take back
  // the pages of its file-backed initializers (Tensor::drop_resident_pages), which the compiled
  // version may not read (oneDNN's packed copies); one that reads them faults them back.
  void drop_constant_pages(const Region& region) const;
  RegionRun execute(int r, Frame& frame, int64_t call);
  Tier dispatch(RegionState& st, Frame& frame, int64_t call, RegionRun& run);
  // What trying a region's versions on one call came to (try_versions).
  struct Attempt {
    std::shared_ptr<Version> served;      // the version whose results are in `out`
    std::shared_ptr<Version> refused;     // one whose run-time check rejected the inputs, with `why`
    std::string why;
    std::optional<GuardFailure> failure;  // the first guard that failed, when none served
    std::vector<Tensor> out;
    double run_ms = 0;
  };
  // Runs the first version whose signature and guards match (highest rung first); a version whose
  // code fails otherwise is demoted and the next one tried.
  Attempt try_versions(RegionState& st, Frame& frame, std::vector<Tensor>& in, CallTally& tally);
  // A served call: validated or sampled for a re-check, its results into the frame, counted
  // toward the next rung. Returns the tier whose results the frame holds.
  Tier finish_served(RegionState& st, Frame& frame, const std::vector<Tensor>& in, Attempt& a, RegionRun& run,
                     int64_t call);
  // True when no climb is left for `v`'s signature above its rung (no rung, unable, failed, or
  // the climb stopped). Caller holds st.mu.
  bool at_top(const RegionState& st, const Version& v) const;
  // The interpreter runs the region for a call no version served; counts it toward promotion.
  void interpret_call(RegionState& st, Frame& frame, std::vector<Tensor>& in, const std::optional<Signature>& sig,
                      const std::optional<GuardFailure>& failure, CallTally& tally, int64_t call);
  // Counts a call the rung below `key.rung` served (the interpreter for rung 0) and queues the
  // region's compile on that rung at its promotion threshold. Caller holds st.mu.
  void maybe_promote(RegionState& st, const VersionKey& key, const std::vector<Tensor>& in, int64_t call);
  void compile_job(RegionState& st, VersionKey key, std::vector<Tensor> in, int64_t call);
  // Publishes `v` (its signature and guards set) with `code`, which rung `rung` compiled in `ms`
  // for call `call`: its first calls validated as Options say. Caller holds st.mu.
  void publish_version(RegionState& st, std::shared_ptr<Version> v, size_t rung, std::unique_ptr<CompiledRegion> code,
                       double ms, int64_t call);
  // Queues key's compile (st.mu held); "" or why it could not be queued.
  std::string enqueue_compile(RegionState& st, const VersionKey& key, const std::vector<Tensor>& in, int64_t call);
  // The shape histogram (tiers/symbolic_policy.cpp). Counts a call of `sig`; returns its count
  // (kHotCalls for one the full histogram does not keep).
  int64_t count_signature(RegionState& st, const Signature& sig, const std::vector<Tensor>& in);
  // After an interpreted call: queues the region's symbolic version once its calls took
  // Options::symbolic_after signatures differing in one dim. Caller holds st.mu.
  void consider_symbolic(RegionState& st, const Signature& sig, const std::vector<Tensor>& in, int64_t call);
  // After a symbolic version served a call: queues an exact version for a hot size. Returns the
  // size's count: a call plan (which the histogram does not see) may serve it once the count
  // could have made it hot. Caller holds st.mu.
  int64_t note_symbolic_call(RegionState& st, const std::vector<Tensor>& in, int64_t call);
  // True when `sig`'s calls are hot enough for an exact version beside a symbolic one.
  bool hot(const RegionState& st, const Signature& sig) const;
  // True unless the region's published symbolic version's guards refuse `in` (a size outside its
  // range, as 1 often is): those sizes get exact versions as before. Caller holds st.mu.
  bool symbolic_takes(const RegionState& st, const std::vector<Tensor>& in) const;
  // `complement`: the second version, for the other residue class (a failure leaves the first).
  void symbolic_job(RegionState& st, SymbolicDim sym, std::vector<Tensor> in, int64_t call, bool complement);
  // Queues the other residue class's symbolic version once enough of its sizes were seen.
  void consider_complement(RegionState& st, const std::vector<Tensor>& in, int64_t call);
  bool validate(RegionState& st, Version& v, Frame& frame, CallTally& tally, const std::vector<Tensor>& in,
                const std::vector<Tensor>& out);
  // Why `out` (the version's) differs from `expected` (the interpreter's), or nullopt.
  std::optional<std::string> mismatch(const Version& v, const Region& region, const std::vector<Tensor>& in,
                                       const std::vector<Tensor>& expected, const std::vector<Tensor>& out) const;
  // Continuous validation: runs the interpreter on a copy of a served call in the background.
  void maybe_recheck(RegionState& st, const std::shared_ptr<Version>& v, const std::vector<Tensor>& in,
                     const std::vector<Tensor>& out, double run_ms, int64_t call);
  void recheck_job(RegionState& st, std::shared_ptr<Version> v, std::vector<Tensor> in,
                   std::vector<Tensor> out, int64_t call);
  // The region whose published versions hold `v`, or null.
  RegionState* holder(const std::shared_ptr<Version>& v) const;
  // Marks v demoted with the reason (st.mu held by the caller).
  void demote(RegionState& st, Version& v, const std::string& why);
  std::vector<RegionReport> report() const;

  std::shared_ptr<const Graph> graph_ptr;
  const Graph& graph_;
  const Plan plan_;
  const Options options_;
  // The compiled tiers, lowest first: a region climbs from the interpreter to rung 0, then from each
  // rung to the next once that rung's promotion threshold of calls was served below it.
  std::vector<std::unique_ptr<Backend>> ladder_;
  std::vector<std::unique_ptr<RegionState>> regions_;
  std::vector<std::vector<std::vector<int>>> release_after_;  // per region: released_after (partition.h)
  std::atomic<uint64_t> epoch_{0};  // TierManager::epoch
  JobPool* jobs_ = nullptr;    // compiles; valid while any job may run (leaked when one is abandoned)
  JobPool* checks_ = nullptr;  // continuous validation's re-checks, at the lowest priority
};

// Device tensors among a region's inputs, copied to the host for a consumer that is not a
// device-resident version (tier 1, the interpreter, validation), in `in` and in the frame, so that
// the next host consumer of the value finds it there; each copy counted for the call.
inline void inputs_to_host(const Region& region, Frame& frame, std::vector<Tensor>& in, CallTally& tally) {
  for (size_t i = 0; i < in.size(); ++i) {
    if (!in[i].on_device()) continue;
    in[i] = in[i].to_host();
    frame.env[size_t(region.inputs[i])] = RValue(in[i]);
    ++tally.transfers;
  }
}

// What a compile job keeps of a call's inputs (tier_manager.cpp).
std::vector<Tensor> compile_inputs(const std::vector<Tensor>& in);

// Host copies of a region's outputs for a comparison (a device tensor is copied; a host one is
// itself).
inline std::vector<Tensor> host_copies(const std::vector<Tensor>& out) {
  std::vector<Tensor> host;
  for (const Tensor& t : out) host.push_back(t.to_host());
  return host;
}

}  // namespace terrace
