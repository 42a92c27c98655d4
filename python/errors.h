// C++ errors become Python exceptions with the same message (STYLE: convert at the edges).
//
//   refit.Error          (RuntimeError)           refit::Error
//   refit.FormatError    (refit.Error)            refit::FormatError: a malformed file
//   refit.DispatchError  (refit.Error)            refit::DispatchError: no kernel fits
//   refit.UpdateError    (refit.Error, ValueError) a refused weight update (unknown name,
//                                                 wrong shape or dtype, non-finite values)
//   refit.ExportError    (refit.Error, BufferError) a tensor the consumer's DLPack version
//                                                 cannot carry (f8/f4 for PyTorch 1.13)
//
// BufferError is what the array-API standard says __dlpack__ raises when it cannot
// export; ValueError is what Python code expects for a bad argument, so both kinds can
// be caught either as refit.Error or by their standard base.
#pragma once

#include <pybind11/pybind11.h>

#include "core/error.h"

namespace refit::python {

// Thrown inside the bindings; translated to refit.UpdateError.
class UpdateRefused : public Error {
 public:
  using Error::Error;
};

// Thrown inside the bindings; translated to refit.ExportError.
class ExportRefused : public Error {
 public:
  using Error::Error;
};

void register_exceptions(pybind11::module_& m);

// Runs `fn`, turning a refit::Error (not a FormatError: that one is about a file and
// keeps its type) into an UpdateRefused with the same message.
template <typename Fn>
auto as_update_error(Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const FormatError&) {
    throw;
  } catch (const DispatchError&) {
    throw;
  } catch (const UpdateRefused&) {
    throw;
  } catch (const Error& e) {
    throw UpdateRefused(e.what());
  }
}

}  // namespace refit::python
