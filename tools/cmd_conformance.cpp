// terrace conformance (placeholder).
#include "tools/commands.h"

namespace terrace::cli {
int cmd_conformance(const Args&) { throw UsageError{"not implemented yet"}; }
}  // namespace terrace::cli
