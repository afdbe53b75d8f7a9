// Helpers the session-level test suites share: a session's options for one tier, the ops of its
// regions, counting a report's lines, and a fault injected for the scope of a test.
#pragma once
#include <stdlib.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "interp/compare.h"
#include "tiers/cpu/cpu_backend.h"
#include "tiers/session.h"

namespace terrace::testing {

// True in a build with tier 1's compiler (tests of compiled tiers skip without it).
inline bool have_tier1() {
  static const bool yes = make_cpu_backend() != nullptr;
  return yes;
}

// Tier `t` at most, without the disk cache (every compile is a real one).
inline Options on_tier(Tier t) {
  Options o;
  o.max_tier = t;
  o.cache_dir = "";
  return o;
}

// The entries (tier-1 objects, tier-2 cubins) a disk code cache at `dir` holds.
inline int cache_entries(const std::filesystem::path& dir) {
  int n = 0;
  std::error_code ec;
  for (auto& e : std::filesystem::directory_iterator(dir / "cpu", ec)) n += e.path().extension() == ".o";
  return n;
}

// How many times `needle` occurs in `text` (overlaps counted).
inline size_t occurrences(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// Each region of the session's plan as its ops ("MatMul,Relu").
inline std::vector<std::string> region_ops(const Session& s) {
  std::vector<std::string> ops;
  for (const Region& r : s.plan().regions) ops.push_back(r.ops());
  return ops;
}

// Four calls of `s` on `in` (a new version's three shadow-validated calls, then one more), each
// output within the tolerance of `want`'s; then `regions` regions on tier 1 with validation passed.
inline void expect_calls_match_and_regions_validated_on_tier1(Session& s, const NamedTensors& in,
                                                              const NamedTensors& want, size_t regions) {
  for (int call = 0; call < 4; ++call) {
    NamedTensors got = s.run(in);
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < want.size(); ++k) {
      Comparison c = compare_tensors(want[k].second, got[k].second, Tolerance::for_dtype(want[k].second.dtype()));
      EXPECT_TRUE(c.equal) << "call " << call << ", " << want[k].first << ": " << c.message;
    }
  }
  const std::string json = s.report_json();
  EXPECT_EQ(occurrences(json, "\"tier\":\"cpu\""), regions) << json;
  EXPECT_EQ(occurrences(json, "\"validation\":\"passed\""), regions) << json;
}

// TERRACE_FAULT=`fault` until end() or the end of the scope.
struct FaultInjected {
  explicit FaultInjected(const char* fault) { ::setenv("TERRACE_FAULT", fault, 1); }
  ~FaultInjected() { ::unsetenv("TERRACE_FAULT"); }
  void end() { ::unsetenv("TERRACE_FAULT"); }
};

// Three calls of `s` on `in`, each followed by a wait for the background compiles: its hot
// regions are compiled and their versions installed.
inline void warm_up(Session& s, const NamedTensors& in) {
  for (int i = 0; i < 3; ++i) {
    s.run(in);
    s.wait_for_compiles();
  }
}

// `g` on tier 1 under TERRACE_FAULT=miscompile:cpu (compiled results perturbed): warmed up, then
// one more call, whose outputs must be the interpreter's (validation caught the perturbation and
// the caller got the interpreter's answer). Returns the session's report JSON for the caller's
// counts.
inline std::string report_after_a_miscompiled_call(std::shared_ptr<const Graph> g, const NamedTensors& in) {
  FaultInjected fault("miscompile:cpu");
  auto s = Session::from_graph(g, on_tier(Tier::Cpu));
  warm_up(*s, in);
  NamedTensors got = s->run(in);
  fault.end();
  const NamedTensors want = Session::from_graph(g, on_tier(Tier::Interp))->run(in);
  EXPECT_EQ(got.size(), want.size());
  for (size_t k = 0; k < want.size() && k < got.size(); ++k)
    EXPECT_TRUE(compare_tensors(want[k].second, got[k].second, Tolerance::for_dtype(DType::Float32)).equal)
        << want[k].first << ": the caller got a perturbed result";
  return s->report_json();
}

}  // namespace terrace::testing
