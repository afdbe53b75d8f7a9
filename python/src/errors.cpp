// terrace.TerraceError and its subclasses (errors.h).
#include "python/src/errors.h"

#include <string>

#include "interp/error.h"
#include "tools/commands.h"

namespace py = pybind11;

namespace terrace::python {

namespace {

constexpr int kCodes = 0
#define X(name, text) +1
    TERRACE_ERROR_CODES(X)
#undef X
    ;

// The class of each ErrorCode; created once, never freed (they live as long as the interpreter).
PyObject* g_classes[kCodes] = {};

// The standard class an error also is, so that ordinary except clauses catch it (ONNX Runtime's
// flat classes do not); null: RuntimeError only, through TerraceError.
PyObject* standard_base(ErrorCode code) {
  switch (code) {
    case ErrorCode::InvalidArgument: return PyExc_ValueError;
    case ErrorCode::NotImplemented: return PyExc_NotImplementedError;
    case ErrorCode::OutOfMemory: return PyExc_MemoryError;
    case ErrorCode::IoError: return PyExc_OSError;
    default: return nullptr;
  }
}

// A class `terrace.<module>.<name>` over `bases` whose class attribute `code` is `code`.
PyObject* new_class(const std::string& qualified, py::handle bases, py::object code, const char* doc) {
  py::dict attrs;
  attrs["code"] = std::move(code);
  attrs["__doc__"] = doc;
  PyObject* cls = PyErr_NewException(qualified.c_str(), bases.ptr(), attrs.ptr());
  if (!cls) throw py::error_already_set();
  return cls;
}

// terrace.errors.<name>: TerraceError and the standard class the code also is.
void add_error_class(py::module_& m, PyObject* base, ErrorCode code, const char* name, const char* doc) {
  PyObject* also = standard_base(code);
  py::tuple bases = also ? py::make_tuple(py::handle(base), py::handle(also)) : py::make_tuple(py::handle(base));
  g_classes[int(code)] = new_class(std::string("terrace.errors.") + name, bases, py::str(name), doc);
  m.add_object(name, g_classes[int(code)]);
}

void raise(const Error& e) {
  PyObject* cls = g_classes[int(e.code())];
  py::object exc = py::reinterpret_borrow<py::object>(cls)(e.what());
  exc.attr("message") = e.message();
  PyErr_SetObject(cls, exc.ptr());
}

}  // namespace

void register_errors(py::module_& m) {
  PyObject* base = new_class("terrace.TerraceError", PyExc_RuntimeError, py::none(),
                             "A Terrace error; .code is Terrace's name for it (\"InvalidArgument\", ...) "
                             "and .message the text without it.");
  m.add_object("TerraceError", base);
#define X(name, text) add_error_class(m, base, ErrorCode::name, #name, "Terrace: " text ".");
  TERRACE_ERROR_CODES(X)
#undef X
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      raise(e);
    } catch (const cli::UsageError& e) {  // validate's and bench's checks of their arguments
      raise(Error(ErrorCode::InvalidArgument, e.message));
    }
  });
}

}  // namespace terrace::python
