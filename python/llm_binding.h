// The continuous-batching Scheduler (the server's engine loop) bound for Python: what
// refit.LLM and refit.AsyncLLMEngine (refit/llm.py, vLLM-shaped) are built on.
#pragma once

#include <pybind11/pybind11.h>

namespace refit::python {

void bind_llm(pybind11::module_& m);

}  // namespace refit::python
