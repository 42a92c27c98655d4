#include "errors.h"

namespace refit::python {

namespace py = pybind11;

namespace {

// Exception classes live for the interpreter's life (the module holds a reference).
PyObject* g_error = nullptr;
PyObject* g_format_error = nullptr;
PyObject* g_dispatch_error = nullptr;
PyObject* g_update_error = nullptr;
PyObject* g_export_error = nullptr;

PyObject* new_exception(py::module_& m, const char* name, py::tuple bases, const char* doc) {
  const std::string qualified = std::string("refit.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases.ptr(), nullptr);
  if (!type) throw py::error_already_set();
  m.add_object(name, py::handle(type));  // the module keeps a reference
  return type;
}

}  // namespace

void register_exceptions(py::module_& m) {
  g_error = new_exception(m, "Error", py::make_tuple(py::handle(PyExc_RuntimeError)),
                          "An error raised by the refit engine; the message names the file, "
                          "tensor or parameter and what was wrong.");
  g_format_error = new_exception(m, "FormatError", py::make_tuple(py::handle(g_error)),
                                 "A checkpoint or tokenizer file is malformed.");
  g_dispatch_error = new_exception(m, "DispatchError", py::make_tuple(py::handle(g_error)),
                                   "No kernel accepts the argument tensors.");
  g_update_error = new_exception(
      m, "UpdateError", py::make_tuple(py::handle(g_error), py::handle(PyExc_ValueError)),
      "A weight update was refused (unknown name, wrong shape or dtype, non-finite values); the "
      "engine keeps its old weights, bit for bit.");
  g_export_error = new_exception(
      m, "ExportError", py::make_tuple(py::handle(g_error), py::handle(PyExc_BufferError)),
      "A tensor cannot be exported to this DLPack consumer (for example float8 to PyTorch 1.13); "
      "the message says what to use instead (Tensor.as_bytes()).");

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const UpdateRefused& e) {
      PyErr_SetString(g_update_error, e.what());
    } catch (const ExportRefused& e) {
      PyErr_SetString(g_export_error, e.what());
    } catch (const FormatError& e) {
      PyErr_SetString(g_format_error, e.what());
    } catch (const DispatchError& e) {
      PyErr_SetString(g_dispatch_error, e.what());
    } catch (const Error& e) {
      PyErr_SetString(g_error, e.what());
    }
  });
}

}  // namespace refit::python
