// How gtest shows refit's enums in parameterized cases and failure messages: by name, not
// as a dump of their bytes. Found by argument-dependent lookup in namespace refit.
#pragma once

#include <ostream>

#include "core/dtype.h"
#include "models/model_config.h"

namespace refit {

inline void PrintTo(DType t, std::ostream* os) { *os << dtype_name(t); }
inline void PrintTo(Architecture a, std::ostream* os) { *os << architecture_name(a); }

}  // namespace refit
