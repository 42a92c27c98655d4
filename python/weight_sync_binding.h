// Weight sync from a torch.distributed trainer for Python (refit._refit.WeightSync,
// ReceivedUpdate): what refit.LLM's init_weights_update_group and
// update_weights_from_distributed are built on.
#pragma once

#include <pybind11/pybind11.h>

namespace refit::python {

void bind_weight_sync(pybind11::module_& m);

}  // namespace refit::python
