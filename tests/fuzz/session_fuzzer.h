// The session fuzz target's body, shared by the libFuzzer binary (tools/fuzz.sh) and the
// regression replay in test_fuzz.
#pragma once
#include <cstddef>
#include <cstdint>

#include "tiers/options.h"

namespace terrace::fuzz {

struct Outcome {
  bool loaded = false;  // Session::load_bytes accepted the bytes
  int calls = 0;        // run() calls that returned outputs
};

// The options every fuzzed session gets: tier 1 on, hot after 2 calls, no disk cache.
Options fuzz_options();

// Loads the bytes as a model and runs it a few times with random inputs of its declared shapes
// (symbolic dims small), waiting for tier-1 compiles between calls. A terrace::Error is caught
// (a clean refusal); any other exception propagates.
Outcome fuzz_one(const uint8_t* data, size_t size);

}  // namespace terrace::fuzz
