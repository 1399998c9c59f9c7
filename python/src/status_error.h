// Engine errors as Python exceptions: a failed deepinfer::Status becomes the builtin exception a Python caller
// expects for its kind (a bad argument is a ValueError, a missing file a FileNotFoundError), carrying the
// engine's message unchanged so that it still names the parameter or file at fault.
#pragma once
#include <pybind11/pybind11.h>

#include "deepinfer/status.h"

namespace deepinfer::python {

// Throws (pybind11 turns it into the Python exception) unless `s` is ok. Call with the GIL held.
void ThrowIfError(const Status& s);

}  // namespace deepinfer::python
