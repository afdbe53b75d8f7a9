// fault_enabled(): parses TERRACE_FAULT.
#include "jit/fault.h"

#include <cstdlib>

namespace terrace {

bool fault_enabled(std::string_view fault) {
  const char* env = std::getenv("TERRACE_FAULT");
  if (!env) return false;
  std::string_view list(env);
  while (!list.empty()) {
    size_t comma = list.find(',');
    std::string_view entry = list.substr(0, comma);
    while (!entry.empty() && entry.front() == ' ') entry.remove_prefix(1);
    while (!entry.empty() && entry.back() == ' ') entry.remove_suffix(1);
    if (entry == fault) return true;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return false;
}

}  // namespace terrace
