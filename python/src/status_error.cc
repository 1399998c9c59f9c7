#include "status_error.h"

namespace deepinfer::python {

void ThrowIfError(const Status& s) {
  if (s.ok()) return;
  PyObject* type = PyExc_RuntimeError;
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange: type = PyExc_ValueError; break;
    case StatusCode::kNotFound: type = PyExc_FileNotFoundError; break;
    case StatusCode::kUnimplemented: type = PyExc_NotImplementedError; break;
    case StatusCode::kIoError: type = PyExc_OSError; break;
    default: break;
  }
  PyErr_SetString(type, s.message().c_str());
  throw pybind11::error_already_set();
}

}  // namespace deepinfer::python
