// The on/off settings read from the environment (TERRACE_STRICT, TERRACE_PACKED_GEMM,
// TERRACE_WINOGRAD, TERRACE_CUDNN_TUNE): one spelling rule for all, so that "off" never leaves a
// feature silently on.
#pragma once

namespace terrace {

// The value of `var`: 1, on, true or yes is true; 0, off, false or no is false (any case); unset
// or empty gives `fallback`. Anything else is Error(InvalidArgument) naming the variable.
bool env_flag(const char* var, bool fallback);

// Every on/off variable above, read once so that a bad value is refused where a session starts
// rather than when (and where) a compile first reads it.
void check_env_flags();

}  // namespace terrace
