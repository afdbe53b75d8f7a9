// terrace explain (placeholder).
#include "tools/commands.h"

namespace terrace::cli {
int cmd_explain(const Args&) { throw UsageError{"not implemented yet"}; }
}  // namespace terrace::cli
