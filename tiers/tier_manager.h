// TierManager: per-region profiling, promotion policy, background compilation, guarded dispatch,
// deopt and shadow validation.
#pragma once
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "guards/guard.h"
#include "interp/interpreter.h"
#include "tiers/backend.h"
#include "tiers/options.h"
#include "tiers/partition.h"

namespace terrace {

// A published compiled version of a region: immutable but for its counters.
struct Version {
  Tier tier = Tier::Cpu;
  std::string signature;
  GuardSet guards;
  std::shared_ptr<CompiledRegion> code;
  double compile_ms = 0;
  int64_t promoted_at_call = 0;
  std::atomic<int> validations_left{0};
  std::atomic<bool> demoted{false};
};

// What the report says about a region (a snapshot).
struct RegionReport {
  int id = 0;
  std::string ops;
  Tier tier = Tier::Interp;  // best published, non-demoted tier
  int64_t calls = 0;
  double total_ms = 0;  // time spent in the region over all calls, on any tier
  double compile_ms = 0;
  int64_t promoted_at_call = -1;
  int64_t deopts = 0;
  std::vector<std::string> guard_failures;  // most recent first, capped
  std::string validation = "off";           // "passed", "failed: ...", "pending", "off"
  int64_t rechecks = 0;                     // later calls re-checked in the background
  std::string state;                        // "interpreting", "compiling", "compiled", "stopped: ..."
  int versions = 0;
};

class TierManager {
 public:
  TierManager(const Graph& graph, const Plan& plan, const Options& options,
              std::unique_ptr<Backend> backend);
  ~TierManager();  // waits for background compiles

  // Runs region `r` for call `call` on the frame: a compiled version whose guards pass, or the
  // interpreter. Returns the tier that produced the results.
  Tier execute(int r, Frame& frame, int64_t call);

  std::vector<RegionReport> report() const;
  // Blocks until no compile is in flight (tests and benchmarks; run() never calls it).
  void wait_idle();

 private:
  struct RegionState;
  void interpret_region(const Region& region, Frame& frame) const;
  Tier dispatch(RegionState& st, Frame& frame, int64_t call);
  void maybe_promote(RegionState& st, const std::string& sig, const std::vector<Tensor>& in, int64_t call);
  void compile_job(RegionState& st, std::string sig, std::vector<Tensor> in, int64_t call);
  bool validate(RegionState& st, Version& v, Frame& frame, const std::vector<Tensor>& in,
                const std::vector<Tensor>& out);
  // Why `out` (the version's) differs from `expected` (the interpreter's), or nullopt.
  std::optional<std::string> mismatch(const Region& region, const std::vector<Tensor>& in,
                                       const std::vector<Tensor>& expected, const std::vector<Tensor>& out) const;
  // Continuous validation: runs the interpreter on a copy of a served call in the background.
  void maybe_recheck(RegionState& st, const std::shared_ptr<Version>& v, const std::vector<Tensor>& in,
                     const std::vector<Tensor>& out, double run_ms, int64_t call);
  void recheck_job(RegionState& st, std::shared_ptr<Version> v, std::vector<Tensor> in,
                   std::vector<Tensor> out, int64_t call);
  // Marks v demoted with the reason (st.mu held by the caller).
  void demote(RegionState& st, Version& v, const std::string& why);

  const Graph& graph_;
  const Plan& plan_;
  Options options_;
  std::unique_ptr<Backend> backend_;
  std::vector<std::unique_ptr<RegionState>> regions_;
  struct Jobs;  // the background compile arena (TBB), kept out of this header
  std::unique_ptr<Jobs> jobs_;
};

}  // namespace terrace
