// Helpers the session-level test suites share: a session's options for one tier, the ops of its
// regions, counting a report's lines, and a fault injected for the scope of a test.
#pragma once
#include <stdlib.h>

#include <string>
#include <vector>

#include "tiers/session.h"

namespace terrace::testing {

// Tier `t` at most, without the disk cache (every compile is a real one).
inline Options on_tier(Tier t) {
  Options o;
  o.max_tier = t;
  o.cache_dir = "";
  return o;
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

// TERRACE_FAULT=`fault` until end() or the end of the scope.
struct FaultInjected {
  explicit FaultInjected(const char* fault) { ::setenv("TERRACE_FAULT", fault, 1); }
  ~FaultInjected() { ::unsetenv("TERRACE_FAULT"); }
  void end() { ::unsetenv("TERRACE_FAULT"); }
};

}  // namespace terrace::testing
