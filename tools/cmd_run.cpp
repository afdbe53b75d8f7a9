// terrace run (placeholder).
#include "tools/commands.h"

namespace terrace::cli {
int cmd_run(const Args&) { throw UsageError{"not implemented yet"}; }
}  // namespace terrace::cli
