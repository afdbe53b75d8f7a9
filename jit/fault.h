// Fault injection for tests and drills: TERRACE_FAULT names faults to inject; inert unless set.
#pragma once
#include <string_view>

namespace terrace {

// True when the TERRACE_FAULT environment variable lists `fault` among its comma-separated
// entries, e.g. TERRACE_FAULT=compile-fail:cpu,miscompile:cpu. Read on every call, so tests may
// set and unset the variable at run time.
bool fault_enabled(std::string_view fault);

}  // namespace terrace
