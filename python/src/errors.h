// Terrace's errors as Python exceptions: terrace.TerraceError(RuntimeError) and one subclass per
// ErrorCode (terrace.errors.InvalidArgument ...), each carrying .code, Terrace's name for it.
#pragma once
#include <pybind11/pybind11.h>

namespace terrace::python {

// Creates the classes in `m` and translates every terrace::Error thrown through the bindings.
void register_errors(pybind11::module_& m);

}  // namespace terrace::python
