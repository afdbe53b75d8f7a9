// The table of op versions from opset 18 on (interp/op_versions.def) and its lookups.
#include "interp/op_versions.h"

#include <sstream>

namespace terrace {

namespace {
const OpVersion kVersions[] = {
#define TERRACE_OP_VERSION(name, since, form, min_in, max_in, min_out, max_out, attrs, note) \
  {Op::name, since, VersionForm::form, min_in, max_in, min_out, max_out, attrs, note},
#include "interp/op_versions.def"
#undef TERRACE_OP_VERSION
};
}  // namespace

std::span<const OpVersion> op_versions() { return kVersions; }

const OpVersion* op_version_in_force(Op op, int opset) {
  const OpVersion* found = nullptr;
  for (const OpVersion& v : kVersions)  // a few hundred entries, read once per node at load
    if (v.op == op && v.since <= opset && (!found || v.since > found->since)) found = &v;
  return found;
}

bool version_has_attribute(const OpVersion& v, const std::string& name) {
  std::istringstream in(v.attributes);
  std::string a;
  while (in >> a)
    if (a == name) return true;
  return false;
}

const char* version_form_name(VersionForm f) {
  switch (f) {
    case VersionForm::Types: return "Types";
    case VersionForm::Own: return "Own";
    case VersionForm::Missing: return "Missing";
  }
  return "?";
}

}  // namespace terrace
