// Op versions as data: the default-domain versions from opset 18 on, and how Terrace handles each.
#pragma once
#include <span>

#include "interp/graph.h"

namespace terrace {

// How Terrace treats one op version newer than opset 17 (see interp/op_versions.def).
enum class VersionForm {
  Types,    // only new element types: ONNX 1.12 checks and infers it as its opset-17 version
  Own,      // new op, inputs or attributes: Terrace checks and infers it itself
  Missing,  // not implemented: NotImplemented at load
};

struct OpVersion {
  Op op;
  int since;  // the opset that introduced this version
  VersionForm form;
  int min_inputs, max_inputs, min_outputs, max_outputs;
  const char* attributes;  // the attribute names the version defines, space-separated
  const char* note;        // what changed
};

// Every version from opset 18 on, sorted by op name, then version.
std::span<const OpVersion> op_versions();

// The version of `op` in force at default-domain `opset`, when it is one from opset 18 on;
// nullptr when the op's version in force is 17 or older (or the opset is).
const OpVersion* op_version_in_force(Op op, int opset);

// True when `name` is one of the attributes `v` defines.
bool version_has_attribute(const OpVersion& v, const std::string& name);

const char* version_form_name(VersionForm f);  // "Types", "Own", "Missing"

}  // namespace terrace
