// A model's chat template for Python (what refit.LLM.chat renders with): the server's own
// loader, request parser and embedded-Jinja2 renderer, so an offline chat gets exactly the
// prompt `refit serve` would build. Inside the module Jinja2 runs on the host interpreter.
#pragma once

#include <pybind11/pybind11.h>

namespace refit::python {

void bind_chat_template(pybind11::module_& m);

}  // namespace refit::python
