// Weight updates from Python: the begin/update/commit/abort transaction object and the
// one-call forms, bound onto refit.Engine.
#pragma once

#include <pybind11/pybind11.h>

#include "runtime/engine.h"

namespace refit::python {

void bind_updates(pybind11::module_& m, pybind11::class_<Engine>& engine_class);

}  // namespace refit::python
